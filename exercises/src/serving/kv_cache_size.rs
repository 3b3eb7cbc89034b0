//! # How many tokens a KV cache holds
//!
//! Decoding keeps every earlier token's keys and values, in every layer, so that a new
//! token's attention need not recompute them. That cache, not the weights, decides how many
//! requests a server runs at once.
//!
//! How many bytes does one token take in the cache of a model of `n_layer` layers of width
//! `n_embd`, stored in `dtype_bytes`-byte numbers (all heads side by side)? And how many
//! whole tokens does `budget_bytes` hold? GPT-2 124M in f32 (12 layers, width 768) takes
//! 73,728 bytes a token. About 3 lines. Checked against `brrr_serve::kv_bytes_per_token`.
//!
//! ## Hint
//!
//! Per layer, a token has one key vector and one value vector, each as wide as the model.

use crate::check::{Outcome, rng, with_seed};
use brrr_backend::DType;
use rand::Rng;

/// YOUR CODE: bytes per token, and whole tokens in the budget.
#[cfg(not(feature = "solutions"))]
pub fn kv_cache_tokens(
    n_layer: usize,
    n_embd: usize,
    dtype_bytes: usize,
    budget_bytes: usize,
) -> (usize, usize) {
    let _ = (n_layer, n_embd, dtype_bytes, budget_bytes);
    (0, 0)
}

#[cfg(feature = "solutions")]
pub use solution::kv_cache_tokens;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/serving/kv_cache_size.rs"]
pub mod solution;

/// Against brrr-serve on random shapes and budgets, in f32, bf16 and f16.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..50 {
        let (layers, width) = (rng.random_range(1..100), 64 * rng.random_range(1..200));
        let dtype = [DType::F32, DType::BF16, DType::F16][rng.random_range(0..3)];
        let budget = rng.random_range(0..1usize << 40);
        let per = brrr_serve::kv_bytes_per_token(layers, width, dtype);
        let want = (per, budget / per);
        let got = kv_cache_tokens(layers, width, dtype.size_in_bytes(), budget);
        if got != want {
            let hint = if got.0 * 2 == want.0 {
                "\nhint: half the bytes: a layer caches a key and a value for every token"
            } else {
                ""
            };
            return Err(format!(
                "{layers} layers of width {width} in {dtype}, {budget} bytes: got {got:?}, want {want:?}{hint}"
            ));
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
