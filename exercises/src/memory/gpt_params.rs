//! # Counting a GPT's parameters
//!
//! A GPT-2-style model with `layers` blocks of width `h`, context `s` and vocabulary
//! `v`: token embedding `v × h`, learned positions `s × h`, and per block two
//! LayerNorms (a gain and a bias each, `h` wide), attention (a fused `h → 3h` QKV
//! projection and an `h → h` output projection, with biases) and an MLP (`h → 4h → h`,
//! with biases); a final LayerNorm; the output head shares the token embedding (tied),
//! so it adds nothing.
//!
//! Checked against `brrr_perf::memory::TransformerConfig::params` and
//! `brrr_nn::GptConfig::num_params` (the model brrr trains) on random shapes.
//!
//! About 4 lines.
//!
//! ## Hint
//!
//! Count one block's weights and biases first (four matrices and their biases, two
//! LayerNorms), multiply by `layers`, then add the embeddings and the final LayerNorm.
//! The tied head adds nothing.

use crate::check::{Outcome, close, rng, with_seed};
use brrr_nn::GptConfig;
use brrr_perf::memory::TransformerConfig;
use rand::Rng;

/// YOUR CODE: the parameters of a GPT-2-style model with tied embeddings.
#[cfg(not(feature = "solutions"))]
pub fn gpt_params(layers: u64, h: u64, s: u64, v: u64) -> u64 {
    let _ = (s, v);
    12 * layers * h * h
}

#[cfg(feature = "solutions")]
pub use solution::gpt_params;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/memory/gpt_params.rs"]
pub mod solution;

/// Against brrr-perf's count and brrr-nn's, on random shapes and GPT-2 small.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let mut shapes = vec![(12u64, 768u64, 1024u64, 50257u64)];
    for _ in 0..20 {
        shapes.push((
            rng.random_range(1..100),
            64 * rng.random_range(1..200),
            rng.random_range(1..8192),
            rng.random_range(256..200_000),
        ));
    }
    for (l, h, s, v) in shapes {
        let got = gpt_params(l, h, s, v);
        let what = format!("layers {l}, width {h}, context {s}, vocabulary {v}");
        let perf = TransformerConfig::gpt(l, h, h / 64, s, v).params();
        close(&what, got as f64, perf, 0.0)?;
        let nn = GptConfig {
            vocab_size: v as usize,
            block_size: s as usize,
            n_layer: l as usize,
            n_head: (h / 64) as usize,
            n_embd: h as usize,
        }
        .num_params();
        if got != nn as u64 {
            return Err(format!("{what}: got {got}, brrr-nn counts {nn}"));
        }
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
