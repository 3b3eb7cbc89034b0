//! # Cross-entropy over a vocabulary split across ranks
//!
//! Rank `r` holds the logits of vocabulary entries `r·V/n .. (r+1)·V/n` for every position:
//! `shards[r]` is `[N, V/n]`, row-major. Each position's loss is
//! `log Σ_v exp(l_v) − l_target`. Gathering the shards into `[N, V]` would move `N·V`
//! numbers; the ranks may instead exchange only a few numbers per position (all-reduces of
//! one value per position). Which numbers, so that every rank can compute the exact,
//! overflow-free loss? Compute the losses as the ranks would.
//!
//! About 25 lines. Checked against brrr's fused cross-entropy kernel on the joined logits.
//!
//! ## Hint
//!
//! Write the log-sum-exp with a shift by the row's maximum. The maximum over the whole
//! vocabulary is the maximum of the ranks' maxima (an all-reduce max); with it, each rank
//! sums `exp(l − max)` over its own entries, and those sums add (an all-reduce sum). The
//! target's logit lives on exactly one rank; the others contribute 0 to a third sum.

use crate::check::{Outcome, close, rng, with_seed};
use brrr_backend::DType;
use brrr_cpu::CpuBackend;
use brrr_tensor::Tensor;
use rand::Rng;

/// YOUR CODE: per-position losses from the `n` shards of `[N, V]` logits.
#[cfg(not(feature = "solutions"))]
pub fn vocab_parallel_losses(shards: &[Vec<f32>], targets: &[usize]) -> Vec<f64> {
    // Normalises over the target's own shard only: a softmax over V/n entries.
    let per = shards[0].len() / targets.len();
    targets
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let row = &shards[t / per][i * per..(i + 1) * per];
            let sum: f64 = row.iter().map(|&l| f64::from(l).exp()).sum();
            sum.ln() - f64::from(row[t % per])
        })
        .collect()
}

#[cfg(feature = "solutions")]
pub use solution::vocab_parallel_losses;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/tensor_parallel/vocab_cross_entropy.rs"]
pub mod solution;

/// Against `Tensor::cross_entropy` of the joined logits.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let be = CpuBackend::new();
    let err = |e: brrr_backend::Error| e.to_string();
    for _ in 0..10 {
        let n = [2, 4][rng.random_range(0..2)];
        let per = rng.random_range(2..10usize);
        let (v, rows) = (n * per, rng.random_range(1..8usize));
        // Large logits: a sum of plain exponentials overflows without the maximum.
        let logits: Vec<f32> = (0..rows * v)
            .map(|_| rng.random_range(-60.0..90.0))
            .collect();
        let targets: Vec<usize> = (0..rows).map(|_| rng.random_range(0..v)).collect();
        let shards: Vec<Vec<f32>> = (0..n)
            .map(|r| {
                (0..rows)
                    .flat_map(|i| logits[i * v + r * per..i * v + (r + 1) * per].to_vec())
                    .collect()
            })
            .collect();
        let got = vocab_parallel_losses(&shards, &targets);
        let t = Tensor::from_f32(&be, &logits, [rows, v], DType::F32).map_err(err)?;
        let tg: Vec<i32> = targets.iter().map(|&x| x as i32).collect();
        let tg = Tensor::from_i32(&be, &tg, [rows]).map_err(err)?;
        let want = t
            .cross_entropy(&tg)
            .and_then(|l| l.to_vec_f64())
            .map_err(err)?;
        if got.len() != rows {
            return Err(format!("{rows} positions, {} losses", got.len()));
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Small losses are compared absolutely: f32 logits leave ~1e-6 of rounding.
            if (g - w).abs() < 1e-5 {
                continue;
            }
            close(
                &format!("position {i} of {rows}, V = {v} over {n} ranks"),
                *g,
                *w,
                1e-4,
            )?;
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
