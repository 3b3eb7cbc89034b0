//! # LoRA: a frozen weight and a trained low-rank update
//!
//! LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") fine-tunes
//! a linear layer without touching its weight: `W` (`[d_in, d_out]`) stays frozen, and
//! two small matrices `A` (`[d_in, r]`) and `B` (`[r, d_out]`) learn the change. For
//! `n` rows of input `x` (`[n, d_in]`):
//!
//! `y = x W + (α / r) · (x A) B`
//!
//! `B` starts at zero (and `A` random), so training starts from the pretrained layer
//! exactly; `α / r` keeps the update's size from depending on the rank (§4.1). Only `A`
//! and `B` have gradients and optimizer state: `r · (d_in + d_out)` values instead of
//! `d_in · d_out`.
//!
//! Write the forward and the backward: given `dy` (`[n, d_out]`, the loss's gradient in
//! `y`), return `dx` (for the layer below), `dA` and `dB`; there is no `dW`. Everything
//! is row-major f32.
//!
//! Checked against brrr's tensors (`Tensor::matmul` on brrr-cpu) for the forward and
//! against finite differences of the loss `Σ dy · y` for the backward, with a random
//! `B` and with `B = 0`: then `y` must equal `x W`, and `dA` must be exactly zero while
//! `dB` is not (what zero-initialising `B` means for the first step).
//!
//! About 30 lines.
//!
//! ## Hint
//!
//! Keep `h = x A` (`[n, r]`) from the forward. With `s = α / r` and `g = s · dy Bᵀ`
//! (`[n, r]`): `dB = s · hᵀ dy`, `dA = xᵀ g`, `dx = dy Wᵀ + g Aᵀ`. Each is a product of
//! row-major slices; a helper `matmul(a, b, m, k, n)` with flags for transposing either
//! operand saves repeating the loops.

use crate::check::{Outcome, all_close, every, f64s, rng, with_seed};
use brrr_backend::DType;
use brrr_cpu::CpuBackend;
use brrr_nn::gradcheck::{max_rel_error, numeric_grad, probe_indices};
use brrr_tensor::Tensor;
use rand::Rng;

/// A LoRA linear layer: the frozen weight and the adapter (row-major f32).
#[derive(Debug, Clone, Copy)]
pub struct Lora<'a> {
    /// The frozen weight, `[d_in, d_out]`.
    pub w: &'a [f32],
    /// The adapter's down-projection, `[d_in, rank]`.
    pub a: &'a [f32],
    /// The adapter's up-projection, `[rank, d_out]` (zeros at the start of training).
    pub b: &'a [f32],
    /// Input width.
    pub d_in: usize,
    /// Output width.
    pub d_out: usize,
    /// `r`, the adapter's rank.
    pub rank: usize,
    /// `α`: the update is scaled by `α / r`.
    pub alpha: f32,
}

/// The gradients a LoRA layer's backward returns.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraGrads {
    /// Gradient of the input, `[n, d_in]`.
    pub dx: Vec<f32>,
    /// Gradient of `A`, `[d_in, rank]`.
    pub da: Vec<f32>,
    /// Gradient of `B`, `[rank, d_out]`.
    pub db: Vec<f32>,
}

/// YOUR CODE: `y = x W + (α/r)·(x A) B` for `n` rows of `x`.
#[cfg(not(feature = "solutions"))]
pub fn lora_forward(l: &Lora, x: &[f32], n: usize) -> Vec<f32> {
    let _ = x;
    vec![0.0; n * l.d_out]
}

/// YOUR CODE: `dx`, `dA` and `dB` from `dy`.
#[cfg(not(feature = "solutions"))]
pub fn lora_backward(l: &Lora, x: &[f32], dy: &[f32], n: usize) -> LoraGrads {
    let _ = (x, dy);
    LoraGrads {
        dx: vec![0.0; n * l.d_in],
        da: vec![0.0; l.d_in * l.rank],
        db: vec![0.0; l.rank * l.d_out],
    }
}

#[cfg(feature = "solutions")]
pub use solution::{lora_backward, lora_forward};

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/memory/lora_forward_backward.rs"]
pub mod solution;

/// Against brrr-cpu's matmuls and finite differences, with a random and a zero `B`.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..6 {
        let n = rng.random_range(1..8usize);
        let (d_in, d_out) = (rng.random_range(2..24usize), rng.random_range(2..24usize));
        let rank = rng.random_range(1..=d_in.min(d_out).min(8));
        let alpha = [1.0f32, 8.0, 16.0, 32.0][rng.random_range(0..4)];
        let mut draw =
            |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect() };
        let (w, a, b) = (draw(d_in * d_out), draw(d_in * rank), draw(rank * d_out));
        let (x, dy) = (draw(n * d_in), draw(n * d_out));
        let zeros = vec![0.0f32; rank * d_out];
        for b in [&b, &zeros] {
            let l = Lora {
                w: &w,
                a: &a,
                b,
                d_in,
                d_out,
                rank,
                alpha,
            };
            let what = format!(
                "n = {n}, d_in = {d_in}, d_out = {d_out}, r = {rank}, α = {alpha}{}",
                if b.iter().all(|v| *v == 0.0) {
                    ", B = 0"
                } else {
                    ""
                }
            );
            check_layer(&what, &l, &x, &dy, n)?;
        }
    }
    Ok(())
}

/// The forward against brrr's tensors, the backward against finite differences, and
/// with `B = 0` the frozen layer's output and no gradient for `A`.
fn check_layer(what: &str, l: &Lora, x: &[f32], dy: &[f32], n: usize) -> Outcome {
    let cpu = CpuBackend::new();
    let err = |e: brrr_backend::Error| e.to_string();
    let (d_in, d_out, r) = (l.d_in, l.d_out, l.rank);
    let s = l.alpha / r as f32;
    let t = |v: &[f32], dims: [usize; 2]| Tensor::from_f32(&cpu, v, dims, DType::F32);
    let (xt, wt) = (
        t(x, [n, d_in]).map_err(err)?,
        t(l.w, [d_in, d_out]).map_err(err)?,
    );
    let (at, bt) = (
        t(l.a, [d_in, r]).map_err(err)?,
        t(l.b, [r, d_out]).map_err(err)?,
    );
    let frozen = xt.matmul(&wt).map_err(err)?;
    let update = xt.matmul(&at).and_then(|h| h.matmul(&bt)).map_err(err)?;
    let want = frozen.add(&update.scale(s).map_err(err)?).map_err(err)?;
    let want = want.to_vec_f32().map_err(err)?;
    let got = lora_forward(l, x, n);
    all_close(
        &format!("{what}: y vs brrr-cpu's matmuls"),
        &f64s(&got),
        &f64s(&want),
        1e-4,
        1e-5,
    )?;

    let grads = lora_backward(l, x, dy, n);
    for (name, v, len) in [
        ("dx", &grads.dx, n * d_in),
        ("dA", &grads.da, d_in * r),
        ("dB", &grads.db, r * d_out),
    ] {
        if v.len() != len {
            return Err(format!(
                "{what}: {name} has {} values, expected {len}",
                v.len()
            ));
        }
    }
    // The loss Σ dy·y in f64 on brrr-cpu, as a function of one of x, A, B at a time.
    let (x64, w64, a64, b64, dy64) = (f64s(x), f64s(l.w), f64s(l.a), f64s(l.b), f64s(dy));
    let loss = |x: &[f64], a: &[f64], b: &[f64]| -> f64 {
        let t = |v: &[f64], dims: [usize; 2]| Tensor::from_f64(&cpu, v, dims, DType::F64);
        let y = (|| {
            let xt = t(x, [n, d_in])?;
            let lora = xt.matmul(&t(a, [d_in, r])?)?.matmul(&t(b, [r, d_out])?)?;
            xt.matmul(&t(&w64, [d_in, d_out])?)?
                .add(&lora.scale(s)?)?
                .to_vec_f64()
        })()
        .unwrap_or_default();
        y.iter().zip(&dy64).map(|(y, g)| y * g).sum()
    };
    let by_finite_differences = |name: &str, analytic: &[f32], numeric: Vec<f64>, idx: &[usize]| {
        let analytic: Vec<f64> = idx.iter().map(|&i| f64::from(analytic[i])).collect();
        // The loss is linear in each of x, A and B: central differences in f64 are exact
        // up to rounding (about 1e-9 here). Your f32 sums with cancellation can be off by
        // about 1e-4; a wrong gradient is off by far more than 1e-3.
        let rel = max_rel_error(&analytic, &numeric, 1e-6);
        match rel > 1e-3 {
            true => Err(format!(
                "{what}: {name} differs from the finite differences by {rel:.2e} (relative)"
            )),
            false => Ok(()),
        }
    };
    let h = 1e-3;
    let (ix, ia, ib) = (
        probe_indices(n * d_in, 16),
        probe_indices(d_in * r, 16),
        probe_indices(r * d_out, 16),
    );
    every([
        by_finite_differences(
            "dx",
            &grads.dx,
            numeric_grad(&mut |v| loss(v, &a64, &b64), &x64, &ix, h),
            &ix,
        ),
        by_finite_differences(
            "dA",
            &grads.da,
            numeric_grad(&mut |v| loss(&x64, v, &b64), &a64, &ia, h),
            &ia,
        ),
        by_finite_differences(
            "dB",
            &grads.db,
            numeric_grad(&mut |v| loss(&x64, &a64, v), &b64, &ib, h),
            &ib,
        ),
    ])?;

    if l.b.iter().all(|v| *v == 0.0) {
        let frozen = frozen.to_vec_f32().map_err(err)?;
        every([
            all_close(
                &format!("{what}: y vs x W"),
                &f64s(&got),
                &f64s(&frozen),
                1e-4,
                1e-5,
            ),
            match grads.da.iter().position(|v| *v != 0.0) {
                Some(i) => Err(format!(
                    "{what}: dA[{i}] = {:e}; with B = 0 no gradient reaches A",
                    grads.da[i]
                )),
                None => Ok(()),
            },
            match grads.db.iter().all(|v| *v == 0.0) {
                true => Err(format!(
                    "{what}: dB is all zeros; with B = 0, B still learns (from x A and dy)"
                )),
                false => Ok(()),
            },
        ])?;
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
