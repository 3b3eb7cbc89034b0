//! # Cross-entropy's backward
//!
//! The loss of one row of logits `z` (one position) with target class `t` is
//! `logsumexp(z) − z[t]`. Given the upstream gradient `dloss` of each row's loss, what is
//! the gradient of the logits? Derive `∂loss/∂z[j]` on paper, then write it row by row. A
//! negative target marks a position to ignore (padding): its row's gradient is zero. A
//! logit of 1000 overflows `exp`: compute so that it cannot.
//!
//! About 15 lines. Checked in f64 against brrr-cpu's `cross_entropy_backward` and against
//! finite differences of brrr-cpu's forward loss.
//!
//! ## Hint
//!
//! The derivative of `logsumexp(z)` by `z[j]` is `exp(z[j]) / Σₖ exp(z[k])`, a function you
//! know by name. `z[t]` appears in one column only. Subtracting the row's maximum from every
//! logit changes neither the loss nor its gradient.

use crate::check::{Outcome, all_close, rng, with_seed};
use brrr_backend::DType;
use brrr_cpu::CpuBackend;
use brrr_nn::gradcheck::{max_rel_error, numeric_grad, probe_indices};
use brrr_tensor::Tensor;
use rand::Rng;

/// YOUR CODE: `dlogits` (row-major, `vocab` columns) of per-row cross-entropy.
#[cfg(not(feature = "solutions"))]
pub fn cross_entropy_backward(
    logits: &[f64],
    targets: &[i32],
    dloss: &[f64],
    vocab: usize,
) -> Vec<f64> {
    let _ = (targets, dloss, vocab);
    vec![0.0; logits.len()]
}

#[cfg(feature = "solutions")]
pub use solution::cross_entropy_backward;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/training/cross_entropy_backward.rs"]
pub mod solution;

/// Against brrr-cpu's backward and the finite differences of its forward.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let cpu = CpuBackend::new();
    let err = |e: brrr_backend::Error| e.to_string();
    let (rows, vocab) = (rng.random_range(3..9usize), rng.random_range(2..50usize));
    let logits: Vec<f64> = (0..rows * vocab)
        .map(|_| rng.random_range(-4.0..4.0))
        .collect();
    let mut targets: Vec<i32> = (0..rows)
        .map(|_| rng.random_range(0..vocab as i32))
        .collect();
    targets[rng.random_range(0..rows)] = -1; // one ignored position
    let dloss: Vec<f64> = (0..rows).map(|_| rng.random_range(0.1..1.0)).collect();
    let got = cross_entropy_backward(&logits, &targets, &dloss, vocab);

    let z = Tensor::from_f64(&cpu, &logits, [rows, vocab], DType::F64).map_err(err)?;
    let t = Tensor::from_i32(&cpu, &targets, [rows]).map_err(err)?;
    let dl = Tensor::from_f64(&cpu, &dloss, [rows], DType::F64).map_err(err)?;
    let want = z
        .cross_entropy_backward(&t, &dl)
        .and_then(|d| d.to_vec_f64())
        .map_err(err)?;
    all_close("dlogits vs brrr-cpu", &got, &want, 1e-10, 1e-12)?;

    // Σ dloss·loss: its gradient in the logits is dlogits.
    let mut loss = |zv: &[f64]| -> f64 {
        let l = Tensor::from_f64(&cpu, zv, [rows, vocab], DType::F64)
            .and_then(|z| z.cross_entropy(&t))
            .and_then(|l| l.to_vec_f64())
            .unwrap_or_default();
        l.iter().zip(&dloss).map(|(l, d)| l * d).sum()
    };
    let idx = probe_indices(rows * vocab, 32);
    let numeric = numeric_grad(&mut loss, &logits, &idx, 1e-5);
    let analytic: Vec<f64> = idx.iter().map(|&i| got[i]).collect();
    // Finite differences carry rounding noise of about 1e-6 here; a wrong gradient is
    // off by far more than 1e-4.
    let rel = max_rel_error(&analytic, &numeric, 1e-8);
    if rel > 1e-4 {
        return Err(format!(
            "dlogits differ from the finite differences by {rel:.2e} (relative)"
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
