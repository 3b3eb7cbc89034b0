//! # How many tokens a KV cache holds
//!
//! Decoding keeps every earlier token's keys and values, in every layer: `2 · n_layer ·
//! n_embd` numbers a token (keys and values, all heads side by side). That figure, not
//! the weights, decides how many requests a server runs at once.
//!
//! Return the bytes one token takes for a model of `n_layer` layers of width `n_embd`
//! stored in `dtype_bytes`-byte numbers, and how many whole tokens `budget_bytes` holds.
//! GPT-2 124M in f32 (12 layers, width 768): 73,728 bytes a token, so 1 GiB holds
//! 14,563 tokens.
//!
//! Checked against `brrr_serve::kv_bytes_per_token`.

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
    let per_token = n_layer * n_embd * dtype_bytes; // keys only?
    (per_token, budget_bytes / per_token.max(1))
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
            return Err(format!(
                "{layers} layers of width {width} in {dtype}, {budget} bytes: got {got:?}, want {want:?}"
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
