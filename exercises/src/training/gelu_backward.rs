//! # GELU's backward
//!
//! GPT-2's GELU is the tanh approximation
//! `gelu(x) = 0.5·x·(1 + tanh(u))` with `u = √(2/π)·(x + 0.044715·x³)`.
//! Its backward takes the upstream gradient `dy` and returns `dx = dy · gelu'(x)`,
//! element by element. Derive `gelu'` and write it.
//!
//! Checked in f64 against brrr-cpu's `gelu_backward` and against central finite
//! differences of brrr-cpu's forward (`brrr_nn::gradcheck`), on random inputs.
//!
//! About 10 lines.
//!
//! ## Hint
//!
//! Differentiate the product `0.5·x·(1 + tanh(u))` with the product rule; `tanh'(u) = 1
//! − tanh²(u)` and `u' = √(2/π)·(1 + 3·0.044715·x²)`. Compute `tanh(u)` once and use it
//! twice.

use crate::check::{Outcome, all_close, rng, with_seed};
use brrr_backend::DType;
use brrr_cpu::CpuBackend;
use brrr_nn::gradcheck::{max_rel_error, numeric_grad, probe_indices};
use brrr_tensor::Tensor;
use rand::Rng;

/// YOUR CODE: `dx[i] = dy[i] · gelu'(x[i])`.
#[cfg(not(feature = "solutions"))]
pub fn gelu_backward(x: &[f64], dy: &[f64]) -> Vec<f64> {
    let _ = x;
    dy.to_vec()
}

#[cfg(feature = "solutions")]
pub use solution::gelu_backward;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/training/gelu_backward.rs"]
pub mod solution;

/// Against brrr-cpu's backward and the finite differences of its forward.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let cpu = CpuBackend::new();
    let err = |e: brrr_backend::Error| e.to_string();
    let n = 257;
    let x: Vec<f64> = (0..n).map(|_| rng.random_range(-5.0..5.0)).collect();
    let dy: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let got = gelu_backward(&x, &dy);
    let xt = Tensor::from_f64(&cpu, &x, [n], DType::F64).map_err(err)?;
    let dyt = Tensor::from_f64(&cpu, &dy, [n], DType::F64).map_err(err)?;
    let want = xt
        .gelu_backward(&dyt)
        .map_err(err)?
        .to_vec_f64()
        .map_err(err)?;
    all_close("dx vs brrr-cpu", &got, &want, 1e-10, 1e-12)?;
    // The loss Σ dy·gelu(x): its gradient in x is exactly dx.
    let mut loss = |x: &[f64]| -> f64 {
        let y = Tensor::from_f64(&cpu, x, [n], DType::F64)
            .and_then(|t| t.gelu())
            .and_then(|t| t.to_vec_f64())
            .unwrap_or_default();
        y.iter().zip(&dy).map(|(y, g)| y * g).sum()
    };
    let idx = probe_indices(n, 32);
    let numeric = numeric_grad(&mut loss, &x, &idx, 1e-5);
    let analytic: Vec<f64> = idx.iter().map(|&i| got[i]).collect();
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
