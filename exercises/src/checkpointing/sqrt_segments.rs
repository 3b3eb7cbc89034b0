//! # The √n segmentation
//!
//! Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost", §4.1) cut a chain
//! of `n` segments into groups of `k` and keep only each group's input during the
//! forward: `n/k` kept inputs plus, during the backward, one group's `k` stashes. The
//! sum `n/k + k` is smallest at `k = √n`.
//!
//! Return the first segment of every group for `n` segments with `k = round(√n)` (at
//! least 1): `0, k, 2k, …` below `n`. With `n = 17`, `k = 4`: `[0, 4, 8, 12, 16]`.
//!
//! Checked against `brrr_checkpoint::group_starts(n, brrr_checkpoint::sqrt_group(n))`.

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;

/// YOUR CODE: the first segment of each of Chen's √n groups.
#[cfg(not(feature = "solutions"))]
pub fn sqrt_group_starts(n: usize) -> Vec<usize> {
    vec![0; n.min(1)]
}

#[cfg(feature = "solutions")]
pub use solution::sqrt_group_starts;

/// The reference solution.
pub mod solution {
    /// `k = round(√n)`, then every `k`-th index.
    pub fn sqrt_group_starts(n: usize) -> Vec<usize> {
        let k = ((n as f64).sqrt().round() as usize).max(1);
        (0..n).step_by(k).collect()
    }
}

/// Against brrr-checkpoint on random chain lengths.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for n in (1..=30).chain((0..20).map(|_| rng.random_range(31..2000usize))) {
        let want = brrr_checkpoint::group_starts(n, brrr_checkpoint::sqrt_group(n));
        let got = sqrt_group_starts(n);
        if got != want {
            return Err(format!("n = {n}: got {got:?}, want {want:?}"));
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
