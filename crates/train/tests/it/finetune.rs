//! A fine-tuning run: it starts as its base model, LoRA trains the adapters and nothing
//! else (with optimizer state for them alone), and an interrupted run resumes bit for bit.
#![cfg(not(target_arch = "wasm32"))]

use brrr_cpu::CpuBackend;
use brrr_nn::LoraConfig;
use brrr_nn::lora::is_adapter;
use brrr_train::{Finetune, StepStats, TrainConfig, TrainState, Trainer};

fn trainer(cfg: &TrainConfig, text: &str) -> Trainer<CpuBackend> {
    crate::small::trainer(cfg, text)
}

const BASE_TEXT: &str = crate::small::DICKENS;
const NEW_TEXT: &str = "Call me Ishmael. Some years ago, never mind how long. ";

fn config(lora: Option<LoraConfig>) -> TrainConfig {
    TrainConfig {
        finetune: Some(Finetune {
            base: "base".into(),
            lora,
        }),
        ..crate::small::config()
    }
}

/// A base run of a few steps on other text.
fn base_state() -> TrainState {
    let mut cfg = config(None);
    cfg.finetune = None;
    let mut base = trainer(&cfg, BASE_TEXT);
    for _ in 0..4 {
        base.step_blocking().unwrap();
    }
    base.state_blocking().unwrap()
}

fn values(state: &TrainState, adapters: bool) -> Vec<(String, Vec<f64>)> {
    state
        .params
        .iter()
        .filter(|p| is_adapter(&p.name) == adapters)
        .map(|p| (p.name.clone(), p.value.to_f64()))
        .collect()
}

#[test]
fn lora_trains_adapters_only_from_the_base_weights_and_resumes_bit_for_bit() {
    let base = base_state();
    let lora = LoraConfig {
        rank: 4,
        alpha: 8.0,
    };
    let cfg = config(Some(lora));
    let start = |cfg: &TrainConfig| {
        let mut t = trainer(cfg, NEW_TEXT);
        t.load_base(&base).unwrap();
        t
    };
    let mut full = start(&cfg);
    // B = 0: the run starts as the base model, whose loss on the new text it reports.
    let mut plain = trainer(&config(None), NEW_TEXT);
    plain.load_base(&base).unwrap();
    assert_eq!(
        full.evaluate_blocking().unwrap().to_bits(),
        plain.evaluate_blocking().unwrap().to_bits()
    );
    let all: Vec<StepStats> = (0..8).map(|_| full.step_blocking().unwrap()).collect();
    assert!(all[7].loss < all[0].loss, "{:?}", all);
    let end = full.state_blocking().unwrap();
    assert_eq!(
        values(&end, false),
        values(&base, false),
        "a frozen weight moved"
    );
    assert_ne!(
        values(&end, true),
        values(&start(&cfg).state_blocking().unwrap(), true)
    );
    // Optimizer state for the adapters alone.
    let adapters = lora.adapter_params(&cfg.model);
    assert_eq!(full.optimizer_state_bytes(), 8 * adapters);
    assert!(
        end.params
            .iter()
            .all(|p| p.moments.is_some() == is_adapter(&p.name))
    );

    let mut first = start(&cfg);
    for _ in 0..5 {
        first.step_blocking().unwrap();
    }
    let bytes = first.state_blocking().unwrap().to_bytes().unwrap();
    let ck = brrr_train::ckpt::from_bytes(&bytes, "mem").unwrap();
    let state = TrainState::from_checkpoint(&ck).unwrap();
    // Resumed from its own checkpoint (adapters and frozen weights): no base needed.
    let mut resumed = trainer(&cfg, NEW_TEXT);
    resumed.restore(&state).unwrap();
    for want in &all[5..] {
        let got = resumed.step_blocking().unwrap();
        assert_eq!(
            (got.step, got.loss.to_bits(), got.grad_norm.to_bits()),
            (want.step, want.loss.to_bits(), want.grad_norm.to_bits()),
        );
    }
}

#[test]
fn a_base_of_another_shape_or_with_adapters_is_refused() {
    let base = base_state();
    let mut other = config(None);
    other.model.n_embd = 32;
    let err = trainer(&other, NEW_TEXT).load_base(&base).unwrap_err();
    assert!(err.to_string().contains("base run's model"), "{err}");

    let lora = Some(LoraConfig {
        rank: 2,
        alpha: 2.0,
    });
    let mut tuned = trainer(&config(lora), NEW_TEXT);
    tuned.load_base(&base).unwrap();
    tuned.step_blocking().unwrap();
    let with_adapters = tuned.state_blocking().unwrap();
    let err = trainer(&config(None), NEW_TEXT)
        .load_base(&with_adapters)
        .unwrap_err();
    assert!(err.to_string().contains("merge-lora"), "{err}");
    // After a step, a base can no longer be loaded.
    let err = tuned.load_base(&base).unwrap_err();
    assert!(err.to_string().contains("already trained"), "{err}");
}

#[test]
fn the_adapter_count_is_brrr_perfs() {
    let cfg = config(None).model;
    let perf = brrr_perf::memory::TransformerConfig::gpt(
        cfg.n_layer as u64,
        cfg.n_embd as u64,
        cfg.n_head as u64,
        cfg.block_size as u64,
        cfg.vocab_size as u64,
    );
    let lora = LoraConfig {
        rank: 8,
        alpha: 16.0,
    };
    let per_layer = brrr_perf::memory::layer_lora_params(&perf, 1, 8);
    assert_eq!(
        lora.adapter_params(&cfg) as f64,
        cfg.n_layer as f64 * per_layer
    );
}

/// LoRA under activation recomputation and with the optimizer offloaded trains as it does
/// without either, bit for bit: the adapters' saved inputs are dropped and recomputed
/// with the frozen layers', and the host update is the device's kernel.
#[test]
fn lora_with_recomputation_or_offload_matches_plain_lora() {
    use brrr_checkpoint::Strategy;
    let base = base_state();
    let lora = Some(LoraConfig {
        rank: 4,
        alpha: 8.0,
    });
    let losses = |set: fn(&mut TrainConfig)| {
        let mut cfg = config(lora);
        set(&mut cfg);
        let mut t = trainer(&cfg, NEW_TEXT);
        t.load_base(&base).unwrap();
        (0..4)
            .map(|_| {
                let s = t.step_blocking().unwrap();
                (s.loss.to_bits(), s.grad_norm.to_bits())
            })
            .collect::<Vec<_>>()
    };
    let want = losses(|_| {});
    assert_eq!(
        losses(|c| c.checkpoint = Strategy::Every(1)),
        want,
        "every:1"
    );
    assert_eq!(losses(|c| c.checkpoint = Strategy::Sqrt), want, "sqrt");
    assert_eq!(losses(|c| c.offload = true), want, "offload");
}
