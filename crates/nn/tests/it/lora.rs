//! LoRA: fresh adapters leave the model as it was, a merged model computes what the
//! adapted one does, and training the adapters moves nothing else.

use brrr_cpu::CpuBackend;
use brrr_nn::lora::{LoraConfig, add_adapters, is_adapter, merge_adapters};
use brrr_nn::{AdamW, AdamWConfig, DType, Gpt, GptConfig, Module, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 32,
        block_size: 16,
        n_layer: 2,
        n_head: 2,
        n_embd: 24,
    }
}

fn batch(cpu: &CpuBackend) -> (Tensor<CpuBackend>, Tensor<CpuBackend>) {
    let ids: Vec<u32> = (0..32).map(|i| (i * 7 + 3) % 32).collect();
    let targets: Vec<i32> = ids.iter().map(|&i| ((i + 1) % 32) as i32).collect();
    (
        Tensor::from_u32(cpu, &ids, [2, 16]).unwrap(),
        Tensor::from_i32(cpu, &targets, [2, 16]).unwrap(),
    )
}

fn loss(gpt: &mut Gpt<CpuBackend>, ids: &Tensor<CpuBackend>, t: &Tensor<CpuBackend>) -> f64 {
    let l = gpt.forward_loss(ids, t).unwrap().mean_all().unwrap();
    gpt.clear_saved();
    l.to_scalar_f64().unwrap()
}

fn values(gpt: &Gpt<CpuBackend>, adapters: bool) -> Vec<(String, Vec<f32>)> {
    gpt.params()
        .into_iter()
        .filter(|p| is_adapter(&p.name) == adapters)
        .map(|p| (p.name.clone(), p.value.to_vec_f32().unwrap()))
        .collect()
}

#[test]
fn fresh_adapters_change_nothing_and_count_as_predicted() {
    let cpu = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut gpt = Gpt::new(&cpu, config(), DType::F32, &mut rng).unwrap();
    let (ids, t) = batch(&cpu);
    let before = loss(&mut gpt, &ids, &t);
    let names: Vec<String> = gpt.params().iter().map(|p| p.name.clone()).collect();
    let lora = LoraConfig {
        rank: 4,
        alpha: 8.0,
    };
    add_adapters(&mut gpt, lora, &mut rng).unwrap();
    // B = 0: the update adds exact zeros.
    assert_eq!(loss(&mut gpt, &ids, &t).to_bits(), before.to_bits());
    let adapter_numel: usize = gpt
        .params()
        .iter()
        .filter(|p| is_adapter(&p.name))
        .map(|p| p.numel())
        .sum();
    assert_eq!(adapter_numel, lora.adapter_params(&config()));
    // The base parameters keep their names and order; the adapters follow their layers.
    let base: Vec<String> = gpt
        .params()
        .iter()
        .filter(|p| !is_adapter(&p.name))
        .map(|p| p.name.clone())
        .collect();
    assert_eq!(base, names);
    assert!(
        gpt.params()
            .iter()
            .any(|p| p.name == "h.1.mlp.c_proj.lora_b")
    );
    assert!(
        LoraConfig {
            rank: 0,
            alpha: 1.0
        }
        .validate()
        .is_err()
    );
}

#[test]
fn training_adapters_moves_only_adapters_and_merging_keeps_the_function() {
    let cpu = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let mut gpt = Gpt::new(&cpu, config(), DType::F32, &mut rng).unwrap();
    let lora = LoraConfig {
        rank: 4,
        alpha: 8.0,
    };
    add_adapters(&mut gpt, lora, &mut rng).unwrap();
    let (ids, t) = batch(&cpu);
    let frozen = values(&gpt, false);
    let mut opt = AdamW::new(AdamWConfig::default());
    let first = loss(&mut gpt, &ids, &t);
    for _ in 0..40 {
        gpt.zero_grad().unwrap();
        gpt.forward_loss(&ids, &t).unwrap();
        gpt.backward(1.0 / 32.0).unwrap();
        let trained = gpt
            .params_mut()
            .into_iter()
            .filter(|p| is_adapter(&p.name))
            .collect();
        opt.step(trained, 1e-2, 1.0).unwrap();
    }
    let tuned = loss(&mut gpt, &ids, &t);
    // A random base's frozen embeddings and head leave the adapters little to work
    // with; the loss still falls.
    assert!(tuned < first - 0.2, "{first} -> {tuned}");
    assert_eq!(values(&gpt, false), frozen, "a frozen weight moved");

    merge_adapters(&mut gpt).unwrap();
    assert!(gpt.params().iter().all(|p| !is_adapter(&p.name)));
    let merged = loss(&mut gpt, &ids, &t);
    // One GEMM with W + s·BA against two: f32 rounding only.
    assert!(
        (merged - tuned).abs() < 1e-4 * tuned.abs().max(1.0),
        "{tuned} vs {merged}"
    );
    // And the merged model is a plain model again: a fresh GPT loads its weights.
    let weights = values(&gpt, false);
    assert_ne!(weights, frozen);
}
