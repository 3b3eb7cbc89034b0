//! # Which gradients travel together?
//!
//! DDP all-reduces gradients in buckets, in *reverse* parameter order (the order the
//! backward finishes them). Walk the parameters from the last to the first, adding each
//! one's bytes (`numel × elem_bytes`) to the open bucket; close the bucket as soon as it
//! holds at least its limit — `first_bucket_bytes` for the very first bucket,
//! `bucket_bytes` for every later one — and close whatever is open after parameter 0.
//! Return each bucket as the range of parameter indices it holds, first bucket first.
//!
//! Checked against `brrr_dp::assign_buckets`.
//!
//! About 16 lines.
//!
//! ## Hint
//!
//! Walk `(0..n).rev()` accumulating bytes; when the open bucket reaches its limit,
//! close it as the range from its lowest index to its highest and switch the limit to
//! `bucket_bytes`. Ranges are ascending even though you walk backwards.

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;
use std::ops::Range;

/// YOUR CODE: the parameter index range of each bucket, in the order they are filled.
#[cfg(not(feature = "solutions"))]
pub fn assign(
    numels: &[usize],
    elem_bytes: usize,
    bucket_bytes: usize,
    first_bucket_bytes: usize,
) -> Vec<Range<usize>> {
    let _ = (elem_bytes, bucket_bytes, first_bucket_bytes);
    // One bucket per parameter, in forward order: a start, but not DDP's assignment.
    (0..numels.len()).map(|i| i..i + 1).collect()
}

#[cfg(feature = "solutions")]
pub use solution::assign;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/data_parallel/bucket_assignment.rs"]
pub mod solution;

/// Against brrr-dp on random models and bucket sizes.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..200 {
        let n = rng.random_range(1..20usize);
        let numels: Vec<usize> = (0..n).map(|_| rng.random_range(1..500)).collect();
        let first = rng.random_range(1..2000usize);
        let cap = rng.random_range(1..4000usize);
        let want: Vec<Range<usize>> = brrr_dp::assign_buckets(&numels, 4, cap, first)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|b| b.params)
            .collect();
        let got = assign(&numels, 4, cap, first);
        if got != want {
            return Err(format!(
                "numels {numels:?}, buckets of {cap} B, first {first} B: expected {want:?}, \
                 got {got:?}"
            ));
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
