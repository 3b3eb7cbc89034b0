//! # Where is rank `r` in the `dp × tp × pp` grid?
//!
//! Megatron-LM numbers the ranks tensor-parallel fastest, then data-parallel, then
//! pipeline-parallel, so that the `tp` ranks that all-reduce in every layer are neighbours
//! (on one node, on NVLink). With `dp = 2, tp = 4, pp = 2`, ranks 0-3 are the four
//! tensor-parallel ranks of data-parallel replica 0 in pipeline stage 0. Where is rank 13,
//! and who are the ranks it all-reduces with in every layer?
//!
//! Return rank `rank`'s coordinates `(dp, tp, pp)`, and the world ranks of its
//! tensor-parallel group in tp order. About 8 lines. Checked against
//! `brrr_collectives::ParallelLayout`.
//!
//! ## Hint
//!
//! The rank is a number written in mixed radix, its fastest digit of base `tp`, its next of
//! base `dp`. Rank 13 is at `(1, 1, 1)`.

use crate::check::{Outcome, every, rng, with_seed};
use brrr_collectives::ParallelLayout;
use rand::Rng;

/// YOUR CODE: `(dp, tp, pp)` coordinates of `rank` in a grid of degrees `(dp, tp, pp)`.
#[cfg(not(feature = "solutions"))]
pub fn coords(rank: usize, degrees: (usize, usize, usize)) -> (usize, usize, usize) {
    let _ = (rank, degrees);
    (0, 0, 0)
}

/// YOUR CODE: the world ranks of `rank`'s tensor-parallel group, in tp order.
#[cfg(not(feature = "solutions"))]
pub fn tp_group(rank: usize, degrees: (usize, usize, usize)) -> Vec<usize> {
    let _ = degrees;
    vec![rank]
}

#[cfg(feature = "solutions")]
pub use solution::{coords, tp_group};

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/tensor_parallel/rank_grid.rs"]
pub mod solution;

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
            let place = if got == want {
                Ok(())
            } else {
                Err(format!(
                    "dp {dp} × tp {tp} × pp {pp}: rank {rank} is at {want:?}, got {got:?}"
                ))
            };
            let (d, _, p) = want;
            let group: Vec<usize> = (0..tp).map(|t| layout.rank(d, t, p)).collect();
            let got = tp_group(rank, (dp, tp, pp));
            let members = if got == group {
                Ok(())
            } else {
                Err(format!(
                    "dp {dp} × tp {tp} × pp {pp}: rank {rank}'s tensor-parallel group is \
                     {group:?}, got {got:?}"
                ))
            };
            every([place, members])?;
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
