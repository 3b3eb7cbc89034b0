/// Each stage idles `(p − 1)(f + b)` and computes `m(f + b)`: the ratio of idle to
/// total is `(p − 1)/(m + p − 1)`, whatever `f` and `b` are.
pub fn bubble_fraction(p: usize, m: usize, f: f64, b: f64) -> f64 {
    let idle = (p as f64 - 1.0) * (f + b);
    idle / (m as f64 * (f + b) + idle)
}
