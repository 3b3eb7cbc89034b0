//! # Where is rank `r` in the `dp × tp × pp` grid?
//!
//! Megatron-LM numbers the ranks tensor-parallel fastest, then data-parallel, then
//! pipeline-parallel, so that the `tp` ranks that all-reduce in every layer are
//! neighbours (on one node, on NVLink). Return rank `rank`'s coordinates
//! `(dp, tp, pp)`, and the world ranks of its tensor-parallel group in order.
//!
//! Checked against `brrr_collectives::ParallelLayout`.

use crate::check::{Outcome, rng, with_seed};
use brrr_collectives::ParallelLayout;
use rand::Rng;

/// YOUR CODE: `(dp, tp, pp)` coordinates of `rank` in a grid of degrees `(dp, tp, pp)`.
#[cfg(not(feature = "solutions"))]
pub fn coords(rank: usize, degrees: (usize, usize, usize)) -> (usize, usize, usize) {
    // Data-parallel fastest: the tensor-parallel ranks end up far apart.
    let (dp, tp, _) = degrees;
    (rank % dp, (rank / dp) % tp, rank / (dp * tp))
}

/// YOUR CODE: the world ranks of `rank`'s tensor-parallel group, in tp order.
#[cfg(not(feature = "solutions"))]
pub fn tp_group(rank: usize, degrees: (usize, usize, usize)) -> Vec<usize> {
    let (dp, tp, _) = degrees;
    (0..tp).map(|t| rank % dp + t * dp).collect()
}

#[cfg(feature = "solutions")]
pub use solution::{coords, tp_group};

/// The reference solution.
pub mod solution {
    /// `rank = (pp·DP + dp)·TP + tp`.
    pub fn coords(rank: usize, degrees: (usize, usize, usize)) -> (usize, usize, usize) {
        let (dp, tp, _) = degrees;
        ((rank / tp) % dp, rank % tp, rank / (tp * dp))
    }

    /// The `tp` consecutive ranks starting at the group's first.
    pub fn tp_group(rank: usize, degrees: (usize, usize, usize)) -> Vec<usize> {
        let tp = degrees.1;
        let first = rank - rank % tp;
        (first..first + tp).collect()
    }
}

/// Against `ParallelLayout` on random grids.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..50 {
        let (dp, tp, pp) = (
            rng.random_range(1..5usize),
            rng.random_range(2..5usize),
            rng.random_range(1..4usize),
        );
        let layout = ParallelLayout { dp, tp, pp };
        for rank in 0..dp * tp * pp {
            let want = layout.coords(rank);
            let got = coords(rank, (dp, tp, pp));
            if got != want {
                return Err(format!(
                    "dp {dp} × tp {tp} × pp {pp}: rank {rank} is at {want:?}, got {got:?}"
                ));
            }
            let (d, _, p) = want;
            let group: Vec<usize> = (0..tp).map(|t| layout.rank(d, t, p)).collect();
            let got = tp_group(rank, (dp, tp, pp));
            if got != group {
                return Err(format!(
                    "dp {dp} × tp {tp} × pp {pp}: rank {rank}'s tensor-parallel group is \
                     {group:?}, got {got:?}"
                ));
            }
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
