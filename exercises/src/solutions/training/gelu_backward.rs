/// `gelu' = 0.5(1 + tanh u) + 0.5·x·(1 − tanh² u)·u'`, `u' = √(2/π)(1 + 3·0.044715·x²)`.
pub fn gelu_backward(x: &[f64], dy: &[f64]) -> Vec<f64> {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    x.iter()
        .zip(dy)
        .map(|(&x, &g)| {
            let t = (k * (x + 0.044715 * x * x * x)).tanh();
            let du = k * (1.0 + 3.0 * 0.044715 * x * x);
            g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
        })
        .collect()
}
