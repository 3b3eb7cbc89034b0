//! # Which regime was it?
//!
//! The prediction says what an op could do; a *measured* time says what it did. An op whose
//! FLOPs and minimum bytes you know took `measured_s` seconds. Which ceiling was it pressing
//! against, if any?
//!
//! Measure how close it came to each ceiling, as a fraction of that ceiling. If it reached
//! neither by at least `brrr_perf::roofline::OVERHEAD_THRESHOLD` (one half), most of its
//! time went to neither FLOPs nor bytes (launches, synchronisation, the host):
//! `Regime::Overhead`. Otherwise it is in the regime of the ceiling it came closer to
//! (compute on a tie). About 10 lines. Checked against
//! `brrr_perf::roofline::Roofline::classify`.
//!
//! ## Hint
//!
//! `flops / measured_s` is the rate the op achieved: what fraction of `peak_flops` is it?
//! Do the same for the bytes and `bandwidth`.

use crate::check::{Outcome, rng, with_seed};
use brrr_perf::roofline::{OpCost, Regime, Roofline};
use rand::Rng;

/// YOUR CODE: the regime of an op that took `measured_s` seconds.
#[cfg(not(feature = "solutions"))]
pub fn classify(
    flops: f64,
    bytes: f64,
    measured_s: f64,
    peak_flops: f64,
    bandwidth: f64,
) -> brrr_perf::roofline::Regime {
    let _ = (flops, bytes, measured_s, peak_flops, bandwidth);
    brrr_perf::roofline::Regime::Compute
}

#[cfg(feature = "solutions")]
pub use solution::classify;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/regimes/classify.rs"]
pub mod solution;

/// Compares [`classify`] with brrr-perf on random measurements; every regime occurs.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let roof = Roofline::new("toy", 100e12, 2e12).map_err(|e| e.to_string())?;
    let mut seen = Vec::new();
    for i in 0..60 {
        let bytes = 10f64.powf(rng.random_range(6.0..10.0));
        let flops = bytes * 10f64.powf(rng.random_range(-1.0..3.5));
        let op = OpCost::new("op", flops, bytes, false).map_err(|e| e.to_string())?;
        // From 1.2x faster than the roofline allows (data in cache) to 20x slower.
        let slowdown = if i % 3 == 0 {
            rng.random_range(0.8..2.0)
        } else {
            rng.random_range(1.0..20.0)
        };
        let measured = roof.predict(&op).time_s * slowdown;
        let want = roof
            .classify(&op, measured)
            .map_err(|e| e.to_string())?
            .regime;
        let got = classify(flops, bytes, measured, roof.peak_flops, roof.bandwidth);
        if got != want {
            let hint = match want {
                Regime::Overhead => {
                    "\nhint: it reached less than half of both ceilings: most of its time is \
                     spent on neither"
                }
                _ if got == Regime::Overhead => {
                    "\nhint: it reached at least half of one ceiling, so it counts as bound by it"
                }
                _ => "\nhint: compare the fractions of the two ceilings, not the raw rates",
            };
            return Err(format!(
                "{flops:.3e} FLOP, {bytes:.3e} B in {measured:.3e} s on 100 TFLOP/s and \
                 2 TB/s: got {got:?}, expected {want:?}{hint}"
            ));
        }
        if !seen.contains(&want) {
            seen.push(want);
        }
    }
    if seen.len() < 3 {
        return Err(format!("the random cases covered only {seen:?}; run again"));
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
