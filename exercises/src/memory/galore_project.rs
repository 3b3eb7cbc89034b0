//! # GaLore's projection: the gradient in a rank-r subspace
//!
//! GaLore (Zhao et al. 2024, "GaLore: Memory-Efficient LLM Training by Gradient Low-Rank
//! Projection") keeps AdamW's moments for an `m × n` weight in a rank-`r` projection of
//! its gradient `G` instead of in `G`'s own shape. For a `rows × cols` gradient (f32,
//! row-major), write:
//!
//! - `galore_projection`: the projection from a thin SVD `G = U Σ Vᵀ`, on the smaller
//!   side. With `rows <= cols`, `P` is the first `rank` left singular vectors (`U`'s
//!   first columns, `[rows, rank]`); with `rows > cols`, `Q` is the first `rank` right
//!   singular vectors (`V`'s first columns, `[cols, rank]`). Row-major; by descending
//!   singular value. (A singular vector's sign is arbitrary: any sign will do.)
//! - `project`: the gradient in the subspace, `R = Pᵀ G` (`[rank, cols]`) or `R = G Q`
//!   (`[rows, rank]`): the shape AdamW's moments take.
//! - `project_back`: a matrix of `R`'s shape (the Adam direction computed there) mapped
//!   back to the weight's shape, `P X` or `X Qᵀ`.
//! - `galore_state_bytes`: the bytes of f32 state one weight then keeps: the projection
//!   and two moments in `R`'s shape.
//!
//! Checked on gradients of known singular values: your projection must have orthonormal
//! columns and span the subspace `brrr_nn::galore::Projector` finds, `project` and
//! `project_back` (with your projection loaded into a `Projector`) must agree with
//! `Projector::project` and `Projector::project_back`, `P Pᵀ G` must be the best rank-`r`
//! approximation of `G` (its error is the root of the sum of the squared singular values
//! left out), and the bytes must be `GaLoreConfig::state_bytes`.
//!
//! About 30 lines.
//!
//! ## Hint
//!
//! `nalgebra::DMatrix::from_row_slice(rows, cols, g).svd(rows <= cols, rows > cols)`
//! computes only the side you need, sorted by descending singular value: `svd.u` is
//! `rows × min`, `svd.v_t` is `min × cols` (`V`'s columns are its rows). The rest is two
//! matrix products over row-major slices. For the bytes: 4 per f32, and `R` is `rank ×
//! max(rows, cols)` either way.

use crate::check::{Outcome, close, every, rng, with_seed};
use brrr_backend::DType;
use brrr_cpu::CpuBackend;
use brrr_nn::galore::{ProjectorState, Side};
use brrr_nn::{GaLoreConfig, Projector};
use brrr_tensor::Tensor;
use nalgebra::DMatrix;
use rand::Rng;

/// YOUR CODE: the first `rank` singular vectors of the smaller side, row-major
/// (`[rows, rank]` when `rows <= cols`, else `[cols, rank]`).
#[cfg(not(feature = "solutions"))]
pub fn galore_projection(g: &[f32], rows: usize, cols: usize, rank: usize) -> Vec<f32> {
    // The first `rank` coordinate axes: orthonormal, but not the gradient's subspace.
    let _ = g;
    let dim = if rows <= cols { rows } else { cols };
    (0..dim * rank)
        .map(|i| if i / rank == i % rank { 1.0 } else { 0.0 })
        .collect()
}

/// YOUR CODE: `R = Pᵀ G` (`[rank, cols]`) or `R = G Q` (`[rows, rank]`).
#[cfg(not(feature = "solutions"))]
pub fn project(p: &[f32], g: &[f32], rows: usize, cols: usize, rank: usize) -> Vec<f32> {
    let _ = (p, g);
    vec![0.0; rank * rows.max(cols)]
}

/// YOUR CODE: `P X` or `X Qᵀ` (`[rows, cols]`) for `x` of `R`'s shape.
#[cfg(not(feature = "solutions"))]
pub fn project_back(p: &[f32], x: &[f32], rows: usize, cols: usize, rank: usize) -> Vec<f32> {
    let _ = (p, x, rank);
    vec![0.0; rows * cols]
}

/// YOUR CODE: bytes of GaLore's state for a `rows × cols` weight at `rank`.
#[cfg(not(feature = "solutions"))]
pub fn galore_state_bytes(rows: usize, cols: usize, rank: usize) -> usize {
    // AdamW's: two f32 moments the size of the weight.
    let _ = rank;
    8 * rows * cols
}

#[cfg(feature = "solutions")]
pub use solution::{galore_projection, galore_state_bytes, project, project_back};

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/memory/galore_project.rs"]
pub mod solution;

/// Against brrr-nn's `Projector` and the singular values the gradients are built with.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

/// A `rows × cols` gradient `U diag(σ) Vᵀ` with random orthonormal `U`, `V` and
/// `σ_k = s·2^-k`: every gap a factor of 2, so the top-`r` subspace is well defined in
/// f32. Returns it row-major, and `σ`.
fn gradient(rng: &mut impl Rng, rows: usize, cols: usize) -> (Vec<f32>, Vec<f64>) {
    let k = rows.min(cols);
    let mut orthonormal = |n: usize| {
        DMatrix::<f64>::from_fn(n, k, |_, _| rng.random_range(-1.0..1.0))
            .qr()
            .q()
    };
    let (u, v) = (orthonormal(rows), orthonormal(cols));
    let s = 10f64.powf(rng.random_range(-4.0..1.0));
    let sigma: Vec<f64> = (0..k).map(|i| s * 0.5f64.powi(i as i32)).collect();
    let g =
        &u * DMatrix::from_diagonal(&nalgebra::DVector::from_vec(sigma.clone())) * v.transpose();
    let mut out = Vec::with_capacity(rows * cols);
    for i in 0..rows {
        out.extend((0..cols).map(|j| g[(i, j)] as f32));
    }
    (out, sigma)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let cpu = CpuBackend::new();
    let err = |e: brrr_backend::Error| e.to_string();
    for round in 0..8 {
        let (small, large) = (rng.random_range(4..24usize), rng.random_range(24..48usize));
        // Both sides: wide gradients project on the left, tall ones on the right.
        let (rows, cols) = if round % 2 == 0 {
            (small, large)
        } else {
            (large, small)
        };
        let rank = rng.random_range(1..=small / 2);
        let what = format!("a {rows} × {cols} gradient at rank {rank}");
        let side = Side::of(rows, cols);
        let dim = if side == Side::Left { rows } else { cols };
        let low_dims = if side == Side::Left {
            [rank, cols]
        } else {
            [rows, rank]
        };
        let (g, sigma) = gradient(rng, rows, cols);
        let config = GaLoreConfig {
            rank,
            ..GaLoreConfig::default()
        };
        let g_dev = Tensor::from_f32(&cpu, &g, [rows, cols], DType::F32).map_err(err)?;

        let p = galore_projection(&g, rows, cols, rank);
        if p.len() != dim * rank {
            return Err(format!(
                "{what}: a projection of {} values, expected [{dim}, {rank}] = {} (the {} \
                 side, the smaller)",
                p.len(),
                dim * rank,
                if side == Side::Left { "left" } else { "right" }
            ));
        }
        let mut reference = Projector::<CpuBackend>::new(config, rows, cols).map_err(err)?;
        reference.refresh(&g_dev).map_err(err)?;
        let p_ref = reference.to_host().map_err(err)?.projection;
        every([
            orthonormal_columns(&what, &p, dim, rank),
            same_subspace(&what, &p, &p_ref, dim, rank),
        ])?;

        // Your projection, loaded into brrr-nn's projector, projects as yours does.
        let zeros = vec![0.0; low_dims[0] * low_dims[1]];
        let state = ProjectorState {
            side,
            projection: p.clone(),
            m: zeros.clone(),
            v: zeros,
        };
        let yours = Projector::from_host(config, rows, cols, state, &cpu).map_err(err)?;
        let r_want = yours
            .project(&g_dev)
            .map_err(err)?
            .to_vec_f32()
            .map_err(err)?;
        let r_got = project(&p, &g, rows, cols, rank);
        let x: Vec<f32> = (0..r_want.len())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let x_dev = Tensor::from_f32(&cpu, &x, low_dims, DType::F32).map_err(err)?;
        let back_want = yours
            .project_back(&x_dev)
            .map_err(err)?
            .to_vec_f32()
            .map_err(err)?;
        let back_got = project_back(&p, &x, rows, cols, rank);
        every([
            near(&format!("{what}: R"), &r_got, &r_want),
            near(&format!("{what}: X mapped back"), &back_got, &back_want),
        ])?;

        // Eckart–Young: the projection keeps the top `rank` singular values, so the part
        // of G it loses is exactly the rest of them.
        let approx = project_back(&p, &r_got, rows, cols, rank);
        let lost: f64 = g
            .iter()
            .zip(&approx)
            .map(|(a, b)| f64::from(a - b).powi(2))
            .sum::<f64>()
            .sqrt();
        let tail = sigma[rank..].iter().map(|s| s * s).sum::<f64>().sqrt();
        if (lost - tail).abs() > 1e-4 * sigma[0] {
            return Err(format!(
                "{what}: ‖G − back(project(G))‖ = {lost:e}, but the singular values left out \
                 add up to {tail:e} (the best rank-{rank} approximation)"
            ));
        }
    }
    for _ in 0..20 {
        let (rows, cols) = (
            rng.random_range(1..20_000usize),
            rng.random_range(1..20_000usize),
        );
        let rank = rng.random_range(1..=rows.min(cols));
        let config = GaLoreConfig {
            rank,
            ..GaLoreConfig::default()
        };
        close(
            &format!("state bytes of a {rows} × {cols} weight at rank {rank}"),
            galore_state_bytes(rows, cols, rank) as f64,
            config.state_bytes(rows, cols) as f64,
            0.0,
        )?;
    }
    Ok(())
}

/// `PᵀP = I` for the row-major `[dim, rank]` matrix `p`.
fn orthonormal_columns(what: &str, p: &[f32], dim: usize, rank: usize) -> Outcome {
    for a in 0..rank {
        for b in 0..rank {
            let dot: f64 = (0..dim)
                .map(|i| f64::from(p[i * rank + a]) * f64::from(p[i * rank + b]))
                .sum();
            let want = if a == b { 1.0 } else { 0.0 };
            if (dot - want).abs() > 1e-4 {
                return Err(format!(
                    "{what}: columns {a} and {b} of the projection have a dot product of \
                     {dot:.6}, expected {want} (orthonormal columns)"
                ));
            }
        }
    }
    Ok(())
}

/// `P Pᵀ` (the orthogonal projector onto the span, whatever the signs) against brrr's.
fn same_subspace(what: &str, p: &[f32], p_ref: &[f32], dim: usize, rank: usize) -> Outcome {
    let outer = |q: &[f32], i: usize, j: usize| -> f64 {
        (0..rank)
            .map(|k| f64::from(q[i * rank + k]) * f64::from(q[j * rank + k]))
            .sum()
    };
    for i in 0..dim {
        for j in 0..dim {
            let (got, want) = (outer(p, i, j), outer(p_ref, i, j));
            if (got - want).abs() > 1e-3 {
                return Err(format!(
                    "{what}: the projection spans another subspace than the top {rank} \
                     singular vectors: (P Pᵀ)[{i}, {j}] = {got:.5}, brrr-nn's gives {want:.5}"
                ));
            }
        }
    }
    Ok(())
}

/// Equal up to f32 rounding, on the scale of `want`.
fn near(what: &str, got: &[f32], want: &[f32]) -> Outcome {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    let scale = want
        .iter()
        .fold(0.0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    match (0..want.len()).find(|&i| (got[i] - want[i]).abs() > 1e-4 * scale) {
        Some(i) => Err(format!(
            "{what}[{i}]: got {:e}, brrr-nn's Projector gives {:e}",
            got[i], want[i]
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "an exercise: solve it, then `cargo run -p brrr-exercises`"
    )]
    fn check() {
        if let Err(e) = super::check() {
            panic!("{e}");
        }
    }
}
