/// The bubble is `(p − 1)/(v·m)` of the busy time, so its share of the step is
/// `(p − 1)/(v·m + p − 1)`: at most `share` from `v·m ≥ (p − 1)(1 − share)/share` on,
/// then rounded up to a multiple of `p` where the schedule interleaves.
pub fn micro_batches(p: u64, v: u64, share: f64) -> u64 {
    let need = (p as f64 - 1.0) * (1.0 - share) / (share * v as f64);
    let m = (need.ceil() as u64).max(1);
    match v > 1 {
        true => m.div_ceil(p) * p,
        false => m,
    }
}
