//! One checkpoint story in every layout: `brrr sample` reads a run of any layout (a
//! data-parallel or pipeline run's shards are put together in memory); a pipeline run
//! consolidated into one checkpoint goes on with one device, `--tp 2`, `--dp 4` or
//! another pipeline, and a `--dp 2` run with `--dp 4 --zero 3`, their losses following
//! the run that never stopped; a pipeline run killed with SIGKILL after an evaluation
//! resumes bit for bit.

use brrr::ckpt_cmd::{ConsolidateArgs, run_consolidate};
use brrr::metrics::read_rows;
use brrr::sample::{self, SampleArgs};
use brrr::train::{self, TrainArgs};
use std::path::Path;
use std::process::Command;

fn args(dir: &Path, out: &str) -> TrainArgs {
    TrainArgs {
        steps: Some(5),
        batch_size: Some(4),
        seq_len: Some(16),
        grad_accum: Some(2),
        warmup_steps: Some(1),
        eval_every: Some(2),
        eval_batches: Some(1),
        n_layer: Some(2),
        n_head: Some(2),
        n_embd: Some(32),
        block_size: Some(16),
        synthetic: true,
        out: Some(dir.join(out)),
        quiet: true,
        ..TrainArgs::default()
    }
}

/// Sets a layout's flags.
type SetLayout = fn(&mut TrainArgs);

fn losses(dir: &Path) -> Vec<f32> {
    read_rows(dir.join("metrics.csv"))
        .unwrap()
        .iter()
        .map(|r| r.loss)
        .collect()
}

fn sample_of(dir: &Path) -> String {
    sample::run(&SampleArgs {
        dir: dir.to_path_buf(),
        prompt: "It was".into(),
        tokens: 8,
        temperature: 0.0,
        top_k: 0,
        seed: 0,
    })
    .unwrap()
}

#[test]
fn every_layout_samples_after_training() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let layouts: [(&str, SetLayout); 4] = [
        ("dp", |a| a.dp = Some(2)),
        ("tp", |a| a.tp = Some(2)),
        ("pp", |a| a.pp = Some(2)),
        ("pptp", |a| (a.pp, a.tp) = (Some(2), Some(2))),
    ];
    for (name, set) in layouts {
        let mut a = args(d, name);
        set(&mut a);
        train::run(&a).unwrap();
        let text = sample_of(&d.join(name));
        assert!(
            text.starts_with("It was") && text.len() > 6,
            "{name}: {text:?}"
        );
    }
}

#[test]
fn a_consolidated_pipeline_run_goes_on_in_another_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let pp = |out: &str| TrainArgs {
        pp: Some(2),
        tp: Some(2),
        ..args(d, out)
    };
    train::run(&pp("straight")).unwrap();
    let want = losses(&d.join("straight"));
    assert_eq!(want.len(), 5);
    for (name, set) in [
        (
            "one",
            (|a: &mut TrainArgs| (a.pp, a.tp) = (Some(1), Some(1))) as SetLayout,
        ),
        ("tp", |a| (a.pp, a.tp) = (Some(1), Some(2))),
        ("dp", |a| (a.pp, a.tp, a.dp) = (Some(1), Some(1), Some(4))),
        ("pp-without-tp", |a| (a.pp, a.tp) = (Some(2), Some(1))),
    ] {
        let mut first = pp(name);
        first.stop_after = Some(2);
        train::run(&first).unwrap();
        let run = d.join(name);
        // Another layout from stage files alone is refused, naming the way out.
        let mut other = TrainArgs {
            resume: Some(run.clone()),
            out: None,
            quiet: true,
            ..TrainArgs::default()
        };
        set(&mut other);
        let e = train::run(&other).unwrap_err().to_string();
        assert!(e.contains("brrr ckpt consolidate"), "{e}");
        let report = run_consolidate(&ConsolidateArgs {
            run_dir: run.clone(),
            ..ConsolidateArgs::default()
        })
        .unwrap();
        assert_eq!((report.world, report.step), (4, 2), "{report}");
        let s = train::run(&other).unwrap();
        assert_eq!(s.steps_done, 5, "{name}");
        let got = losses(&run);
        assert_eq!(
            got[..2],
            want[..2],
            "{name}: the same pipeline run up to the stop"
        );
        for (x, y) in got.iter().zip(&want) {
            assert!(
                (x - y).abs() <= 1e-4 * y,
                "{name}: {got:?} vs the pipeline's {want:?}"
            );
        }
    }
}

/// `--dp 2` → `--dp 4 --zero 3`: the consolidated shards of two replicas start four,
/// which take their chunks of it, and the losses follow the two replicas' run.
#[test]
fn a_consolidated_data_parallel_run_goes_on_with_more_replicas() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let dp2 = |out: &str| TrainArgs {
        dp: Some(2),
        zero: Some(1),
        ..args(d, out)
    };
    train::run(&dp2("straight")).unwrap();
    let want = losses(&d.join("straight"));
    let mut first = dp2("grown");
    first.stop_after = Some(2);
    train::run(&first).unwrap();
    let run = d.join("grown");
    run_consolidate(&ConsolidateArgs {
        run_dir: run.clone(),
        ..ConsolidateArgs::default()
    })
    .unwrap();
    let more = TrainArgs {
        resume: Some(run.clone()),
        out: None,
        quiet: true,
        dp: Some(4),
        zero: Some(3),
        ..TrainArgs::default()
    };
    assert_eq!(train::run(&more).unwrap().steps_done, 5);
    let got = losses(&run);
    assert_eq!(got[..2], want[..2]);
    for (x, y) in got.iter().zip(&want) {
        assert!(
            (x - y).abs() <= 1e-4 * y,
            "{got:?} vs the two replicas' {want:?}"
        );
    }
    // It goes on as four replicas from their own shards now.
    let again = TrainArgs {
        steps: Some(6),
        ..more
    };
    assert_eq!(train::run(&again).unwrap().steps_done, 6);
}

/// Steps of a run directory's metrics, read until `rows` are there or the process ended.
fn wait_for_rows(out: &Path, rows: usize, child: &mut std::process::Child) -> bool {
    for _ in 0..6000 {
        if read_rows(out.join("metrics.csv")).is_ok_and(|r| r.len() >= rows) {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    false
}

#[test]
fn a_pipeline_run_killed_after_an_evaluation_resumes_bitwise() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let flags = |out: &str| -> Vec<String> {
        [
            "train",
            "--pp",
            "2",
            "--schedule",
            "zb-h1",
            "--steps",
            "3000",
            "--stop-after",
            "200",
            "--batch-size",
            "4",
            "--seq-len",
            "16",
            "--micro-batches",
            "2",
            "--eval-every",
            "4",
            "--eval-batches",
            "1",
            "--n-layer",
            "2",
            "--n-head",
            "2",
            "--n-embd",
            "32",
            "--block-size",
            "16",
            "--synthetic",
            "--quiet",
            "--out",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([d.join(out).display().to_string()])
        .collect()
    };
    let brrr = env!("CARGO_BIN_EXE_brrr");
    let straight = Command::new(brrr).args(flags("straight")).output().unwrap();
    assert!(
        straight.status.success(),
        "{}",
        String::from_utf8_lossy(&straight.stderr)
    );
    let mut child = Command::new(brrr).args(flags("killed")).spawn().unwrap();
    // Past the evaluation (and checkpoint) of step 8, before the run ends.
    let killed = wait_for_rows(&d.join("killed"), 10, &mut child);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(killed, "the run ended before it could be killed");
    let resumed = Command::new(brrr)
        .args(["train", "--resume"])
        .arg(d.join("killed"))
        .args(["--stop-after", "200", "--quiet"])
        .output()
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let (a, b) = (losses(&d.join("straight")), losses(&d.join("killed")));
    assert_eq!(a.len(), 200);
    assert_eq!(bits(a), bits(b));
}
