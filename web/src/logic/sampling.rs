//! The training demo's arithmetic: its model sizes, throughput, and drawing the next
//! token from the model's logits.

use rand::Rng;

/// A model and batch shape for the training demo.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainPreset {
    /// Menu key.
    pub key: &'static str,
    /// Menu text.
    pub label: &'static str,
    /// Transformer layers.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Width.
    pub n_embd: usize,
    /// Context length (= sequence length trained on).
    pub seq_len: usize,
    /// Sequences per step.
    pub batch_size: usize,
    /// Optimizer steps of a full run.
    pub steps: u64,
    /// Peak learning rate.
    pub lr: f64,
}

/// The demo's presets: a tiny model that trains in a minute even on the CPU in wasm, a
/// micro one for software GPU emulators (SwiftShader), and `brrr train`'s default model
/// (4 layers, 128 wide, context 128, 16 sequences a step).
pub const PRESETS: [TrainPreset; 3] = [
    TrainPreset {
        key: "tiny",
        label: "tiny — 2 layers × 64, context 64",
        n_layer: 2,
        n_head: 4,
        n_embd: 64,
        seq_len: 64,
        batch_size: 8,
        steps: 300,
        lr: 3e-3,
    },
    TrainPreset {
        key: "micro",
        label: "micro — 1 layer × 32, context 32",
        n_layer: 1,
        n_head: 2,
        n_embd: 32,
        seq_len: 32,
        batch_size: 4,
        steps: 200,
        lr: 1e-2,
    },
    TrainPreset {
        key: "default",
        label: "default — 4 layers × 128, context 128 (brrr train's)",
        n_layer: 4,
        n_head: 4,
        n_embd: 128,
        seq_len: 128,
        batch_size: 16,
        steps: 800,
        lr: 2e-3,
    },
];

/// The preset with `key` (the first one for an unknown key).
pub fn preset(key: &str) -> TrainPreset {
    PRESETS
        .iter()
        .copied()
        .find(|p| p.key == key)
        .unwrap_or(PRESETS[0])
}

/// Tokens per second over the steps after the first (which also compiles kernels and
/// allocates): `tokens_after_first / seconds_after_first`. `None` before two steps.
pub fn tokens_per_s(tokens_after_first: usize, seconds_after_first: f64) -> Option<f64> {
    (tokens_after_first > 0 && seconds_after_first > 0.0)
        .then(|| tokens_after_first as f64 / seconds_after_first)
}

/// Draws a token index from `softmax(logits / temperature)` restricted to the `top_k`
/// largest logits (`top_k = 0`: all of them); `temperature ≤ 0` takes the largest. `None`
/// when the logits are empty or not all finite: there is no distribution to draw from.
pub fn pick(logits: &[f32], temperature: f32, top_k: usize, rng: &mut impl Rng) -> Option<usize> {
    if logits.is_empty() || logits.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if temperature <= 0.0 || !temperature.is_finite() {
        return order.first().copied();
    }
    let k = if top_k == 0 {
        order.len()
    } else {
        top_k.min(order.len())
    };
    let top = &order[..k];
    let max = f64::from(logits[top[0]]);
    let weights: Vec<f64> = top
        .iter()
        .map(|&i| ((f64::from(logits[i]) - max) / f64::from(temperature)).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut u = rng.random::<f64>() * total;
    for (&i, w) in top.iter().zip(&weights) {
        if u < *w {
            return Some(i);
        }
        u -= w;
    }
    top.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn greedy_and_top1_take_the_largest() {
        let mut rng = StdRng::seed_from_u64(0);
        let logits = [0.1, 3.0, -2.0, 2.9];
        assert_eq!(pick(&logits, 0.0, 0, &mut rng), Some(1));
        assert_eq!(pick(&logits, 1.0, 1, &mut rng), Some(1));
        assert_eq!(pick(&[], 1.0, 0, &mut rng), None);
        assert_eq!(pick(&[f32::NAN, 1.0], 1.0, 0, &mut rng), None);
    }

    #[test]
    fn top_k_never_draws_outside_the_k_largest() {
        let mut rng = StdRng::seed_from_u64(7);
        let logits = [1.0, 0.9, 0.8, -5.0, 0.7];
        for _ in 0..500 {
            let i = pick(&logits, 1.0, 2, &mut rng).unwrap();
            assert!(i == 0 || i == 1, "{i}");
        }
    }

    #[test]
    fn throughput_needs_two_steps() {
        assert_eq!(tokens_per_s(0, 1.0), None);
        assert_eq!(tokens_per_s(1024, 0.5), Some(2048.0));
        assert_eq!(preset("nope"), PRESETS[0]);
        assert!(PRESETS.iter().all(|p| p.n_embd % p.n_head == 0));
    }
}
