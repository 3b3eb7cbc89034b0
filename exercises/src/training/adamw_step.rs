//! # One AdamW step
//!
//! Write AdamW (Loshchilov and Hutter 2019) with Adam's bias correction (Kingma and Ba
//! 2015), with the settings `brrr_backend::AdamWParams` holds, for step `t = hp.step`
//! (counting from 1). For each element, with the gradient `g = grad · hp.grad_scale`:
//!
//! - `m` is an exponential moving average of `g` with decay `β1`, `v` one of `g²` with
//!   decay `β2`;
//! - both start at zero, so in early steps they are too small: divide each by the total
//!   weight its average has given to gradients so far, giving `m̂` and `v̂`;
//! - the parameter moves against `m̂ / (√v̂ + ε)`, scaled by the learning rate;
//! - the weight decay is *decoupled*: it shrinks the parameter by `lr · weight_decay`
//!   times its value before this step, rather than entering the gradient.
//!
//! Update `param`, `m` and `v` in place. About 12 lines. Checked over several steps against
//! brrr-cpu's fused `adamw` kernel.
//!
//! ## Hint
//!
//! After `t` updates `m ← β1·m + (1 − β1)·g` starting from zero, the weights on the
//! gradients sum to a geometric series: work it out for `t = 1` and `t = 2`. Compute `β^t`
//! in f64: in f32 it drifts over thousands of steps.

use crate::check::{Outcome, all_close, every, f64s, hint_if, rng, with_seed};
use brrr_backend::{AdamWParams, Backend, HostData, block_on};
use brrr_cpu::CpuBackend;
use rand::Rng;

/// YOUR CODE: one AdamW update of `param` (and its moments `m`, `v`) in place.
#[cfg(not(feature = "solutions"))]
pub fn adamw_step(hp: &AdamWParams, param: &mut [f32], grad: &[f32], m: &mut [f32], v: &mut [f32]) {
    let _ = (hp, param, grad, m, v);
}

#[cfg(feature = "solutions")]
pub use solution::adamw_step;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/training/adamw_step.rs"]
pub mod solution;

/// Three steps against brrr-cpu's `adamw`, from random parameters and gradients.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let cpu = CpuBackend::new();
    let err = |e: brrr_backend::Error| e.to_string();
    let n = 1000;
    let mut param: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
    let mut p_dev = cpu.upload(&HostData::F32(param.clone())).map_err(err)?;
    let mut m_dev = cpu.upload(&HostData::F32(m.clone())).map_err(err)?;
    let mut v_dev = cpu.upload(&HostData::F32(v.clone())).map_err(err)?;
    for step in 1..=3 {
        let grad: Vec<f32> = (0..n).map(|_| rng.random_range(-0.1..0.1)).collect();
        let hp = AdamWParams {
            lr: rng.random_range(1e-4..1e-2),
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            step,
            grad_scale: rng.random_range(0.5..1.0),
            range: None,
        };
        adamw_step(&hp, &mut param, &grad, &mut m, &mut v);
        let g_dev = cpu.upload(&HostData::F32(grad)).map_err(err)?;
        cpu.adamw(&hp, &mut p_dev, &g_dev, &mut m_dev, &mut v_dev, None, None)
            .map_err(err)?;
        let read = |b| -> Result<Vec<f64>, String> {
            match block_on(cpu.read(b)).map_err(err)? {
                HostData::F32(v) => Ok(f64s(&v)),
                other => Err(format!("unexpected dtype {}", other.dtype())),
            }
        };
        let moments = every([
            all_close(
                &format!("m after step {step}"),
                &f64s(&m),
                &read(&m_dev)?,
                1e-5,
                1e-9,
            ),
            all_close(
                &format!("v after step {step}"),
                &f64s(&v),
                &read(&v_dev)?,
                1e-5,
                1e-12,
            ),
        ]);
        let params = all_close(
            &format!("param after step {step}"),
            &f64s(&param),
            &read(&p_dev)?,
            1e-5,
            1e-7,
        );
        // Right moments and a wrong parameter: the step itself, most often the bias
        // correction or where the decay enters.
        let slip = moments.is_ok() && params.is_err();
        every([
            moments,
            hint_if(
                params,
                slip,
                "the moments are right, the update is not: are m and v divided by their \
                 bias corrections, and does the decay use the parameter before the step?",
            ),
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
