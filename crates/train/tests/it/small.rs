//! The small run the optimizer, offload and fine-tuning tests share: a 2-layer, 64-wide
//! GPT on a repeated sentence, 4 × 16 tokens a step.
#![cfg(not(target_arch = "wasm32"))]

use brrr_cpu::CpuBackend;
use brrr_train::{Batcher, Corpus, TrainConfig, Trainer, val_batches};

/// The text the runs train on unless a test gives its own.
pub const DICKENS: &str = "It was the best of times, it was the worst of times. ";

/// 8 steps of the small model on `text.txt`.
pub fn config() -> TrainConfig {
    let mut cfg = TrainConfig {
        steps: 8,
        batch_size: 4,
        seq_len: 16,
        warmup_steps: 2,
        lr: 5e-3,
        eval_batches: 1,
        corpus: "text.txt".into(),
        ..TrainConfig::default()
    };
    (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) = (2, 2, 64);
    cfg
}

/// A trainer of `cfg` on `text` repeated 60 times, on the CPU.
pub fn trainer(cfg: &TrainConfig, text: &str) -> Trainer<CpuBackend> {
    let c = Corpus::from_text("text.txt", text.repeat(60)).unwrap();
    let data = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let val = val_batches(c.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches).unwrap();
    Trainer::new(&CpuBackend::new(), cfg.clone(), Box::new(data), val).unwrap()
}
