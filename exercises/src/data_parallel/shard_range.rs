//! # Which elements does rank `r` own?
//!
//! ZeRO pads each flat bucket of `len` elements to a multiple of the world size `n`, so
//! that every rank's chunk has the same size `c = ceil(len / n)` (an all-gather and a
//! reduce-scatter then exchange equal chunks). Rank `r` owns `[r·c, (r+1)·c)`, cut at
//! `len`: the real elements of its chunk (the last ranks may own fewer, or none).
//!
//! Checked against `brrr_dp::shard_range`.

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

/// The reference solution.
pub mod solution {
    use std::ops::Range;

    /// Equal padded chunks of `ceil(len / world)`, clipped to the buffer.
    pub fn shard(len: usize, world: usize, rank: usize) -> Range<usize> {
        let c = len.div_ceil(world);
        (rank * c).min(len)..((rank + 1) * c).min(len)
    }
}

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
