use nalgebra::DMatrix;

/// The thin SVD's first `rank` left (`rows <= cols`) or right singular vectors.
pub fn galore_projection(g: &[f32], rows: usize, cols: usize, rank: usize) -> Vec<f32> {
    let left = rows <= cols;
    // Sorted by descending singular value; only the side asked for is computed.
    let svd = DMatrix::from_row_slice(rows, cols, g).svd(left, !left);
    let mut p = Vec::with_capacity(rank * rows.min(cols));
    if left {
        let u = svd.u.expect("computed: compute_u was set");
        for i in 0..rows {
            p.extend((0..rank).map(|k| u[(i, k)]));
        }
    } else {
        // Q[c, k] = Vᵀ[k, c].
        let v_t = svd.v_t.expect("computed: compute_v was set");
        for c in 0..cols {
            p.extend((0..rank).map(|k| v_t[(k, c)]));
        }
    }
    p
}

/// `Pᵀ G` or `G Q`, as loops over row-major slices.
pub fn project(p: &[f32], g: &[f32], rows: usize, cols: usize, rank: usize) -> Vec<f32> {
    if rows <= cols {
        let mut r = vec![0.0; rank * cols];
        for i in 0..rows {
            for k in 0..rank {
                for j in 0..cols {
                    r[k * cols + j] += p[i * rank + k] * g[i * cols + j];
                }
            }
        }
        r
    } else {
        let mut r = vec![0.0; rows * rank];
        for i in 0..rows {
            for j in 0..cols {
                for k in 0..rank {
                    r[i * rank + k] += g[i * cols + j] * p[j * rank + k];
                }
            }
        }
        r
    }
}

/// `P X` or `X Qᵀ`.
pub fn project_back(p: &[f32], x: &[f32], rows: usize, cols: usize, rank: usize) -> Vec<f32> {
    let mut w = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            w[i * cols + j] = (0..rank)
                .map(|k| match rows <= cols {
                    true => p[i * rank + k] * x[k * cols + j],
                    false => x[i * rank + k] * p[j * rank + k],
                })
                .sum();
        }
    }
    w
}

/// The projection (`min × rank`) and two moments (`rank × max`), 4 bytes a value.
pub fn galore_state_bytes(rows: usize, cols: usize, rank: usize) -> usize {
    4 * rank * (rows.min(cols) + 2 * rows.max(cols))
}
