//! # The roofline's prediction
//!
//! An op does `flops` FLOPs and moves `bytes` bytes on a chip whose compute ceiling is
//! `peak_flops` FLOP/s and whose memory ceiling is `bandwidth` bytes/s. If the chip ran each
//! at its ceiling and overlapped the two perfectly, how long would the op take at the
//! least? Which ceiling sets that time?
//!
//! Return the time and `Regime::Compute` or `Regime::Memory` (compute when the two tie).
//! About 8 lines. Checked against `brrr_perf::roofline::Roofline::predict` on random ops and
//! GPUs of brrr-perf's spec table.
//!
//! ## Hint
//!
//! Work out how long each ceiling alone would need. With perfect overlap, does the op wait
//! for the sum of the two times, or for one of them?

use crate::check::{Outcome, close, every, hint_if, rel_diff, rng, with_seed};
use brrr_perf::roofline::Roofline;
use brrr_perf::specs::gpus;
use brrr_perf::{DType, Unit};
use rand::Rng;

/// YOUR CODE: `(seconds, regime)` of an op under a roofline.
#[cfg(not(feature = "solutions"))]
pub fn roofline_time(
    flops: f64,
    bytes: f64,
    peak_flops: f64,
    bandwidth: f64,
) -> (f64, brrr_perf::roofline::Regime) {
    let _ = (flops, bytes, peak_flops, bandwidth);
    (0.0, brrr_perf::roofline::Regime::Overhead)
}

#[cfg(feature = "solutions")]
pub use solution::roofline_time;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/regimes/roofline_time.rs"]
pub mod solution;

/// Compares [`roofline_time`] with brrr-perf on random ops and GPUs.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let table = gpus();
    for _ in 0..50 {
        let gpu = &table[rng.random_range(0..table.len())];
        let roof = Roofline::for_gpu(gpu, DType::F32, Unit::Vector).map_err(|e| e.to_string())?;
        // Intensities from 0.01 to 10^4 FLOP/byte: both sides of every ridge point.
        let bytes = 10f64.powf(rng.random_range(3.0..10.0));
        let flops = bytes * 10f64.powf(rng.random_range(-2.0..4.0));
        let op = brrr_perf::roofline::OpCost::new("op", flops, bytes, false)
            .map_err(|e| e.to_string())?;
        let want = roof.predict(&op);
        let (t, regime) = roofline_time(flops, bytes, roof.peak_flops, roof.bandwidth);
        let what = format!("{flops:.3e} FLOP, {bytes:.3e} B on {}", roof.label);
        let regime_ok = if regime == want.regime {
            Ok(())
        } else {
            Err(format!(
                "{what}: regime {regime:?}, expected {:?}",
                want.regime
            ))
        };
        every([
            hint_if(
                close(&format!("{what}: time"), t, want.time_s, 1e-12),
                rel_diff(t, want.compute_s + want.memory_s, 1e-300) < 1e-9,
                "that is the sum of the two times; overlapped, the op waits only for the slower",
            ),
            regime_ok,
        ])?;
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
