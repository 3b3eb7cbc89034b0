//! `brrr train --fused-attention` in every engine: one device, `--dp`, `--tp` and `--pp`
//! (with `--tp`) all build their models with the fused kernel. The context (80) spans two
//! of the kernel's 64-row query blocks. Each run is checked
//! against another engine's run with the same flag (f32 rounding: within 1e-4
//! relative), and against the same engine without the flag: the numbers must differ
//! (the fused kernel sums in another order), which proves the kernel really ran there.
//! The switch is saved with the run, so `--resume` without the flag stays fused.

use brrr::metrics::read_rows;
use brrr::train::{self, BackendKind, Preset, TrainArgs};
use std::path::Path;

fn args(dir: &Path, out: &str, fused: bool) -> TrainArgs {
    TrainArgs {
        backend: BackendKind::Cpu,
        steps: Some(4),
        batch_size: Some(4),
        seq_len: Some(80),
        seed: Some(3),
        eval_every: Some(4),
        eval_batches: Some(1),
        preset: Some(Preset::Tiny),
        n_layer: Some(2),
        n_head: Some(4),
        n_embd: Some(32),
        block_size: Some(80),
        synthetic: true,
        fused_attention: fused,
        out: Some(dir.join(out)),
        quiet: true,
        ..TrainArgs::default()
    }
}

fn pipeline(a: TrainArgs) -> TrainArgs {
    TrainArgs {
        pp: Some(2),
        schedule: Some("1f1b".into()),
        micro_batches: Some(2),
        ..a
    }
}

fn losses(dir: &Path, out: &str) -> Vec<(f32, Option<f32>)> {
    read_rows(dir.join(out).join("metrics.csv"))
        .unwrap()
        .iter()
        .map(|r| (r.loss, r.val_loss))
        .collect()
}

fn assert_close(what: &str, a: &[(f32, Option<f32>)], b: &[(f32, Option<f32>)]) {
    assert_eq!(a.len(), b.len(), "{what}: {a:?} vs {b:?}");
    let close = |x: f32, y: f32| (x - y).abs() <= 1e-4 * y.abs();
    for (x, y) in a.iter().zip(b) {
        let val = match (x.1, y.1) {
            (Some(u), Some(v)) => close(u, v),
            (u, v) => u == v,
        };
        assert!(close(x.0, y.0) && val, "{what}: {a:?} vs {b:?}");
    }
}

/// The first step's activation bytes of the runs `fused` and `composite`.
fn assert_fewer_activations(what: &str, dir: &Path, fused: &str, composite: &str) {
    let first = |out: &str| {
        read_rows(dir.join(out).join("metrics.csv")).unwrap()[0]
            .activation_bytes
            .unwrap()
    };
    let (f, c) = (first(fused), first(composite));
    assert!(
        f < c,
        "{what}: --fused-attention kept {f} bytes of activations, the composite path {c}: \
         the fused kernel did not run"
    );
}

#[test]
fn dp_and_tp_runs_take_the_fused_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    train::run(&args(d, "one", true)).unwrap();
    train::run(&args(d, "one-composite", false)).unwrap();
    let one = losses(d, "one");
    assert_eq!(one.len(), 4);
    assert_fewer_activations("one device", d, "one", "one-composite");
    assert_close("one device, composite", &losses(d, "one-composite"), &one);
    let config = std::fs::read_to_string(d.join("one/config.toml")).unwrap();
    assert!(config.contains("fused_attention = true"), "{config}");

    for fused in [true, false] {
        let name = format!("dp-{fused}");
        train::run(&TrainArgs {
            dp: Some(2),
            ..args(d, &name, fused)
        })
        .unwrap();
        let name = format!("tp-{fused}");
        train::run(&TrainArgs {
            tp: Some(2),
            ..args(d, &name, fused)
        })
        .unwrap();
    }
    assert_close("--dp 2", &losses(d, "dp-true"), &one);
    assert_fewer_activations("--dp 2", d, "dp-true", "dp-false");
    assert_close("--tp 2", &losses(d, "tp-true"), &one);
    assert_fewer_activations("--tp 2", d, "tp-true", "tp-false");
}

#[test]
fn pipeline_stages_take_the_fused_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for (out, fused, tp) in [
        ("pp-true", true, None),
        ("pp-false", false, None),
        ("pptp-true", true, Some(2)),
        ("pptp-false", false, Some(2)),
    ] {
        let a = TrainArgs {
            tp,
            ..pipeline(args(d, out, fused))
        };
        brrr::train_pp::run(&a, 1).unwrap();
    }
    // A pipeline's batches are not one device's (see train_pptp.rs): --pp 2 is the
    // reference here.
    let pp = losses(d, "pp-true");
    assert_eq!(pp.len(), 4);
    assert_close("--pp 2, composite", &losses(d, "pp-false"), &pp);
    assert_fewer_activations("--pp 2", d, "pp-true", "pp-false");
    assert_close("--pp 2 --tp 2", &losses(d, "pptp-true"), &pp);
    assert_fewer_activations("--pp 2 --tp 2", d, "pptp-true", "pptp-false");
}

/// Stopped at step 2 and resumed without the flag: the run stays fused, and its losses
/// are bit for bit those of the run that never stopped.
#[test]
fn a_fused_run_resumes_fused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    train::run(&args(d, "straight", true)).unwrap();
    train::run(&TrainArgs {
        stop_after: Some(2),
        ..args(d, "stopped", true)
    })
    .unwrap();
    train::run(&TrainArgs {
        resume: Some(d.join("stopped")),
        out: None,
        ..args(d, "stopped", false)
    })
    .unwrap();
    assert_eq!(losses(d, "stopped"), losses(d, "straight"));
}
