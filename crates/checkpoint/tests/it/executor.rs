//! The executor on the CPU backend: every strategy gives the same gradient bits as no
//! recomputation, and the memory it holds is what the planner predicts.

use brrr_backend::{Backend, DType, block_on};
use brrr_checkpoint::{Chain, GptShape, Recompute, Strategy, gpt_chain_measured, min_budget};
use brrr_cpu::CpuBackend;
use brrr_nn::{Gpt, GptConfig, MicroBatch, Module};
use brrr_tensor::Tensor;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const B: usize = 2;
const T: usize = 16;

fn config(n_layer: usize) -> GptConfig {
    GptConfig {
        vocab_size: 64,
        block_size: T,
        n_layer,
        n_head: 4,
        n_embd: 32,
    }
}

fn model(backend: &CpuBackend, n_layer: usize) -> Gpt<CpuBackend> {
    Gpt::new(
        backend,
        config(n_layer),
        DType::F32,
        &mut ChaCha8Rng::seed_from_u64(3),
    )
    .unwrap()
}

fn batch(backend: &CpuBackend, seed: u32) -> (Tensor<CpuBackend>, Tensor<CpuBackend>) {
    let ids: Vec<u32> = (0..(B * T) as u32)
        .map(|i| (i * 7 + seed * 13) % 64)
        .collect();
    let targets: Vec<i32> = ids.iter().map(|&i| ((i * 5 + 1) % 64) as i32).collect();
    (
        Tensor::from_u32(backend, &ids, [B, T]).unwrap(),
        Tensor::from_i32(backend, &targets, [B, T]).unwrap(),
    )
}

fn shape(n_layer: usize) -> GptShape {
    let c = config(n_layer);
    GptShape {
        n_layer,
        n_head: c.n_head,
        n_embd: c.n_embd,
        vocab_size: c.vocab_size,
        batch: B,
        seq_len: T,
        dtype_bytes: 4,
    }
}

fn grads(model: &Gpt<CpuBackend>) -> Vec<Vec<u32>> {
    model
        .params()
        .iter()
        .map(|p| {
            let h = block_on(p.grad.to_host()).unwrap().to_f32();
            h.iter().map(|x| x.to_bits()).collect()
        })
        .collect()
}

/// Two micro-batches in flight (F0 F1 B1 B0), as a pipeline schedule runs them.
fn reference(n_layer: usize) -> (Vec<Vec<u32>>, Vec<u32>) {
    let backend = CpuBackend::new();
    let mut m = model(&backend, n_layer);
    let mut losses = Vec::new();
    for mb in 0..2 {
        let (ids, targets) = batch(&backend, mb);
        let l = m.forward_loss_mb(MicroBatch(mb), &ids, &targets).unwrap();
        losses.extend(
            block_on(l.to_host())
                .unwrap()
                .to_f32()
                .iter()
                .map(|x| x.to_bits()),
        );
    }
    m.backward_mb(MicroBatch(1), 0.01).unwrap();
    m.backward_mb(MicroBatch(0), 0.01).unwrap();
    (grads(&m), losses)
}

fn with_strategy(n_layer: usize, strategy: Strategy) -> (Vec<Vec<u32>>, Vec<u32>) {
    let backend = CpuBackend::new();
    let mut m = model(&backend, n_layer);
    let chain = shape(n_layer).chain();
    let mut exec = Recompute::new(strategy.plan(&chain).unwrap(), &chain).unwrap();
    let mut losses = Vec::new();
    for mb in 0..2 {
        let (ids, targets) = batch(&backend, mb);
        let l = exec
            .forward_loss(&mut m, MicroBatch(mb), &ids, &targets)
            .unwrap();
        losses.extend(
            block_on(l.to_host())
                .unwrap()
                .to_f32()
                .iter()
                .map(|x| x.to_bits()),
        );
    }
    exec.backward(&mut m, MicroBatch(1), 0.01).unwrap();
    exec.backward(&mut m, MicroBatch(0), 0.01).unwrap();
    assert!(m.in_flight().is_empty());
    (grads(&m), losses)
}

#[test]
fn every_strategy_gives_bitwise_the_gradients_of_no_recomputation() {
    for n_layer in [1, 3, 4] {
        let (want, want_losses) = reference(n_layer);
        let chain = shape(n_layer).chain();
        let smallest = min_budget(&chain).unwrap();
        let none_peak = Strategy::None
            .plan(&chain)
            .unwrap()
            .simulate(&chain)
            .unwrap()
            .peak;
        let mut strategies = vec![
            Strategy::None,
            Strategy::Sqrt,
            Strategy::Selective,
            Strategy::Budget(smallest),
            Strategy::Budget((smallest + none_peak) / 2),
        ];
        strategies.extend((1..=n_layer + 1).map(Strategy::Every));
        for s in strategies {
            let (got, losses) = with_strategy(n_layer, s);
            assert_eq!(losses, want_losses, "{s} with {n_layer} layers: losses");
            assert!(got == want, "{s} with {n_layer} layers: gradients differ");
        }
    }
}

/// Peak bytes above the model's own (weights and gradients) during one forward and
/// backward of micro-batch 0 with `strategy`.
fn measured_peak(n_layer: usize, strategy: Strategy, chain: &Chain) -> u64 {
    let backend = CpuBackend::new();
    let mut m = model(&backend, n_layer);
    let mut exec = Recompute::new(strategy.plan(chain).unwrap(), chain).unwrap();
    let (ids, targets) = batch(&backend, 0);
    let base = backend.memory_stats().bytes_in_use;
    backend.reset_peak_memory();
    let l = exec
        .forward_loss(&mut m, MicroBatch(0), &ids, &targets)
        .unwrap();
    drop(l);
    exec.backward(&mut m, MicroBatch(0), 0.01).unwrap();
    backend.memory_stats().peak_bytes - base
}

#[test]
fn measured_chain_matches_the_counted_one() {
    let backend = CpuBackend::new();
    let mut m = model(&backend, 2);
    let (ids, targets) = batch(&backend, 0);
    let measured = gpt_chain_measured(&mut m, &ids, &targets).unwrap();
    let counted = shape(2).chain();
    for (a, b) in measured.segments.iter().zip(&counted.segments) {
        assert_eq!(a.input, b.input, "{}", a.name);
    }
    assert_eq!(
        measured.segments[0].stash, counted.segments[0].stash,
        "block stash"
    );
    // The head's targets are the caller's buffer, not allocated by the head.
    assert_eq!(
        measured.segments[2].stash + (B * T * 4) as u64,
        counted.segments[2].stash
    );
}

#[test]
fn measured_peaks_follow_the_plan() {
    let n_layer = 4;
    let backend = CpuBackend::new();
    let mut m = model(&backend, n_layer);
    let (ids, targets) = batch(&backend, 0);
    let chain = gpt_chain_measured(&mut m, &ids, &targets).unwrap();
    let smallest = min_budget(&chain).unwrap();
    for s in [
        Strategy::None,
        Strategy::Every(1),
        Strategy::Sqrt,
        Strategy::Selective,
        Strategy::Budget(smallest),
    ] {
        let predicted = s.plan(&chain).unwrap().simulate(&chain).unwrap().peak;
        let measured = measured_peak(n_layer, s, &chain);
        // Outside the chain: ids, positions and targets (the embeddings' stash).
        let outside = (3 * B * T * 4) as u64;
        let rel = (measured as f64 - (predicted + outside) as f64) / measured as f64;
        println!(
            "{s}: predicted {} measured {measured} ({:+.2}%)",
            predicted + outside,
            100.0 * rel
        );
        assert!(
            // Selective's prediction is an upper bound (see `Schedule::simulate`).
            rel.abs() < if s == Strategy::Selective { 0.02 } else { 0.01 },
            "{s}: predicted {predicted}+{outside}, measured {measured}"
        );
        if let Strategy::Budget(b) = s {
            assert!(measured <= b + outside, "budget {b} exceeded: {measured}");
        }
    }
}

/// The counted temporaries equal the measured ones on seven shapes (the formulas in
/// `GptShape::chain` were fitted to these and must keep matching the layers).
#[test]
fn counted_temporaries_match_the_device() {
    for (b, t, c, h, v) in [
        (16usize, 128usize, 128usize, 4usize, 256usize),
        (4, 64, 64, 8, 256),
        (2, 16, 32, 4, 256),
        // heads × sequence ≤ width: the scores are smaller than an activation.
        (4, 16, 128, 4, 256),
        (2, 8, 64, 2, 256),
        // ... and a vocabulary no wider than the model.
        (1, 32, 256, 8, 256),
        (2, 8, 128, 2, 64),
    ] {
        let backend = CpuBackend::new();
        let cfg = GptConfig {
            vocab_size: v,
            block_size: t,
            n_layer: 2,
            n_head: h,
            n_embd: c,
        };
        let mut m = Gpt::new(&backend, cfg, DType::F32, &mut ChaCha8Rng::seed_from_u64(3)).unwrap();
        let ids: Vec<u32> = (0..(b * t) as u32).map(|i| i % v as u32).collect();
        let tg: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        let ids = Tensor::from_u32(&backend, &ids, [b, t]).unwrap();
        let tg = Tensor::from_i32(&backend, &tg, [b, t]).unwrap();
        let measured = gpt_chain_measured(&mut m, &ids, &tg).unwrap();
        let counted = GptShape {
            n_layer: 2,
            n_head: h,
            n_embd: c,
            vocab_size: v,
            batch: b,
            seq_len: t,
            dtype_bytes: 4,
        }
        .chain();
        for (a, w) in measured.segments.iter().zip(&counted.segments) {
            assert_eq!(
                a.forward_extra, w.forward_extra,
                "{} forward, {b}×{t}×{c}×{h}",
                a.name
            );
            // Within LayerNorm's statistics (2·N elements) of the device.
            let gap = a.backward_extra.abs_diff(w.backward_extra);
            assert!(
                gap <= (2 * b * t * 4) as u64,
                "{} backward, {b}×{t}×{c}×{h}, vocabulary {v}: {gap}",
                a.name
            );
        }
    }
}
