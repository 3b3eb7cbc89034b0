//! # The √n segmentation
//!
//! Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost", §4.1) cut a chain of
//! `n` segments into groups of `k` and keep only each group's input during the forward;
//! the backward recomputes one group at a time, holding its `k` stashes. Which `k` makes
//! the memory smallest, and where do the groups start?
//!
//! Return the first segment of every group, for the best whole `k` (round the real
//! optimum to the nearest integer, at least 1). With `n = 17` that is
//! `[0, 4, 8, 12, 16]`. About 3 lines. Checked against
//! `brrr_checkpoint::group_starts(n, brrr_checkpoint::sqrt_group(n))`.
//!
//! ## Hint
//!
//! Count what is held at the peak as a function of `k`: the kept group inputs plus one
//! group's stashes. Minimise that sum over `k`.

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;

/// YOUR CODE: the first segment of each of Chen's √n groups.
#[cfg(not(feature = "solutions"))]
pub fn sqrt_group_starts(n: usize) -> Vec<usize> {
    vec![0; n.min(1)]
}

#[cfg(feature = "solutions")]
pub use solution::sqrt_group_starts;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/checkpointing/sqrt_segments.rs"]
pub mod solution;

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
