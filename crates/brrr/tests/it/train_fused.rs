//! Fused attention, `brrr train`'s default, in every engine: one device, `--dp`, `--tp`
//! and `--pp` (with `--tp`) all build their models with the fused kernel unless given
//! `--attention composite`. The context (80) spans two of the kernel's 64-row query
//! blocks. Each run is checked against another engine's run with the same attention
//! (f32 rounding: within 1e-4 relative), and against the same engine with
//! `--attention composite`: the fused run must keep fewer activation bytes (no `[T, T]`
//! probabilities), which proves the kernel really ran there. The choice is saved with the
//! run, so `--resume` keeps it unless `--attention` is given again.

use brrr::metrics::read_rows;
use brrr::train::{self, AttentionArg, BackendKind, Preset, TrainArgs};
use std::path::Path;

/// A small run; `fused: false` asks for `--attention composite`, `true` gives no flag
/// (the default).
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
        attention: (!fused).then_some(AttentionArg::Composite),
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
        "{what}: the fused attention kept {f} bytes of activations, the composite path {c}: \
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
        train::run(&a).unwrap();
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

/// Stopped at step 2 and resumed without `--attention`: the run stays what it was, and
/// its losses are bit for bit those of the run that never stopped; for a fused and a
/// composite run.
#[test]
fn a_run_resumes_with_its_attention() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for fused in [true, false] {
        let (straight, stopped) = (format!("straight-{fused}"), format!("stopped-{fused}"));
        train::run(&args(d, &straight, fused)).unwrap();
        train::run(&TrainArgs {
            stop_after: Some(2),
            ..args(d, &stopped, fused)
        })
        .unwrap();
        train::run(&TrainArgs {
            resume: Some(d.join(&stopped)),
            out: None,
            attention: None,
            ..args(d, &stopped, true)
        })
        .unwrap();
        assert_eq!(losses(d, &stopped), losses(d, &straight), "fused: {fused}");
    }
}

/// `--attention` given on `--resume` changes the rest of the run: a composite run resumed
/// with `--attention fused` keeps fewer activations from then on.
#[test]
fn attention_changes_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    train::run(&TrainArgs {
        stop_after: Some(2),
        ..args(d, "run", false)
    })
    .unwrap();
    train::run(&TrainArgs {
        resume: Some(d.join("run")),
        out: None,
        attention: Some(AttentionArg::Fused),
        ..args(d, "run", true)
    })
    .unwrap();
    let rows = read_rows(d.join("run/metrics.csv")).unwrap();
    let bytes: Vec<u64> = rows.iter().map(|r| r.activation_bytes.unwrap()).collect();
    assert_eq!(bytes.len(), 4);
    assert!(bytes[2] < bytes[1], "{bytes:?}");
    let config = std::fs::read_to_string(d.join("run/config.toml")).unwrap();
    assert!(config.contains("fused_attention = true"), "{config}");
}

/// A `--checkpoint` strategy makes the composite path the default: its planner counts
/// the composite's `[T, T]` scores (what `selective` recomputes). `--attention` overrides.
#[test]
fn a_checkpoint_strategy_defaults_to_the_composite_attention() {
    let tmp = tempfile::tempdir().unwrap();
    let fused = |checkpoint: Option<&str>, attention: Option<AttentionArg>| {
        let a = TrainArgs {
            checkpoint: checkpoint.map(|c| c.parse().unwrap()),
            attention,
            ..args(tmp.path(), "cfg", true)
        };
        train::config_from_args(&a).unwrap().fused_attention
    };
    assert!(fused(None, None));
    assert!(fused(Some("none"), None));
    assert!(!fused(Some("selective"), None));
    assert!(!fused(Some("every:2"), None));
    assert!(fused(Some("selective"), Some(AttentionArg::Fused)));
    assert!(!fused(None, Some(AttentionArg::Composite)));
}
