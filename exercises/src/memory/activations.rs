//! # Activation memory of a transformer layer
//!
//! What does one transformer layer keep for its backward, and how much does recomputation
//! save? Count as Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
//! Transformer Models", §4) do: sequence length `s`, micro-batch `b`, width `h`, `a` heads,
//! one GPU, activations in 16 bits and dropout masks one byte per element. A layer keeps:
//!
//! - for its two LayerNorms, each one's input;
//! - in attention: the input of the QKV projection; Q and K (for `QKᵀ`); the softmax output
//!   (one `s × s` score matrix per head and sequence); its dropout mask; the dropout's
//!   output and V (for the product with V); the input of the output projection; the output
//!   dropout's mask;
//! - in the MLP: the input of the first linear layer; the input of the GELU and the input
//!   of the second linear layer (both `4h` wide); the dropout's mask.
//!
//! Return the bytes per layer for each strategy: `Recompute::None` keeps everything;
//! `Recompute::Selective` recomputes the attention core (whatever grows with `s²`) in the
//! backward and keeps the rest; `Recompute::Full` keeps only the layer's input.
//!
//! About 10 lines. Checked against `brrr_perf::memory::activation_bytes_per_layer`.
//!
//! ## Hint
//!
//! Count in two units: `s·b·h` and `a·s²·b`. A 16-bit tensor of `s·b·h` elements is
//! `2·sbh` bytes, its mask `sbh`. Q, K and V are each `h` wide. Three of the tensors above
//! grow with `s²`.

use crate::check::{Outcome, close, every, rng, with_seed};
use brrr_perf::memory::{Precision, Recompute, TransformerConfig, activation_bytes_per_layer};
use rand::Rng;

/// YOUR CODE: activation bytes one layer keeps for its backward.
#[cfg(not(feature = "solutions"))]
pub fn layer_activation_bytes(s: u64, b: u64, h: u64, a: u64, recompute: Recompute) -> f64 {
    let _ = (s, b, h, a, recompute);
    0.0
}

#[cfg(feature = "solutions")]
pub use solution::layer_activation_bytes;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/memory/activations.rs"]
pub mod solution;

/// Against brrr-perf on random shapes, every strategy.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..20 {
        let heads = rng.random_range(1..64u64);
        let h = heads * 64;
        let s = rng.random_range(1..8192u64);
        let b = rng.random_range(1..32u64);
        let cfg = TransformerConfig::gpt(12, h, heads, s, 50304);
        let mut outcomes = Vec::new();
        for r in [Recompute::None, Recompute::Selective, Recompute::Full] {
            let want = activation_bytes_per_layer(&cfg, b, 1, false, r, Precision::Mixed)
                .map_err(|e| e.to_string())?;
            let got = layer_activation_bytes(s, b, h, heads, r);
            outcomes.push(close(
                &format!("s={s} b={b} h={h} a={heads} {r:?}"),
                got,
                want,
                1e-12,
            ));
        }
        every(outcomes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "an exercise: solve it, then `cargo run -p brrr-exercises`"
    )]
    fn check() {
        if let Err(e) = super::check() {
            panic!("{e}");
        }
    }
}
