//! # One row of attention, as a fused kernel keeps it
//!
//! A fused attention kernel (`crates/cpu/src/nn/attention.rs`) never stores the `[T, T]`
//! probabilities. For each query row it turns the scores `s` into probabilities and keeps
//! one number per row, the log-sum-exp `lse = ln Σ_j exp(s_j)`; the backward recomputes
//! every probability from `s_j` and `lse` alone.
//!
//! Write `softmax_lse(scores)`, returning the probabilities and `lse` in f32. Scores here
//! reach ±1000, and `exp(89)` already overflows f32: how do you compute both without ever
//! taking `exp` of a large number? About 6 lines. Checked against an f64 reference, and
//! `exp(s_j − lse)` must give the probabilities back.
//!
//! ## Hint
//!
//! Adding the same constant to every score leaves the softmax unchanged. Which constant
//! makes every `exp` argument at most 0? Then ask what that shift does to the log of the
//! sum, and add it back.

use crate::check::{Outcome, all_close, close, f64s, rng, with_seed};
use rand::Rng;

/// YOUR CODE: the softmax of `scores` and their log-sum-exp.
#[cfg(not(feature = "solutions"))]
pub fn softmax_lse(scores: &[f32]) -> (Vec<f32>, f32) {
    (vec![0.0; scores.len()], 0.0)
}

#[cfg(feature = "solutions")]
pub use solution::softmax_lse;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/kernels/attention_row.rs"]
pub mod solution;

/// Compares [`softmax_lse`] with an f64 reference on rows of random width and range.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for round in 0..30 {
        let n = rng.random_range(1..300);
        let range = [1.0f32, 30.0, 1000.0][round % 3];
        let s: Vec<f32> = (0..n).map(|_| rng.random_range(-range..range)).collect();
        let m = s
            .iter()
            .map(|&x| f64::from(x))
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = s.iter().map(|&x| (f64::from(x) - m).exp()).sum();
        let want_p: Vec<f64> = s.iter().map(|&x| (f64::from(x) - m).exp() / sum).collect();
        let want_lse = m + sum.ln();
        let (p, lse) = softmax_lse(&s);
        let what = format!("{n} scores in ±{range}");
        all_close(
            &format!("{what}: probabilities"),
            &f64s(&p),
            &want_p,
            1e-4,
            1e-6,
        )?;
        close(&format!("{what}: lse"), f64::from(lse), want_lse, 1e-5)?;
        let back: Vec<f64> = s
            .iter()
            .map(|&x| (f64::from(x) - f64::from(lse)).exp())
            .collect();
        all_close(&format!("{what}: exp(s - lse)"), &back, &want_p, 1e-3, 1e-6)?;
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
