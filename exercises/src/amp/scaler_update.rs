//! # The dynamic loss scaler's update rule
//!
//! After every optimizer step the loss scale is updated from one flag, "some gradient
//! was inf or NaN" (PyTorch's `GradScaler`, with Megatron-LM's hysteresis and minimum):
//!
//! - overflow: the clean-step count restarts at 0; the overflow count (since the scale
//!   last grew) goes up by one, and if it has reached `hysteresis`, the scale is
//!   multiplied by `backoff`, but never below `min_scale`;
//! - clean step: the clean-step count goes up by one; when it reaches `interval`, the
//!   scale is multiplied by `growth` (if the result is finite) and both counts restart
//!   at 0.
//!
//! Return the state after one step. Checked against brrr-cpu's `update_loss_scale`
//! kernel over random sequences of clean and overflowing steps.
//!
//! About 18 lines.
//!
//! ## Hint
//!
//! Two branches, overflow or clean. Keep the three fields (scale, clean steps,
//! overflows) and change them in the order the rules give; the minimum applies only
//! when backing off, and growth only when the grown scale is finite.

use crate::check::{Outcome, rng, with_seed};
use brrr_backend::{Backend, HostData, ScaleUpdateParams, block_on};
use brrr_cpu::CpuBackend;
use rand::Rng;

/// The scaler's state between steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaleState {
    pub scale: f32,
    /// Clean steps in a row.
    pub clean: i32,
    /// Overflows since the scale last grew.
    pub overflows: i32,
}

/// YOUR CODE: the state after a step that did (`found_inf`) or did not overflow.
#[cfg(not(feature = "solutions"))]
pub fn update(s: ScaleState, found_inf: bool, p: &ScaleUpdateParams) -> ScaleState {
    let _ = (found_inf, p);
    s
}

#[cfg(feature = "solutions")]
pub use solution::update;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/amp/scaler_update.rs"]
pub mod solution;

/// Against the kernel over random runs.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let cpu = CpuBackend::new();
    let err = |e: brrr_backend::Error| e.to_string();
    for run in 0..20 {
        let p = ScaleUpdateParams {
            growth_interval: rng.random_range(1..6),
            hysteresis: rng.random_range(2..4),
            min_scale: [0.0, 1.0, 1024.0][run % 3],
            ..ScaleUpdateParams::default()
        };
        let mut s = ScaleState {
            scale: 65536.0,
            clean: 0,
            overflows: 0,
        };
        let mut scale = cpu.upload(&HostData::F32(vec![s.scale])).map_err(err)?;
        let mut tracker = cpu.upload(&HostData::I32(vec![0, 0])).map_err(err)?;
        let p_inf = rng.random_range(0.1..0.9);
        for step in 0..60 {
            let inf = rng.random_bool(p_inf);
            let flag = cpu
                .upload(&HostData::F32(vec![f32::from(u8::from(inf))]))
                .map_err(err)?;
            cpu.update_loss_scale(&p, &mut scale, &mut tracker, &flag)
                .map_err(err)?;
            s = update(s, inf, &p);
            let want_scale = block_on(cpu.read(&scale)).map_err(err)?.to_f64()[0] as f32;
            let want_t = block_on(cpu.read(&tracker)).map_err(err)?.to_f64();
            let want = ScaleState {
                scale: want_scale,
                clean: want_t[0] as i32,
                overflows: want_t[1] as i32,
            };
            if s != want {
                return Err(format!(
                    "{p:?}, step {step} ({}): got {s:?}, expected {want:?}",
                    if inf { "overflow" } else { "clean" }
                ));
            }
        }
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
