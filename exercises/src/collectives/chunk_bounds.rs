//! # Which elements are chunk `i`?
//!
//! Ring reduce-scatter cuts a buffer of `len` elements into `n` chunks, one per rank.
//! `len` need not divide by `n`: give the first `len % n` chunks one extra element, so
//! that chunks differ by at most one and cover the buffer exactly, in order.
//!
//! Checked against `brrr_collectives::chunk_range`.
//!
//! About 3 lines.
//!
//! ## Hint
//!
//! Every chunk has `len / n` elements, and the first `len % n` have one more. Where
//! chunk `i` starts is the sum of the sizes of the chunks before it: write it without a
//! loop.

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;
#[cfg(not(feature = "solutions"))]
use std::ops::Range;

/// YOUR CODE: the elements of chunk `i` of `n`.
#[cfg(not(feature = "solutions"))]
pub fn chunk_bounds(len: usize, n: usize, i: usize) -> Range<usize> {
    let size = len / n;
    i * size..(i + 1) * size
}

#[cfg(feature = "solutions")]
pub use solution::chunk_bounds;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/collectives/chunk_bounds.rs"]
pub mod solution;

/// Against brrr-collectives on random lengths and world sizes.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..200 {
        let n = rng.random_range(1..=16usize);
        let len = rng.random_range(0..200usize);
        for i in 0..n {
            let want = brrr_collectives::chunk_range(len, n, i);
            let got = chunk_bounds(len, n, i);
            if got != want {
                return Err(format!(
                    "len {len}, {n} chunks: chunk {i} should be {want:?}, got {got:?}"
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
