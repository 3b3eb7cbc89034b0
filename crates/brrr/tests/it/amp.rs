//! `brrr train --amp`: the flag reaches the run, `metrics.csv` has the loss-scale
//! columns, a resumed run keeps its mode, and `brrr numerics` writes its figures.

use brrr::metrics::read_rows;
use brrr::numerics::{self, NumericsArgs};
use brrr::train::{self, AmpArg, BackendKind, LossScalingArg, Preset, TrainArgs};
use std::path::Path;

fn args(dir: &Path, amp: AmpArg) -> TrainArgs {
    let corpus = dir.join("corpus.txt");
    std::fs::write(
        &corpus,
        "Four score and seven years ago our fathers. ".repeat(60),
    )
    .unwrap();
    TrainArgs {
        backend: BackendKind::Cpu,
        steps: Some(4),
        batch_size: Some(4),
        seq_len: Some(16),
        eval_every: Some(2),
        eval_batches: Some(1),
        preset: Some(Preset::Tiny),
        n_layer: Some(1),
        n_head: Some(2),
        n_embd: Some(32),
        corpus: Some(corpus),
        out: Some(dir.join("run")),
        quiet: true,
        amp: Some(amp),
        ..TrainArgs::default()
    }
}

#[test]
fn fp16_logs_the_loss_scale_and_bf16_runs_unscaled() {
    let tmp = tempfile::tempdir().unwrap();
    train::run(&args(tmp.path(), AmpArg::Fp16)).unwrap();
    let rows = read_rows(tmp.path().join("run/metrics.csv")).unwrap();
    assert_eq!(rows.len(), 4);
    assert!(
        rows.iter().all(|r| r.loss_scale == 65536.0 && !r.skipped),
        "{rows:?}"
    );
    let header = std::fs::read_to_string(tmp.path().join("run/metrics.csv")).unwrap();
    assert!(header.starts_with(brrr::metrics::HEADER));
    let config = std::fs::read_to_string(tmp.path().join("run/config.toml")).unwrap();
    assert!(config.contains("mode = \"fp16\""), "{config}");

    let tmp = tempfile::tempdir().unwrap();
    train::run(&args(tmp.path(), AmpArg::Bf16)).unwrap();
    let rows = read_rows(tmp.path().join("run/metrics.csv")).unwrap();
    assert!(rows.iter().all(|r| r.loss_scale == 1.0));
    // bf16 with a scaler, when asked.
    let tmp = tempfile::tempdir().unwrap();
    let a = TrainArgs {
        loss_scaling: Some(LossScalingArg::Dynamic),
        ..args(tmp.path(), AmpArg::Bf16)
    };
    train::run(&a).unwrap();
    let rows = read_rows(tmp.path().join("run/metrics.csv")).unwrap();
    assert!(rows.iter().all(|r| r.loss_scale == 65536.0));
}

#[test]
fn a_resumed_run_refuses_another_amp_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let a = TrainArgs {
        stop_after: Some(2),
        ..args(tmp.path(), AmpArg::Fp16)
    };
    train::run(&a).unwrap();
    let e = train::run(&TrainArgs {
        resume: Some(tmp.path().join("run")),
        amp: Some(AmpArg::Off),
        quiet: true,
        ..TrainArgs::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("--amp off"), "{e}");
    // Without the flag it continues in fp16.
    train::run(&TrainArgs {
        resume: Some(tmp.path().join("run")),
        quiet: true,
        ..TrainArgs::default()
    })
    .unwrap();
    let rows = read_rows(tmp.path().join("run/metrics.csv")).unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[3].loss_scale, 65536.0);
}

#[test]
fn numerics_reports_and_draws() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("numerics");
    let report = numerics::run(&NumericsArgs {
        run: None,
        steps: 2,
        scale: 1024.0,
        out: out.clone(),
    })
    .unwrap();
    assert!(report.contains("6.550400e4"), "{report}");
    assert!(report.contains("LayerNorm statistics"));
    for f in ["gradients.svg", "formats.svg"] {
        let svg = std::fs::read_to_string(out.join(f)).unwrap();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{f}");
    }
    assert!(
        numerics::run(&NumericsArgs {
            run: None,
            steps: 1,
            scale: -1.0,
            out,
        })
        .is_err()
    );
}
