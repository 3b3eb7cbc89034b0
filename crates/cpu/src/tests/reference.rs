//! Naive f64 references: direct loops over the definitions in the trait's doc comments,
//! written for obviousness, not speed. Each returns the expected output and, where the
//! tolerance needs it, the magnitude of the terms that were summed.

use brrr_backend::{AdamWParams, GemmSpec};

/// `C[b] = alpha·op(A[b])·op(B[b]) + beta·C[b]`, batches in order. Returns the new C
/// and, per element, `Σ |alpha·a·b| + |beta·c|` (the scale of the rounding error).
pub fn gemm(s: &GemmSpec, a: &[f64], b: &[f64], c: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut out = c.to_vec();
    let mut mag = vec![0.0; c.len()];
    let (alpha, beta) = (f64::from(s.alpha), f64::from(s.beta));
    for bt in 0..s.batch {
        let (oa, ob, oc) = (
            s.offset_a + bt * s.stride_a,
            s.offset_b + bt * s.stride_b,
            s.offset_c + bt * s.stride_c,
        );
        for i in 0..s.m {
            for j in 0..s.n {
                let (mut acc, mut absacc) = (0.0, 0.0);
                for p in 0..s.k {
                    let av = if s.trans_a {
                        a[oa + p * s.m + i]
                    } else {
                        a[oa + i * s.k + p]
                    };
                    let bv = if s.trans_b {
                        b[ob + j * s.k + p]
                    } else {
                        b[ob + p * s.n + j]
                    };
                    acc += av * bv;
                    absacc += (av * bv).abs();
                }
                let ci = oc + i * s.n + j;
                let old = if s.beta == 0.0 { 0.0 } else { beta * out[ci] };
                out[ci] = alpha * acc + old;
                mag[ci] = (alpha * absacc).abs() + old.abs();
            }
        }
    }
    (out, mag)
}

/// Row-wise softmax of `scale·x`, with row `r` seeing columns `j <= r % cols` if causal.
pub fn softmax(x: &[f64], rows: usize, cols: usize, scale: f64, causal: bool) -> Vec<f64> {
    let mut y = vec![0.0; rows * cols];
    for r in 0..rows {
        let vis = if causal { r % cols + 1 } else { cols };
        let row = &x[r * cols..r * cols + vis];
        let m = row
            .iter()
            .map(|v| scale * v)
            .fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = row.iter().map(|v| (scale * v - m).exp()).sum();
        for j in 0..vis {
            y[r * cols + j] = (scale * row[j] - m).exp() / z;
        }
    }
    y
}

/// `dx = scale·y ⊙ (dy − Σ_j dy_j y_j)` per row.
pub fn softmax_backward(y: &[f64], dy: &[f64], rows: usize, cols: usize, scale: f64) -> Vec<f64> {
    let mut dx = vec![0.0; rows * cols];
    for r in 0..rows {
        let d: f64 = (0..cols).map(|j| y[r * cols + j] * dy[r * cols + j]).sum();
        for j in 0..cols {
            let i = r * cols + j;
            dx[i] = scale * y[i] * (dy[i] - d);
        }
    }
    dx
}

/// LayerNorm forward: `(y, mean, rstd)`, population variance.
pub fn layernorm(
    x: &[f64],
    g: &[f64],
    b: &[f64],
    rows: usize,
    cols: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut mean, mut rstd) = (vec![0.0; rows * cols], vec![0.0; rows], vec![0.0; rows]);
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / cols as f64;
        let s = 1.0 / (var + eps).sqrt();
        for j in 0..cols {
            y[r * cols + j] = (row[j] - m) * s * g[j] + b[j];
        }
        mean[r] = m;
        rstd[r] = s;
    }
    (y, mean, rstd)
}

/// LayerNorm backward by the chain rule written out term by term:
/// `dx_j = Σ_k dy_k g_k ∂n_k/∂x_j` with `∂n_k/∂x_j = s(δ_kj − 1/N − n_k n_j / N)`.
/// Returns `(dx, dgamma, dbeta)` (the increments, not accumulated).
pub fn layernorm_backward(
    dy: &[f64],
    x: &[f64],
    g: &[f64],
    rows: usize,
    cols: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (_, mean, rstd) = layernorm(x, g, &vec![0.0; cols], rows, cols, eps);
    let (mut dx, mut dg, mut db) = (vec![0.0; rows * cols], vec![0.0; cols], vec![0.0; cols]);
    let n = cols as f64;
    for r in 0..rows {
        let norm: Vec<f64> = (0..cols)
            .map(|j| (x[r * cols + j] - mean[r]) * rstd[r])
            .collect();
        for j in 0..cols {
            let mut acc = 0.0;
            for k in 0..cols {
                let delta = if j == k { 1.0 } else { 0.0 };
                acc +=
                    dy[r * cols + k] * g[k] * rstd[r] * (delta - 1.0 / n - norm[k] * norm[j] / n);
            }
            dx[r * cols + j] = acc;
            dg[j] += dy[r * cols + j] * norm[j];
            db[j] += dy[r * cols + j];
        }
    }
    (dx, dg, db)
}

/// GELU, tanh approximation, exactly as the trait writes it.
pub fn gelu(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

/// d/dx of [`gelu`], differentiated by hand from the same formula.
pub fn gelu_grad(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    let u = k * (x + 0.044715 * x * x * x);
    let t = u.tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x)
}

/// Per-row `logsumexp(z) − z_t`, 0 for a negative target.
pub fn cross_entropy(z: &[f64], t: &[i32], vocab: usize) -> Vec<f64> {
    t.iter()
        .enumerate()
        .map(|(r, &tgt)| {
            if tgt < 0 {
                return 0.0;
            }
            let row = &z[r * vocab..(r + 1) * vocab];
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            lse - row[tgt as usize]
        })
        .collect()
}

/// `(softmax(z_r) − onehot(t_r)) · dl_r`, 0 rows for negative targets.
pub fn cross_entropy_backward(z: &[f64], t: &[i32], dl: &[f64], vocab: usize) -> Vec<f64> {
    let mut out = vec![0.0; z.len()];
    for (r, &tgt) in t.iter().enumerate() {
        if tgt < 0 {
            continue;
        }
        let p = softmax(&z[r * vocab..(r + 1) * vocab], 1, vocab, 1.0, false);
        for j in 0..vocab {
            let onehot = if j == tgt as usize { 1.0 } else { 0.0 };
            out[r * vocab + j] = (p[j] - onehot) * dl[r];
        }
    }
    out
}

/// One AdamW step in f64 from the formula in [`AdamWParams`]'s docs. `m` and `v` are
/// stored as f32 afterwards, as the kernel's buffers are; returns the new `(p, m, v)`
/// with m and v *before* that rounding (the caller rounds what it stores).
pub fn adamw(
    hp: &AdamWParams,
    p: &[f64],
    g: &[f64],
    m: &[f64],
    v: &[f64],
    inv_scale: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (b1, b2) = (f64::from(hp.beta1), f64::from(hp.beta2));
    let (lr, eps, wd) = (
        f64::from(hp.lr),
        f64::from(hp.eps),
        f64::from(hp.weight_decay),
    );
    let step = hp.step as i32;
    let (mut po, mut mo, mut vo) = (vec![0.0; p.len()], vec![0.0; p.len()], vec![0.0; p.len()]);
    for i in 0..p.len() {
        let gi = g[i] * f64::from(hp.grad_scale) * inv_scale;
        mo[i] = b1 * m[i] + (1.0 - b1) * gi;
        vo[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        let mhat = mo[i] / (1.0 - b1.powi(step));
        let vhat = vo[i] / (1.0 - b2.powi(step));
        po[i] = p[i] - lr * (mhat / (vhat.sqrt() + eps) + wd * p[i]);
    }
    (po, mo, vo)
}
