use super::Global;

/// Output tiles; per k-step, stage both blocks locally, then accumulate.
pub fn matmul_tiled(g: &Global, tile: usize) -> Vec<f32> {
    let (m, n, k, t) = (g.m, g.n, g.k, tile);
    let mut c = vec![0.0f32; m * n];
    let mut a_tile = vec![0.0f32; t * t];
    let mut b_tile = vec![0.0f32; t * t];
    for i0 in (0..m).step_by(t) {
        for j0 in (0..n).step_by(t) {
            let mut acc = vec![0.0f32; t * t];
            for q0 in (0..k).step_by(t) {
                // Stage: out-of-range elements are zero, as in v2_tiled.
                for r in 0..t {
                    for s in 0..t {
                        let (i, q, j) = (i0 + r, q0 + s, j0 + s);
                        a_tile[r * t + s] = if i < m && q < k { g.a(i, q) } else { 0.0 };
                        let qb = q0 + r;
                        b_tile[r * t + s] = if qb < k && j < n { g.b(qb, j) } else { 0.0 };
                    }
                }
                for r in 0..t {
                    for s in 0..t {
                        let mut sum = 0.0;
                        for q in 0..t {
                            sum += a_tile[r * t + q] * b_tile[q * t + s];
                        }
                        acc[r * t + s] += sum;
                    }
                }
            }
            for r in 0..t.min(m - i0) {
                for s in 0..t.min(n - j0) {
                    c[(i0 + r) * n + j0 + s] = acc[r * t + s];
                }
            }
        }
    }
    c
}
