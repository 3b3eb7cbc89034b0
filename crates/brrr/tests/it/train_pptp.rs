//! `brrr train --pp 2 --tp 2` (pipeline stages two tensor ranks wide, 4 in-process
//! ranks) against `brrr train --pp 2`: the same batches, so `metrics.csv` holds the same
//! training and validation losses within 1e-4 relative (tensor parallelism sums partial
//! products in another order: f32 rounding, not bitwise); with `--sp`, and `--dp 2`
//! too (8 ranks). Each tensor rank writes its own stage files, `--resume` goes on from
//! them, and sizes that do not divide by `--tp` are refused before anything is written.

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
        pp: Some(2),
        schedule: Some("1f1b".into()),
        micro_batches: Some(2),
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

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-4 * b.abs()
}

#[test]
fn pp2_tp2_losses_match_pp2_alone() {
    let tmp = tempfile::tempdir().unwrap();
    train::run(&args(tmp.path(), "pp2")).unwrap();
    let want = losses(tmp.path(), "pp2");
    assert_eq!(want.len(), 3);
    for (out, sp, dp, schedule) in [
        ("pp2tp2", false, 1, "1f1b"),
        ("pp2tp2sp", true, 1, "zb-h1"),
        ("dp2pp2tp2", false, 2, "gpipe"),
    ] {
        let a = TrainArgs {
            tp: Some(2),
            sp,
            dp: Some(dp),
            schedule: Some(schedule.into()),
            ..args(tmp.path(), out)
        };
        let summary = train::run(&a).unwrap();
        assert!(summary.engine.contains("--tp 2"), "{}", summary.engine);
        let got = losses(tmp.path(), out);
        assert_eq!(got.len(), want.len(), "{out}");
        for ((a, va), (b, vb)) in got.iter().zip(&want) {
            assert!(close(*a, *b), "{out}: loss {a} vs {b}");
            match (va, vb) {
                (Some(x), Some(y)) => assert!(close(*x, *y), "{out}: val {x} vs {y}"),
                (None, None) => {}
                other => panic!("{out}: validation rows differ: {other:?}"),
            }
        }
        for s in 0..2 {
            for r in 0..2 {
                let f = format!("pp/pp-stage{s}-of2-tp{r}-of2.bin");
                assert!(tmp.path().join(out).join(&f).exists(), "{out}/{f}");
            }
        }
    }
}

#[test]
fn pp2_tp2_resumes_from_its_shards_and_refuses_another_tp() {
    let tmp = tempfile::tempdir().unwrap();
    let a = TrainArgs {
        tp: Some(2),
        steps: Some(4),
        ..args(tmp.path(), "whole")
    };
    train::run(&a).unwrap();
    let whole = losses(tmp.path(), "whole");
    let half = TrainArgs {
        steps: Some(2),
        ..a.clone()
    };
    let half = TrainArgs {
        out: Some(tmp.path().join("half")),
        ..half
    };
    train::run(&half).unwrap();
    let resume = TrainArgs {
        resume: Some(tmp.path().join("half")),
        out: None,
        steps: Some(4),
        ..a.clone()
    };
    train::run(&resume).unwrap();
    let resumed = losses(tmp.path(), "half");
    assert_eq!(resumed.len(), 4);
    // The uninterrupted and the resumed run take the same steps on the same ranks.
    for (x, y) in resumed.iter().zip(&whole) {
        assert_eq!(x.0.to_bits(), y.0.to_bits(), "{} vs {}", x.0, y.0);
    }
    // The layout is the saved run's: another --tp contradicts it, by name.
    let other = TrainArgs {
        tp: Some(1),
        ..resume
    };
    let e = train::run(&other).unwrap_err().to_string();
    assert!(e.contains("--tp 1 (the run has 2)"), "{e}");
}

#[test]
fn indivisible_sizes_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, TrainArgs, &str); 3] = [
        (
            "heads",
            TrainArgs {
                tp: Some(3),
                n_head: Some(4),
                n_embd: Some(48),
                ..args(tmp.path(), "h")
            },
            "heads",
        ),
        (
            "sequence",
            TrainArgs {
                tp: Some(2),
                sp: true,
                seq_len: Some(15),
                ..args(tmp.path(), "s")
            },
            "sequence length 15",
        ),
        (
            "sp alone",
            TrainArgs {
                sp: true,
                ..args(tmp.path(), "sp")
            },
            "--sp needs --tp",
        ),
    ];
    for (what, a, want) in cases {
        let out = a.out.clone().unwrap();
        let e = train::run(&a).unwrap_err().to_string();
        assert!(e.contains(want), "{what}: {e}");
        assert!(!out.exists(), "{what}: {} was written", out.display());
    }
}
