//! `brrr-train` in a browser: a tiny GPT trains for a few steps through the async
//! [`Trainer::step`], never blocking the page's thread, on brrr-cpu compiled to wasm32
//! and, where the browser has WebGPU, on brrr-wgpu. Run by `scripts/test-wgpu.sh browser`
//! through wasm-bindgen-test in headless Chromium:
//!
//! ```text
//! cargo test -p brrr-train --target wasm32-unknown-unknown --test web
//! ```
#![cfg(target_arch = "wasm32")]

use brrr_backend::Backend;
use brrr_cpu::CpuBackend;
use brrr_train::{Batcher, Corpus, TrainConfig, Trainer, val_batches};
use brrr_wgpu::WgpuBackend;
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

const STEPS: u64 = 8;

fn tiny() -> (Corpus, TrainConfig) {
    let text = "It was the best of times, it was the worst of times, it was the age of wisdom. "
        .repeat(40);
    let corpus = Corpus::from_text("dickens.txt", text).unwrap();
    let mut cfg = TrainConfig {
        steps: STEPS,
        batch_size: 4,
        seq_len: 16,
        warmup_steps: 2,
        lr: 1e-2,
        min_lr: 1e-3,
        eval_batches: 1,
        corpus: "dickens.txt".into(),
        ..TrainConfig::default()
    };
    (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) = (1, 2, 32);
    (corpus, cfg)
}

/// Every step's loss, and the validation loss at the end.
async fn train<B: Backend>(backend: &B) -> (Vec<f32>, f32) {
    let (corpus, cfg) = tiny();
    let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let val = val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, 1).unwrap();
    let mut trainer = Trainer::new(backend, cfg, Box::new(data), val).unwrap();
    let mut losses = Vec::new();
    while !trainer.is_finished() {
        let s = trainer.step().await.expect("a training step");
        assert!(s.seconds.is_none(), "no clock on wasm32");
        losses.push(s.loss);
    }
    let val = trainer.evaluate().await.unwrap();
    (losses, val)
}

fn assert_falls(name: &str, losses: &[f32], val: f32) {
    console_log!("{name}: losses {losses:?}, val {val}");
    assert_eq!(losses.len(), STEPS as usize);
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    assert!(
        last < first - 0.3,
        "{name}: loss did not fall: {first} -> {last}"
    );
    assert!(val.is_finite(), "{name}: val {val}");
}

#[wasm_bindgen_test]
async fn cpu_training_lowers_the_loss_in_the_browser() {
    let (losses, val) = train(&CpuBackend::new()).await;
    assert_falls("cpu (wasm32)", &losses, val);
}

#[wasm_bindgen_test]
async fn webgpu_training_lowers_the_loss_where_webgpu_exists() {
    let gpu = match WgpuBackend::new().await {
        Ok(g) => g,
        Err(e) => {
            console_log!("wgpu (browser): SKIPPED, no WebGPU adapter: {e}");
            return;
        }
    };
    console_log!("wgpu device: {}", gpu.report());
    let (losses, val) = train(&gpu).await;
    assert_falls("wgpu (browser)", &losses, val);
}
