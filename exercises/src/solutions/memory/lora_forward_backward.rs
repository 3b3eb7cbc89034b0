use super::{Lora, LoraGrads};

/// `op(a) · op(b)` for row-major operands, `op(a)` of shape `[m, k]` and `op(b)` of
/// `[k, n]`; `ta`/`tb` say an operand is stored transposed (`a` as `[k, m]`, `b` as
/// `[n, k]`).
fn matmul(a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize), ta: bool, tb: bool) -> Vec<f32> {
    let at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] };
    let bt = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] };
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
        }
    }
    c
}

/// `x W + s · (x A) B` with `s = α / r`.
pub fn lora_forward(l: &Lora, x: &[f32], n: usize) -> Vec<f32> {
    let s = l.alpha / l.rank as f32;
    let h = matmul(x, l.a, (n, l.d_in, l.rank), false, false);
    let update = matmul(&h, l.b, (n, l.rank, l.d_out), false, false);
    let frozen = matmul(x, l.w, (n, l.d_in, l.d_out), false, false);
    frozen.iter().zip(&update).map(|(y, u)| y + s * u).collect()
}

/// `g = s · dy Bᵀ`; `dB = s · (x A)ᵀ dy`, `dA = xᵀ g`, `dx = dy Wᵀ + g Aᵀ`.
pub fn lora_backward(l: &Lora, x: &[f32], dy: &[f32], n: usize) -> LoraGrads {
    let (d_in, d_out, r) = (l.d_in, l.d_out, l.rank);
    let s = l.alpha / r as f32;
    // Recomputed here; a layer would keep it from the forward.
    let h = matmul(x, l.a, (n, d_in, r), false, false);
    let g: Vec<f32> = matmul(dy, l.b, (n, d_out, r), false, true)
        .iter()
        .map(|v| s * v)
        .collect();
    let db = matmul(&h, dy, (r, n, d_out), true, false)
        .iter()
        .map(|v| s * v)
        .collect();
    let da = matmul(x, &g, (d_in, n, r), true, false);
    let through_w = matmul(dy, l.w, (n, d_out, d_in), false, true);
    let through_a = matmul(&g, l.a, (n, r, d_in), false, true);
    let dx = through_w
        .iter()
        .zip(&through_a)
        .map(|(a, b)| a + b)
        .collect();
    LoraGrads { dx, da, db }
}
