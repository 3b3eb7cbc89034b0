//! Several CPU devices, each with its own thread pool, training at once in separate
//! threads: every run must equal, bit for bit, the same run alone on
//! `CpuBackend::new()` (rayon's global pool). This is what lets N simulated devices
//! stand in for N GPUs in data-parallel tests.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::{Backend, DType};
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, Gpt, GptConfig, Module};
use brrr_tensor::Tensor;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const STEPS: usize = 3;

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 64,
        block_size: 16,
        n_layer: 2,
        n_head: 2,
        n_embd: 32,
    }
}

/// Per-step mean-loss bits and the final weights' bits of a short training run.
struct Run {
    losses: Vec<u32>,
    weights: Vec<Vec<u32>>,
}

/// `STEPS` steps of forward_loss, backward and AdamW on `be`. `seed` picks the data
/// and the initial weights, so different devices can train different runs.
fn train<B: Backend>(be: &B, seed: u64) -> Run {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut gpt = Gpt::new(be, config(), DType::F32, &mut rng).unwrap();
    let mut opt = AdamW::new(AdamWConfig::default());
    let (b, t, v) = (2usize, 16usize, 64u32);
    let mut losses = Vec::new();
    for step in 0..STEPS as u32 {
        let ids: Vec<u32> = (0..(b * t) as u32)
            .map(|i| (i * 7 + step * 3 + seed as u32) % v)
            .collect();
        let targets: Vec<i32> = ids.iter().map(|&i| ((i * 5 + 1) % v) as i32).collect();
        let ids = Tensor::from_u32(be, &ids, [b, t]).unwrap();
        let targets = Tensor::from_i32(be, &targets, [b, t]).unwrap();
        let loss = gpt.forward_loss(&ids, &targets).unwrap();
        losses.push((loss.mean_all().unwrap().to_vec_f32().unwrap()[0]).to_bits());
        gpt.backward(1.0 / (b * t) as f32).unwrap();
        opt.step(gpt.params_mut(), 1e-2, 1.0).unwrap();
        for p in gpt.params_mut() {
            p.zero_grad().unwrap();
        }
    }
    let weights = gpt
        .params()
        .iter()
        .map(|p| {
            let v = p.value.to_vec_f32().unwrap();
            v.iter().map(|x| x.to_bits()).collect()
        })
        .collect();
    Run { losses, weights }
}

#[test]
fn four_cpu_devices_in_four_threads_match_the_run_alone() {
    let alone: Vec<Run> = (0..4).map(|i| train(&CpuBackend::new(), i)).collect();
    let together: Vec<Run> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|i| {
                s.spawn(move || {
                    // 1 or 2 threads per device: results must not depend on it.
                    let be = CpuBackend::device(i as usize, 1 + (i as usize % 2)).unwrap();
                    assert_eq!(be.location().to_string(), format!("cpu:{i}"));
                    train(&be, i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.losses.len(), STEPS);
        assert_eq!(a.losses, t.losses, "device {i}: losses differ");
        assert_eq!(a.weights.len(), t.weights.len());
        for (j, (wa, wt)) in a.weights.iter().zip(&t.weights).enumerate() {
            assert!(wa == wt, "device {i}: parameter {j} differs");
        }
    }
    // The runs differ from each other (different seeds), so equality above is not
    // a constant that any run would satisfy.
    assert_ne!(alone[0].losses, alone[1].losses);
}

#[test]
fn devices_report_their_threads_and_locations() {
    let be = CpuBackend::device(3, 2).unwrap();
    assert_eq!(be.threads(), 2);
    assert_eq!(be.location().to_string(), "cpu:3");
    assert!(be.same_device(&be.clone()));
    assert!(!be.same_device(&CpuBackend::new()));
    assert_eq!(CpuBackend::new().location().to_string(), "cpu:0");
    assert_eq!(CpuBackend::with_threads(1).unwrap().threads(), 1);
}
