//! `brrr train --dp N --zero S`: the run directory of a one-device run, the losses of
//! one device, and a bitwise resume from the sharded checkpoint.

use brrr::metrics::read_rows;
use brrr::train::{self, AmpArg, BackendKind, Preset, TrainArgs};
use std::path::{Path, PathBuf};

fn corpus(dir: &Path) -> PathBuf {
    let text = "It was the best of times, it was the worst of times, it was the age of wisdom, \
                it was the age of foolishness, it was the epoch of belief. "
        .repeat(40);
    let p = dir.join("corpus.txt");
    std::fs::write(&p, text).unwrap();
    p
}

fn args(dir: &Path, out: &str, steps: u64) -> TrainArgs {
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
        ..TrainArgs::default()
    }
}

fn dp(mut a: TrainArgs, world: usize, zero: u8) -> TrainArgs {
    a.dp = Some(world);
    a.zero = Some(zero);
    a
}

fn losses(dir: &Path) -> Vec<f32> {
    read_rows(dir.join("metrics.csv"))
        .unwrap()
        .iter()
        .map(|r| r.loss)
        .collect()
}

/// Per-step losses agree with one device to 1e-5 nats (the ranks' partial gradients are
/// summed in another order than one device's GEMM: rounding only).
#[test]
fn dp_run_matches_one_device_and_writes_a_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    train::run(&args(d, "one", 4)).unwrap();
    let s = train::run(&dp(args(d, "dp", 4), 2, 3)).unwrap();
    assert_eq!(s.steps_done, 4);
    let (a, b) = (losses(&d.join("one")), losses(&d.join("dp")));
    assert_eq!(a.len(), 4);
    for (x, y) in a.iter().zip(&b) {
        assert!(
            (x - y).abs() <= 1e-5,
            "one device {a:?} vs --dp 2 --zero 3 {b:?}"
        );
    }
    for f in [
        "config.toml",
        "metrics.csv",
        "loss.svg",
        "dp/dp-rank0-of2.bin",
        "dp/dp-rank1-of2.bin",
    ] {
        assert!(d.join("dp").join(f).exists(), "{f} missing");
    }
}

/// `--dp 2 --amp fp16` (and bf16) writes one device's `--amp` losses within 2e-4 nats
/// (`crates/dp/tests/it/amp.rs` says why), and the same loss-scale and skipped columns.
#[test]
fn dp_amp_run_matches_one_device_amp() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for (amp, name) in [(AmpArg::Fp16, "fp16"), (AmpArg::Bf16, "bf16")] {
        let with_amp = |mut a: TrainArgs| {
            a.amp = Some(amp);
            a
        };
        train::run(&with_amp(args(d, &format!("one-{name}"), 4))).unwrap();
        train::run(&with_amp(dp(args(d, &format!("dp-{name}"), 4), 2, 2))).unwrap();
        let rows = |r: &str| read_rows(d.join(r).join("metrics.csv")).unwrap();
        let (a, b) = (rows(&format!("one-{name}")), rows(&format!("dp-{name}")));
        assert_eq!(a.len(), 4);
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x.loss - y.loss).abs() <= 2e-4,
                "{name}: {} vs {}",
                x.loss,
                y.loss
            );
            assert_eq!(
                (x.loss_scale, x.skipped),
                (y.loss_scale, y.skipped),
                "{name}"
            );
        }
        let want_scale = if name == "fp16" { 65536.0 } else { 1.0 };
        assert_eq!(b[0].loss_scale, want_scale, "{name}");
    }
}

#[test]
fn dp_resume_continues_bit_for_bit() {
    // f32, and --amp fp16, whose shards keep the f32 masters and the loss scale.
    for (name, amp) in [("f32", None), ("fp16", Some(AmpArg::Fp16))] {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let with_amp = |mut a: TrainArgs| {
            a.amp = amp;
            a
        };
        train::run(&with_amp(dp(args(d, "straight", 6), 2, 2))).unwrap();
        let mut first = with_amp(dp(args(d, "stopped", 6), 2, 2));
        first.stop_after = Some(3);
        train::run(&first).unwrap();
        let resume = TrainArgs {
            resume: Some(d.join("stopped")),
            quiet: true,
            ..dp(TrainArgs::default(), 2, 2)
        };
        let s = train::run(&resume).unwrap();
        assert_eq!(s.steps_done, 6, "{name}");
        let csv = |run: &str| std::fs::read_to_string(d.join(run).join("metrics.csv")).unwrap();
        // Loss, validation loss, lr, gradient norm, loss scale and skips are the same
        // (not tokens/s, wall clock, nor the memory peaks of a fresh process).
        let deterministic = |text: String| -> Vec<String> {
            text.lines()
                .map(|l| {
                    let f: Vec<&str> = l.split(',').collect();
                    [&f[..5], &f[6..8]].concat().join(",")
                })
                .collect()
        };
        assert_eq!(
            deterministic(csv("straight")),
            deterministic(csv("stopped")),
            "{name}"
        );
        assert_eq!(losses(&d.join("straight")), losses(&d.join("stopped")));
    }
}

#[test]
fn unsupported_combinations_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let e = train::run(&dp(args(d, "odd", 2), 3, 0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--batch-size"), "{e}");
}

/// Plain `brrr train` started by a launcher on 2 processes is 2 data-parallel ranks
/// (as `torchrun` users expect), not 2 single-device runs writing the same directory:
/// it matches `--dp 2` in one process and reports its sharded checkpoint.
#[test]
fn a_launched_plain_train_is_data_parallel() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    train::run(&dp(args(d, "threads", 3), 2, 0)).unwrap();
    let c = corpus(d);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_brrr"))
        .args([
            "launch",
            "--transport",
            "socket",
            "--nproc",
            "2",
            "--",
            "train",
        ])
        .args([
            "--steps",
            "3",
            "--batch-size",
            "4",
            "--seq-len",
            "16",
            "--grad-accum",
            "2",
        ])
        .args([
            "--seed",
            "7",
            "--lr",
            "3e-3",
            "--warmup-steps",
            "2",
            "--eval-every",
            "3",
        ])
        .args([
            "--eval-batches",
            "2",
            "--preset",
            "tiny",
            "--n-layer",
            "2",
            "--n-head",
            "2",
        ])
        .args(["--n-embd", "32", "--block-size", "16"])
        .arg("--corpus")
        .arg(&c)
        .arg("--out")
        .arg(d.join("launched"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Rank 0 alone prints the summary (each rank used to print its own).
    assert_eq!(stdout.matches("dp/dp-rank*-of2.bin").count(), 1, "{stdout}");
    assert!(d.join("launched/dp/dp-rank1-of2.bin").exists());
    assert_eq!(losses(&d.join("threads")), losses(&d.join("launched")));
}

/// Byte-token shards of a text and 40 short JSON-lines documents (`brrr data prepare`).
fn shards(dir: &Path) -> PathBuf {
    let text = "It was the best of times, it was the worst of times. ".repeat(60);
    std::fs::write(dir.join("a.txt"), &text).unwrap();
    let lines: String = (0..40)
        .map(|i| format!("{{\"text\": \"document {i}: it was the epoch of belief\"}}\n"))
        .collect();
    std::fs::write(dir.join("b.jsonl"), lines).unwrap();
    let out = dir.join("shards");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_brrr"))
        .args([
            "data",
            "prepare",
            "--quiet",
            "--shard-tokens",
            "1500",
            "--out",
        ])
        .arg(&out)
        .arg(dir.join("a.txt"))
        .arg(dir.join("b.jsonl"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

/// `--data` shards with `--doc-mask`: `--dp 2` at stages 0 and 3 writes one device's
/// losses and validation losses within 1e-5 nats (f32 reduction order only), and the
/// mask matters (the unmasked losses differ).
#[test]
fn dp_on_shards_with_document_masks_matches_one_device() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let data = shards(d);
    let on_shards = |out: &str, mask: bool| TrainArgs {
        data: Some(data.clone()),
        corpus: None,
        doc_mask: mask,
        ..args(d, out, 4)
    };
    train::run(&on_shards("one", true)).unwrap();
    train::run(&on_shards("plain", false)).unwrap();
    let rows = |r: &str| read_rows(d.join(r).join("metrics.csv")).unwrap();
    let one = rows("one");
    assert_eq!(one.len(), 4);
    assert!(
        one.iter().zip(rows("plain")).any(|(a, b)| a.loss != b.loss),
        "the mask changed nothing"
    );
    assert!(
        one.iter().any(|r| r.val_loss.is_some()),
        "no validation row"
    );
    for zero in [0, 3] {
        let out = format!("dp{zero}");
        train::run(&dp(on_shards(&out, true), 2, zero)).unwrap();
        for (a, b) in one.iter().zip(rows(&out)) {
            assert!(
                (a.loss - b.loss).abs() <= 1e-5,
                "zero {zero}: {} vs {}",
                a.loss,
                b.loss
            );
            match (a.val_loss, b.val_loss) {
                (Some(x), Some(y)) => assert!((x - y).abs() <= 1e-5, "zero {zero}: val"),
                (x, y) => assert_eq!(x.is_some(), y.is_some(), "zero {zero}: val rows"),
            }
        }
    }
}
