//! # LayerNorm's backward
//!
//! LayerNorm over the last dimension of a `rows × cols` input, with `mean` and the
//! biased variance `var` of each row: `x̂ = (x − mean) / √(var + eps)`,
//! `y = γ·x̂ + β`. Given `dy`, return
//!
//! - `dx` (`rows × cols`): remember that `mean` and `var` depend on every `x` of the row;
//! - `dgamma` and `dbeta` (`cols` each): sums over the rows.
//!
//! Checked in f64 against brrr-cpu's `layernorm_backward` and against finite differences.
//!
//! About 20 lines.
//!
//! ## Hint
//!
//! `dgamma` and `dbeta` are column sums of `dy·x̂` and `dy`. For `dx`, write `g =
//! dy·γ`: besides the direct path through `x̂`, each `x` moves the row's mean and
//! variance, and both paths come out as row means, of `g` and of `g·x̂`. Check your
//! algebra on the finite differences.

use crate::check::{Outcome, all_close, every, rng, with_seed};
use brrr_backend::DType;
use brrr_cpu::CpuBackend;
use brrr_nn::gradcheck::{max_rel_error, numeric_grad, probe_indices};
use brrr_tensor::Tensor;
use rand::Rng;

/// The three gradients of LayerNorm.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerNormGrads {
    /// Gradient of the input, `rows × cols`.
    pub dx: Vec<f64>,
    /// Gradient of the gain `γ`, `cols`.
    pub dgamma: Vec<f64>,
    /// Gradient of the shift `β`, `cols`.
    pub dbeta: Vec<f64>,
}

/// YOUR CODE: LayerNorm's backward (row-major `x` and `dy`).
#[cfg(not(feature = "solutions"))]
pub fn layernorm_backward(
    x: &[f64],
    gamma: &[f64],
    dy: &[f64],
    cols: usize,
    eps: f64,
) -> LayerNormGrads {
    let _ = (x, eps);
    LayerNormGrads {
        dx: dy.to_vec(),
        dgamma: vec![0.0; cols],
        dbeta: vec![0.0; gamma.len()],
    }
}

#[cfg(feature = "solutions")]
pub use solution::layernorm_backward;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/training/layernorm_backward.rs"]
pub mod solution;

/// Against brrr-cpu's backward and finite differences of brrr-cpu's forward.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let cpu = CpuBackend::new();
    let err = |e: brrr_backend::Error| e.to_string();
    let (rows, cols, eps) = (
        rng.random_range(2..9usize),
        rng.random_range(3..40usize),
        1e-5,
    );
    let mut draw = |n: usize, lo: f64, hi: f64| -> Vec<f64> {
        (0..n).map(|_| rng.random_range(lo..hi)).collect()
    };
    let (x, dy) = (draw(rows * cols, -3.0, 3.0), draw(rows * cols, -1.0, 1.0));
    let (gamma, beta) = (draw(cols, 0.5, 1.5), draw(cols, -0.5, 0.5));
    let got = layernorm_backward(&x, &gamma, &dy, cols, eps);

    let t = |v: &[f64], shape: &[usize]| Tensor::from_f64(&cpu, v, shape, DType::F64);
    let (xt, gt, bt, dyt) = (
        t(&x, &[rows, cols]).map_err(err)?,
        t(&gamma, &[cols]).map_err(err)?,
        t(&beta, &[cols]).map_err(err)?,
        t(&dy, &[rows, cols]).map_err(err)?,
    );
    let (_, stats) = xt.layernorm(&gt, &bt, eps as f32).map_err(err)?;
    let mut dgamma = Tensor::zeros(&cpu, [cols], DType::F64).map_err(err)?;
    let mut dbeta = Tensor::zeros(&cpu, [cols], DType::F64).map_err(err)?;
    let dx = xt
        .layernorm_backward(&dyt, &gt, &stats, eps as f32, &mut dgamma, &mut dbeta)
        .map_err(err)?;
    let v = |t: &Tensor<CpuBackend>| t.to_vec_f64().map_err(err);
    every([
        all_close("dx vs brrr-cpu", &got.dx, &v(&dx)?, 1e-8, 1e-10),
        all_close("dgamma vs brrr-cpu", &got.dgamma, &v(&dgamma)?, 1e-8, 1e-10),
        all_close("dbeta vs brrr-cpu", &got.dbeta, &v(&dbeta)?, 1e-8, 1e-10),
    ])?;

    // The loss Σ dy·layernorm(x): its gradient in x is dx.
    let mut loss = |xv: &[f64]| -> f64 {
        let y = t(xv, &[rows, cols])
            .and_then(|x| x.layernorm(&gt, &bt, eps as f32))
            .and_then(|(y, _)| y.to_vec_f64())
            .unwrap_or_default();
        y.iter().zip(&dy).map(|(y, g)| y * g).sum()
    };
    let idx = probe_indices(rows * cols, 24);
    let numeric = numeric_grad(&mut loss, &x, &idx, 1e-5);
    let analytic: Vec<f64> = idx.iter().map(|&i| got.dx[i]).collect();
    // Finite differences carry rounding noise of about 1e-6 here; a wrong gradient is
    // off by far more than 1e-4.
    let rel = max_rel_error(&analytic, &numeric, 1e-8);
    if rel > 1e-4 {
        return Err(format!(
            "dx differs from the finite differences by {rel:.2e} (relative)"
        ));
    }
    Ok(())
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
