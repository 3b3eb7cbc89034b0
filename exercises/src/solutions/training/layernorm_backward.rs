use super::LayerNormGrads;

/// Per row: `dx = rstd · (g − mean(g) − x̂ · mean(g·x̂))` with `g = dy·γ`.
pub fn layernorm_backward(
    x: &[f64],
    gamma: &[f64],
    dy: &[f64],
    cols: usize,
    eps: f64,
) -> LayerNormGrads {
    let mut out = LayerNormGrads {
        dx: vec![0.0; x.len()],
        dgamma: vec![0.0; cols],
        dbeta: vec![0.0; cols],
    };
    let c = cols as f64;
    for (r, (xr, dyr)) in x.chunks(cols).zip(dy.chunks(cols)).enumerate() {
        let mean = xr.iter().sum::<f64>() / c;
        let var = xr.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / c;
        let rstd = 1.0 / (var + eps).sqrt();
        let xhat: Vec<f64> = xr.iter().map(|v| (v - mean) * rstd).collect();
        let g: Vec<f64> = dyr.iter().zip(gamma).map(|(d, w)| d * w).collect();
        let g_mean = g.iter().sum::<f64>() / c;
        let gx_mean = g.iter().zip(&xhat).map(|(g, h)| g * h).sum::<f64>() / c;
        for j in 0..cols {
            out.dx[r * cols + j] = rstd * (g[j] - g_mean - xhat[j] * gx_mean);
            out.dgamma[j] += dyr[j] * xhat[j];
            out.dbeta[j] += dyr[j];
        }
    }
    out
}
