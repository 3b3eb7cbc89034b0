use brrr_perf::roofline::{OVERHEAD_THRESHOLD, Regime};

/// Fractions of both ceilings; overhead below the threshold.
pub fn classify(
    flops: f64,
    bytes: f64,
    measured_s: f64,
    peak_flops: f64,
    bandwidth: f64,
) -> Regime {
    let compute = flops / measured_s / peak_flops;
    let memory = bytes / measured_s / bandwidth;
    if compute.max(memory) < OVERHEAD_THRESHOLD {
        Regime::Overhead
    } else if compute >= memory {
        Regime::Compute
    } else {
        Regime::Memory
    }
}
