//! `brrr finetune BASE --lora-rank R` and `brrr ckpt merge-lora`: a LoRA run trains
//! on new text from the base run's weights, `brrr sample` reads it with its adapters
//! folded in, and the merged run samples the same text; what does not fit is refused
//! by name.

use brrr::ckpt_cmd::{MergeLoraArgs, run_merge_lora};
use brrr::finetune::{FinetuneArgs, train_args};
use brrr::sample::{self, SampleArgs};
use brrr::train::{self, BackendKind, Preset, TrainArgs};
use std::path::{Path, PathBuf};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text.repeat(40)).unwrap();
    p
}

fn small(dir: &Path, corpus: PathBuf, out: &str) -> TrainArgs {
    TrainArgs {
        backend: BackendKind::Cpu,
        steps: Some(6),
        batch_size: Some(4),
        seq_len: Some(16),
        seed: Some(7),
        lr: Some(3e-3),
        warmup_steps: Some(2),
        eval_every: Some(3),
        eval_batches: Some(2),
        corpus: Some(corpus),
        out: Some(dir.join(out)),
        quiet: true,
        ..TrainArgs::default()
    }
}

fn finetune(base: &Path, train: TrainArgs, lora_rank: Option<usize>) -> FinetuneArgs {
    FinetuneArgs {
        base: base.to_path_buf(),
        lora_rank,
        lora_alpha: None,
        train,
    }
}

fn text(dir: &Path, seed: u64) -> String {
    sample::run(&SampleArgs {
        dir: dir.to_path_buf(),
        prompt: "Call".into(),
        tokens: 24,
        temperature: 0.8,
        top_k: 0,
        seed,
    })
    .unwrap()
}

#[test]
fn a_lora_run_samples_as_its_merged_weights_do() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let old = write(
        dir,
        "old.txt",
        "It was the best of times, it was the worst of times. ",
    );
    let new = write(
        dir,
        "new.txt",
        "Call me Ishmael. Some years ago, never mind how long. ",
    );
    let mut base = small(dir, old, "base");
    (base.preset, base.n_layer, base.n_embd, base.block_size) =
        (Some(Preset::Tiny), Some(2), Some(32), Some(16));
    train::run(&base).unwrap();
    let base_dir = dir.join("base");

    let ft = finetune(&base_dir, small(dir, new.clone(), "lora"), Some(4));
    let summary = train::run(&train_args(&ft).unwrap()).unwrap();
    assert_eq!(summary.steps_done, 6);
    assert!(
        summary
            .report
            .iter()
            .any(|l| l.starts_with("LoRA rank 4 (alpha 8)")),
        "{:?}",
        summary.report
    );
    let lora_dir = dir.join("lora");
    let merged_dir = dir.join("merged");
    let said = run_merge_lora(&MergeLoraArgs {
        run_dir: lora_dir.clone(),
        out: merged_dir.clone(),
        force: false,
    })
    .unwrap();
    assert!(said.contains("rank-4 adapters"), "{said}");
    // The merged run holds no adapters, and samples what the LoRA run samples.
    let state = brrr_train::load_state(&merged_dir).unwrap();
    assert!(state.params.iter().all(|p| !p.name.contains("lora")));
    for seed in [0, 1] {
        assert_eq!(text(&lora_dir, seed), text(&merged_dir, seed));
    }
    assert_ne!(text(&lora_dir, 0), text(&base_dir, 0));

    // Merging again over it, or merging a run without adapters, is refused.
    let again = MergeLoraArgs {
        run_dir: lora_dir.clone(),
        out: merged_dir.clone(),
        force: false,
    };
    assert!(run_merge_lora(&again).is_err());
    let plain = MergeLoraArgs {
        run_dir: base_dir.clone(),
        out: dir.join("x"),
        force: false,
    };
    let err = run_merge_lora(&plain).unwrap_err().to_string();
    assert!(err.contains("no LoRA adapters"), "{err}");

    // Fine-tuning refuses a new model shape, a LoRA base, a missing text, --dp.
    let mut shaped = small(dir, new.clone(), "y");
    shaped.n_layer = Some(3);
    let err = train_args(&finetune(&base_dir, shaped, None)).unwrap_err();
    assert!(err.to_string().contains("--n-layer"), "{err}");
    let err =
        train::run(&train_args(&finetune(&lora_dir, small(dir, new.clone(), "y"), None)).unwrap())
            .unwrap_err();
    assert!(err.to_string().contains("merge-lora"), "{err}");
    let mut no_text = small(dir, new.clone(), "y");
    no_text.corpus = None;
    assert!(train_args(&finetune(&base_dir, no_text, Some(2))).is_err());
    let mut dp = small(dir, new, "y");
    dp.dp = Some(2);
    let err = train::run(&train_args(&finetune(&base_dir, dp, Some(2))).unwrap()).unwrap_err();
    assert!(err.to_string().contains("--lora-rank with --dp"), "{err}");
}
