//! # Bus bandwidth
//!
//! nccl-tests reports two bandwidths for a collective that took `seconds` on `n` ranks for
//! a buffer of `bytes`. The *algorithm* bandwidth `bytes / seconds` changes with `n` even
//! when the links do not: an all-reduce on 8 ranks makes every rank send more than on 2.
//! The *bus* bandwidth corrects for that so it can be compared with the link speed at any
//! `n`: it is the rate at which each rank's link carried data, with a bandwidth-optimal
//! algorithm.
//!
//! By what factor does each `Collective` (all-reduce, reduce-scatter, all-gather,
//! all-to-all, broadcast) turn algorithm bandwidth into bus bandwidth? About 10 lines.
//! Checked against `brrr_perf::comms::bus_bandwidth`.
//!
//! ## Hint
//!
//! Count the bytes one rank sends per byte of buffer. In a ring reduce-scatter each rank
//! sends all chunks but one; an all-reduce is a reduce-scatter followed by an all-gather.
//! A broadcast pipelined along a chain forwards the whole buffer once per link.

use crate::check::{Outcome, close, hint_if, rel_diff, rng, with_seed};
use brrr_perf::comms::{Collective, bus_bandwidth as reference};
use rand::Rng;

/// YOUR CODE: bus bandwidth in bytes/s.
#[cfg(not(feature = "solutions"))]
pub fn bus_bandwidth(collective: Collective, n: u64, bytes: f64, seconds: f64) -> f64 {
    let _ = (collective, n);
    bytes / seconds
}

#[cfg(feature = "solutions")]
pub use solution::bus_bandwidth;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/collectives/bus_bandwidth.rs"]
pub mod solution;

/// Against brrr-perf on random measurements of every collective.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for c in Collective::ALL {
        for _ in 0..10 {
            let n = rng.random_range(2..1024u64);
            let bytes = 10f64.powf(rng.random_range(3.0..10.0));
            let secs = 10f64.powf(rng.random_range(-6.0..0.0));
            let want = reference(c, n, bytes, secs).map_err(|e| e.to_string())?;
            let got = bus_bandwidth(c, n, bytes, secs);
            hint_if(
                close(&format!("{} on {n} ranks", c.name()), got, want, 1e-12),
                rel_diff(got, bytes / secs, 1e-300) < 1e-9,
                "that is the algorithm bandwidth: how many bytes does a rank send per byte \
                 of buffer?",
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
