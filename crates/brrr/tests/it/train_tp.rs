//! `brrr train --tp`: in-process ranks write the run directory a single-device run
//! writes, with the same losses (same seed, same batches) within 1e-4 relative, and a
//! checkpoint of the whole model that `brrr sample` can read.

use brrr::metrics::read_rows;
use brrr::train::{self, BackendKind, Preset, TrainArgs};
use std::path::Path;

fn args(dir: &Path, out: &str) -> TrainArgs {
    TrainArgs {
        backend: BackendKind::Cpu,
        steps: Some(3),
        batch_size: Some(4),
        seq_len: Some(16),
        eval_every: Some(3),
        eval_batches: Some(1),
        preset: Some(Preset::Tiny),
        n_layer: Some(2),
        n_head: Some(4),
        n_embd: Some(32),
        synthetic: true,
        out: Some(dir.join(out)),
        quiet: true,
        ..TrainArgs::default()
    }
}

fn losses(dir: &Path, out: &str) -> Vec<(f32, Option<f32>)> {
    read_rows(dir.join(out).join("metrics.csv"))
        .unwrap()
        .iter()
        .map(|r| (r.loss, r.val_loss))
        .collect()
}

#[test]
fn tp_and_sp_runs_match_the_single_device_run() {
    let tmp = tempfile::tempdir().unwrap();
    train::run(&args(tmp.path(), "one")).unwrap();
    let want = losses(tmp.path(), "one");
    for (out, tp, sp, dp) in [("tp2sp", 2, true, 1), ("tp2dp2", 2, false, 2)] {
        let a = TrainArgs {
            tp: Some(tp),
            sp,
            dp: Some(dp),
            ..args(tmp.path(), out)
        };
        let s = train::run(&a).unwrap();
        assert_eq!(s.steps_done, 3);
        let got = losses(tmp.path(), out);
        assert_eq!(got.len(), want.len(), "{out}");
        for ((a, va), (b, vb)) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-4 * b.abs(), "{out}: loss {a} vs {b}");
            match (va, vb) {
                (Some(x), Some(y)) => {
                    assert!((x - y).abs() <= 1e-4 * y.abs(), "{out}: val {x} vs {y}")
                }
                (None, None) => {}
                other => panic!("{out}: validation rows differ: {other:?}"),
            }
        }
        for f in ["config.toml", "loss.svg", "checkpoint.safetensors"] {
            assert!(tmp.path().join(out).join(f).exists(), "{out}/{f}");
        }
        // The gathered checkpoint has the single-device shapes.
        let state =
            brrr_train::TrainState::load(tmp.path().join(out).join("checkpoint.safetensors"))
                .unwrap();
        let one =
            brrr_train::TrainState::load(tmp.path().join("one/checkpoint.safetensors")).unwrap();
        for (p, q) in state.params.iter().zip(&one.params) {
            assert_eq!((&p.name, &p.shape), (&q.name, &q.shape));
        }
    }
}

#[test]
fn indivisible_heads_are_an_error_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let a = TrainArgs {
        tp: Some(3),
        ..args(tmp.path(), "bad")
    };
    let e = train::run(&a).unwrap_err().to_string();
    assert!(e.contains("heads do not divide by 3"), "{e}");
    assert!(!tmp.path().join("bad").exists());
}

/// `--amp bf16 --tp 2` trains, and its checkpoint (gathered from the shards) holds the
/// f32 masters, which `brrr sample` and a one-device `--resume` read.
#[test]
fn amp_with_tp_trains_and_saves_f32_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let a = TrainArgs {
        tp: Some(2),
        amp: Some(train::AmpArg::Bf16),
        ..args(tmp.path(), "amp")
    };
    let s = train::run(&a).unwrap();
    assert_eq!((s.steps_done, s.amp), (3, brrr_amp::AmpMode::Bf16));
    let state =
        brrr_train::TrainState::load(tmp.path().join("amp/checkpoint.safetensors")).unwrap();
    for p in &state.params {
        assert_eq!(p.value.dtype(), brrr_backend::DType::F32, "{}", p.name);
    }
}
