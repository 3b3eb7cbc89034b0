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
