//! # Bus bandwidth
//!
//! nccl-tests reports two bandwidths for a collective on `n` ranks that took `seconds`
//! for a buffer of `bytes`: the algorithm bandwidth `bytes / seconds`, and the bus
//! bandwidth, which multiplies it by what each rank must send per byte of buffer with a
//! bandwidth-optimal algorithm: `2(n−1)/n` for all-reduce, `(n−1)/n` for reduce-scatter,
//! all-gather and all-to-all, 1 for broadcast. Bus bandwidth can be compared to the link
//! speed whatever `n` is.
//!
//! Checked against `brrr_perf::comms::bus_bandwidth`.

use crate::check::{Outcome, close, rng, with_seed};
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

/// The reference solution.
pub mod solution {
    use brrr_perf::comms::Collective;

    /// Algorithm bandwidth times the collective's factor.
    pub fn bus_bandwidth(collective: Collective, n: u64, bytes: f64, seconds: f64) -> f64 {
        let n = n as f64;
        let factor = match collective {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::ReduceScatter | Collective::AllGather | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::Broadcast => 1.0,
        };
        bytes / seconds * factor
    }
}

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
            close(&format!("{} on {n} ranks", c.name()), got, want, 1e-12)?;
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
