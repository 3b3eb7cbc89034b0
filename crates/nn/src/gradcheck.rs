//! Finite-difference gradient checks.
//!
//! Central differences, `(f(x + h) − f(x − h)) / 2h`, have error `O(h²)`; in f64 with
//! `h ≈ 1e-5` they agree with a correct analytic gradient to about 1e-8 relative, so
//! a wrong backward stands out by orders of magnitude.

/// Numerical gradient of `f` at `x` by central differences, for the coordinates in
/// `indices` (checking every coordinate of a big tensor is slow and unnecessary).
pub fn numeric_grad(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x: &[f64],
    indices: &[usize],
    h: f64,
) -> Vec<f64> {
    let mut x = x.to_vec();
    indices
        .iter()
        .map(|&i| {
            let orig = x[i];
            x[i] = orig + h;
            let plus = f(&x);
            x[i] = orig - h;
            let minus = f(&x);
            x[i] = orig;
            (plus - minus) / (2.0 * h)
        })
        .collect()
}

/// Largest `|a − n| / max(|a|, |n|, floor)` over the pairs: a relative error that does
/// not blow up where both are near zero.
///
/// The floor is `max(min_floor, 1e-3 · max_i |a_i|)`: an entry a thousand times
/// smaller than the largest one is judged on the tensor's scale, because the finite
/// difference's rounding noise (about `ε·|f| / h`) is absolute, not relative.
pub fn max_rel_error(analytic: &[f64], numeric: &[f64], min_floor: f64) -> f64 {
    let scale = analytic
        .iter()
        .chain(numeric)
        .map(|x| x.abs())
        .fold(0.0, f64::max);
    let floor = min_floor.max(1e-3 * scale);
    analytic
        .iter()
        .zip(numeric)
        .map(|(a, n)| {
            let d = (a - n).abs() / a.abs().max(n.abs()).max(floor);
            if d.is_nan() { f64::INFINITY } else { d }
        })
        .fold(0.0, f64::max)
}

/// A spread of indices to probe in a tensor of `n` elements: the ends and `count`
/// pseudo-random ones (deterministic for a given `n`).
pub fn probe_indices(n: usize, count: usize) -> Vec<usize> {
    if n <= count + 2 {
        return (0..n).collect();
    }
    let mut v = vec![0, n - 1];
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15 ^ n as u64;
    for _ in 0..count {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.push((s % n as u64) as usize);
    }
    v.sort_unstable();
    v.dedup();
    v
}
