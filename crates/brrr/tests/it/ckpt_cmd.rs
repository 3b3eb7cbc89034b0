//! `brrr ckpt consolidate RUN_DIR`: a `--dp` run's shards become the run directory's
//! `checkpoint.safetensors`, which `brrr sample` and a one-device `brrr train --resume`
//! read; the resumed losses agree with the uninterrupted `--dp` run's to 1e-5 nats (the
//! ranks' partial gradients are summed in another order than one device's GEMM:
//! rounding only, as in `train_dp.rs`).

use brrr::ckpt_cmd::{ConsolidateArgs, run_consolidate};
use brrr::metrics::read_rows;
use brrr::sample::{self, SampleArgs};
use brrr::train::{self, BackendKind, Preset, TrainArgs};
use std::path::{Path, PathBuf};

fn corpus(dir: &Path) -> PathBuf {
    let text = "It was the best of times, it was the worst of times, it was the age of wisdom, \
                it was the age of foolishness, it was the epoch of belief. "
        .repeat(40);
    let p = dir.join("corpus.txt");
    std::fs::write(&p, text).unwrap();
    p
}

fn dp_args(dir: &Path, out: &str, steps: u64, world: usize, zero: u8) -> TrainArgs {
    TrainArgs {
        backend: BackendKind::Cpu,
        steps: Some(steps),
        batch_size: Some(4),
        seq_len: Some(16),
        grad_accum: Some(2),
        seed: Some(7),
        lr: Some(3e-3),
        warmup_steps: Some(2),
        eval_every: Some(3),
        eval_batches: Some(2),
        preset: Some(Preset::Tiny),
        n_layer: Some(2),
        n_head: Some(2),
        n_embd: Some(32),
        block_size: Some(16),
        corpus: Some(corpus(dir)),
        out: Some(dir.join(out)),
        quiet: true,
        dp: Some(world),
        zero: Some(zero),
        ..TrainArgs::default()
    }
}

fn losses(dir: &Path) -> Vec<f32> {
    read_rows(dir.join("metrics.csv"))
        .unwrap()
        .iter()
        .map(|r| r.loss)
        .collect()
}

fn consolidate_args(run: &Path) -> ConsolidateArgs {
    ConsolidateArgs {
        run_dir: run.to_path_buf(),
        ..ConsolidateArgs::default()
    }
}

#[test]
fn consolidated_run_samples_and_resumes_on_one_device() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for (world, zero) in [(2usize, 3u8), (4, 0)] {
        let (straight, stopped) = (format!("straight{world}"), format!("stopped{world}"));
        train::run(&dp_args(d, &straight, 5, world, zero)).unwrap();
        let mut first = dp_args(d, &stopped, 5, world, zero);
        first.stop_after = Some(2);
        train::run(&first).unwrap();
        let run = d.join(&stopped);

        let report = run_consolidate(&consolidate_args(&run)).unwrap();
        println!("{report}");
        assert_eq!((report.world, report.zero, report.step), (world, zero, 2));
        assert_eq!(report.out, run.join("checkpoint.safetensors"));
        assert!(report.out.exists());

        let text = sample::run(&SampleArgs {
            dir: run.clone(),
            prompt: "It was".into(),
            tokens: 8,
            temperature: 0.0,
            top_k: 0,
            seed: 0,
        })
        .unwrap();
        assert!(text.starts_with("It was") && text.len() > 6, "{text:?}");

        // A plain --resume (no --dp) is a one-device run from the consolidated file.
        let s = train::run(&TrainArgs {
            resume: Some(run.clone()),
            quiet: true,
            ..TrainArgs::default()
        })
        .unwrap();
        assert_eq!(s.steps_done, 5);
        let (a, b) = (losses(&d.join(&straight)), losses(&run));
        assert_eq!(a.len(), 5);
        assert_eq!(a[..2], b[..2], "the same --dp run up to the stop");
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-5,
                "--dp {world} --zero {zero} {a:?} vs resumed on one device {b:?}"
            );
        }
    }
}

#[test]
fn consolidate_refuses_to_overwrite_and_names_missing_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    train::run(&dp_args(d, "run", 1, 2, 1)).unwrap();
    let run = d.join("run");
    run_consolidate(&consolidate_args(&run)).unwrap();
    let e = run_consolidate(&consolidate_args(&run))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("checkpoint.safetensors") && e.contains("--force"),
        "{e}"
    );
    let forced = ConsolidateArgs {
        force: true,
        ..consolidate_args(&run)
    };
    run_consolidate(&forced).unwrap();

    std::fs::remove_file(run.join("dp").join("dp-rank1-of2.bin")).unwrap();
    let e = run_consolidate(&ConsolidateArgs {
        out: Some(d.join("elsewhere.safetensors")),
        ..consolidate_args(&run)
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("dp-rank1-of2.bin"), "{e}");
    assert!(!d.join("elsewhere.safetensors").exists());

    let e = run_consolidate(&consolidate_args(d))
        .unwrap_err()
        .to_string();
    assert!(e.contains("config.toml"), "{e}");
}

/// A `--tp` run (at any `--zero`) saves the whole model gathered from its shards:
/// there is nothing to consolidate, `consolidate` says so, and `brrr sample` reads it.
#[test]
fn a_tensor_parallel_zero3_run_is_whole_already() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut a = dp_args(d, "tp", 3, 2, 3);
    (a.tp, a.sp) = (Some(2), true);
    train::run(&a).unwrap();
    let run = d.join("tp");
    assert!(run.join("checkpoint.safetensors").exists());
    let e = run_consolidate(&ConsolidateArgs {
        out: Some(d.join("elsewhere.safetensors")),
        ..consolidate_args(&run)
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("whole checkpoint") && e.contains("--tp 2"),
        "{e}"
    );
    let text = sample::run(&SampleArgs {
        dir: run,
        prompt: "It was".into(),
        tokens: 8,
        temperature: 0.0,
        top_k: 0,
        seed: 0,
    })
    .unwrap();
    assert!(text.starts_with("It was") && text.len() > 6, "{text:?}");
}
