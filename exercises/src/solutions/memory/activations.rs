use brrr_perf::memory::Recompute;

/// `sbh·(34 + 5as/h)`, `34·sbh` or `2·sbh`.
pub fn layer_activation_bytes(s: u64, b: u64, h: u64, a: u64, recompute: Recompute) -> f64 {
    let (s, b, h, a) = (s as f64, b as f64, h as f64, a as f64);
    let sbh = s * b * h;
    match recompute {
        Recompute::None => sbh * 34.0 + 5.0 * a * s * s * b,
        Recompute::Selective => sbh * 34.0,
        Recompute::Full => 2.0 * sbh,
    }
}
