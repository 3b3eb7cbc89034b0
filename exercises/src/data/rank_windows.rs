//! # Which windows does each rank read?
//!
//! An epoch visits `total` windows in a shuffled order; position `g` of that order is one
//! window. Data-parallel ranks deal the positions like cards, a batch at a time: the first
//! `batch` positions to rank 0, the next `batch` to rank 1, and so on to rank `world − 1`,
//! then round again. An epoch has as many batches per rank as every rank can fill
//! completely; the positions left over are dropped.
//!
//! Which positions does rank `rank` read, batch by batch? Return one `Vec` per batch. About
//! 10 lines. Checked against `brrr_data::ShardLoader`'s own arithmetic, and for the property
//! that matters: ranks never share a position, and together they cover every position but
//! the dropped tail.
//!
//! ## Hint
//!
//! One round deals `world · batch` positions. How many whole rounds fit in `total`? Where
//! in round `k` does rank `r`'s slice start?

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;

/// YOUR CODE: the epoch positions of each batch of rank `rank` of `world`.
#[cfg(not(feature = "solutions"))]
pub fn rank_batches(total: u64, batch: usize, rank: usize, world: usize) -> Vec<Vec<u64>> {
    let _ = (total, batch, rank, world);
    Vec::new()
}

#[cfg(feature = "solutions")]
pub use solution::rank_batches;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/data/rank_windows.rs"]
pub mod solution;

/// Random epochs and layouts.
pub fn check() -> Outcome {
    let (mut g, seed) = rng();
    with_seed(run(&mut g), seed)
}

fn run(g: &mut impl Rng) -> Outcome {
    use brrr_data::loader::epoch_slot;
    for _ in 0..300 {
        let (world, batch) = (g.random_range(1..9usize), g.random_range(1..9usize));
        let total = g.random_range(0..400u64);
        let rounds = total / (world * batch) as u64;
        let mut seen = std::collections::BTreeSet::new();
        for rank in 0..world {
            let got = rank_batches(total, batch, rank, world);
            if got.len() as u64 != rounds {
                return Err(format!(
                    "{total} windows, {world} ranks × batch {batch}: rank {rank} got {} batches, \
                     expected {rounds}",
                    got.len()
                ));
            }
            for (k, b) in got.iter().enumerate() {
                let want: Vec<u64> = (0..batch)
                    .map(|i| epoch_slot(k as u64, i, rank, world, batch))
                    .collect();
                if *b != want {
                    return Err(format!(
                        "rank {rank} of {world}, batch {k} of size {batch}: got {b:?}, expected {want:?}"
                    ));
                }
                for &p in b {
                    if !seen.insert(p) {
                        return Err(format!("position {p} is read by two ranks"));
                    }
                }
            }
        }
        if seen.len() as u64 != rounds * (world * batch) as u64 {
            return Err("the ranks together do not cover the epoch".into());
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
