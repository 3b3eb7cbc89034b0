//! # Which elements does rank `r` own?
//!
//! ZeRO pads each flat bucket of `len` elements to a multiple of the world size `n`, so
//! that every rank's chunk has the same size (an all-gather and a reduce-scatter then
//! exchange equal chunks). Rank `r` owns chunk `r` of the padded buffer, minus the padding:
//! which real elements are they? The last ranks may own fewer than the others, or none.
//!
//! About 3 lines. Checked against `brrr_dp::shard_range`.
//!
//! ## Hint
//!
//! What is the chunk size after padding? Try `len = 10, n = 4`: ranks 0 to 3 own
//! `0..3, 3..6, 6..9, 9..10`. And with `len = 5, n = 4`?

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;
#[cfg(not(feature = "solutions"))]
use std::ops::Range;

/// YOUR CODE: the real elements of rank `rank`'s chunk.
#[cfg(not(feature = "solutions"))]
pub fn shard(len: usize, world: usize, rank: usize) -> Range<usize> {
    rank * len / world..(rank + 1) * len / world
}

#[cfg(feature = "solutions")]
pub use solution::shard;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/data_parallel/shard_range.rs"]
pub mod solution;

/// Against brrr-dp on random lengths and world sizes.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..300 {
        let world = rng.random_range(1..=16usize);
        let len = rng.random_range(0..300usize);
        for r in 0..world {
            let (want, got) = (brrr_dp::shard_range(len, world, r), shard(len, world, r));
            if got != want {
                return Err(format!(
                    "len {len}, {world} ranks: rank {r} owns {want:?}, got {got:?}"
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
