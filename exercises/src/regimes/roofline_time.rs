//! # The roofline's prediction
//!
//! An op doing `flops` FLOPs and moving `bytes` bytes on a chip with compute ceiling
//! `peak_flops` (FLOP/s) and memory ceiling `bandwidth` (bytes/s) takes at least the
//! larger of its compute time and its memory time. Return that time, and which ceiling
//! sets it: `Regime::Compute` when the compute time is at least the memory time,
//! `Regime::Memory` otherwise.
//!
//! Checked against `brrr_perf::roofline::Roofline::predict` on random ops and GPUs of
//! brrr-perf's spec table.

use crate::check::{Outcome, close, rng, with_seed};
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

/// The reference solution.
pub mod solution {
    use brrr_perf::roofline::Regime;

    /// `max(flops / peak, bytes / bandwidth)` and the ceiling that sets it.
    pub fn roofline_time(flops: f64, bytes: f64, peak_flops: f64, bandwidth: f64) -> (f64, Regime) {
        let compute = flops / peak_flops;
        let memory = bytes / bandwidth;
        if compute >= memory {
            (compute, Regime::Compute)
        } else {
            (memory, Regime::Memory)
        }
    }
}

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
        close(&format!("{what}: time"), t, want.time_s, 1e-12)?;
        if regime != want.regime {
            return Err(format!(
                "{what}: regime {regime:?}, expected {:?}",
                want.regime
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
