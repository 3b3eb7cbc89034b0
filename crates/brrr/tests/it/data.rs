//! `brrr data prepare` then `brrr train --data`: shards train, a stopped and resumed run
//! gives bitwise the losses of an uninterrupted one, and prefetching changes nothing but
//! timing.

use brrr::ckpt;
use brrr::metrics::read_rows;
use brrr::train::{self, TrainArgs};

use std::path::{Path, PathBuf};

/// Prepares shards of byte tokens from a small text and a JSON-lines file.
fn shards(dir: &Path) -> PathBuf {
    let (out, stdout) = crate::common::prepare_shards(dir);
    assert!(stdout.contains("documents:   41"), "{stdout}");
    assert!(stdout.contains("shards:      5"), "{stdout}");
    out
}

fn args(dir: &Path, data: &Path, out: &str, prefetch: usize) -> TrainArgs {
    TrainArgs {
        steps: Some(10),
        batch_size: Some(4),
        seq_len: Some(16),
        seed: Some(3),
        eval_every: Some(4),
        eval_batches: Some(2),
        n_layer: Some(2),
        n_head: Some(2),
        n_embd: Some(32),
        data: Some(data.to_path_buf()),
        prefetch: Some(prefetch),
        out: Some(dir.join(out)),
        quiet: true,
        ..TrainArgs::default()
    }
}

fn losses(dir: &Path) -> Vec<String> {
    read_rows(dir.join("metrics.csv"))
        .unwrap()
        .iter()
        .map(|r| format!("{} {:?} {:?} {:?}", r.step, r.loss, r.val_loss, r.grad_norm))
        .collect()
}

#[test]
fn resumed_run_on_shards_matches_the_uninterrupted_one_bitwise() {
    let tmp = tempfile::tempdir().unwrap();
    let data = shards(tmp.path());
    train::run(&args(tmp.path(), &data, "full", 2)).unwrap();
    train::run(&args(tmp.path(), &data, "sync", 0)).unwrap();
    let full = losses(&tmp.path().join("full"));
    assert_eq!(full.len(), 10);
    assert_eq!(
        full,
        losses(&tmp.path().join("sync")),
        "prefetch changed the run"
    );

    let mut first = args(tmp.path(), &data, "part", 3);
    first.stop_after = Some(6);
    train::run(&first).unwrap();
    let resume = TrainArgs {
        resume: Some(tmp.path().join("part")),
        quiet: true,
        ..TrainArgs::default()
    };
    train::run(&resume).unwrap();
    assert_eq!(full, losses(&tmp.path().join("part")));
    let a = ckpt::load(tmp.path().join("full/checkpoint.safetensors")).unwrap();
    let b = ckpt::load(tmp.path().join("part/checkpoint.safetensors")).unwrap();
    assert_eq!(a.tensors, b.tensors);
    // The config records the shards.
    let cfg = train::read_config(&tmp.path().join("part")).unwrap();
    assert_eq!(cfg.data, data.display().to_string());
}

#[test]
fn a_directory_without_shards_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let e = train::run(&args(tmp.path(), tmp.path(), "x", 0))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("data.json") && e.contains("brrr data prepare"),
        "{e}"
    );
}

#[test]
fn document_masked_runs_differ_from_unmasked_and_resume_bitwise() {
    let tmp = tempfile::tempdir().unwrap();
    let data = shards(tmp.path());
    let masked = |out: &str| TrainArgs {
        doc_mask: true,
        ..args(tmp.path(), &data, out, 2)
    };
    train::run(&masked("masked")).unwrap();
    train::run(&args(tmp.path(), &data, "plain", 2)).unwrap();
    let full = losses(&tmp.path().join("masked"));
    assert_eq!(full.len(), 10);
    // The jsonl documents are ~45 tokens: some 16-token windows hold a boundary, and
    // masking it changes what their tokens attend to.
    assert_ne!(full, losses(&tmp.path().join("plain")));
    assert!(
        train::read_config(&tmp.path().join("masked"))
            .unwrap()
            .document_mask
    );

    let mut first = masked("part");
    first.stop_after = Some(6);
    train::run(&first).unwrap();
    let resume = TrainArgs {
        resume: Some(tmp.path().join("part")),
        quiet: true,
        ..TrainArgs::default()
    };
    train::run(&resume).unwrap();
    assert_eq!(full, losses(&tmp.path().join("part")));
}
