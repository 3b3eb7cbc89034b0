//! # Model states under mixed precision and ZeRO
//!
//! Mixed-precision training with Adam keeps, per parameter, a 16-bit weight, a 16-bit
//! gradient, an f32 master copy of the weight and Adam's two f32 moments (Rajbhandari et al.
//! 2020, "ZeRO", §3.1). Over `dp` data-parallel GPUs, ZeRO stage 1 shards the optimizer's
//! share (master weights and moments), stage 2 also the gradients, stage 3 also the
//! weights; stage 0 is plain data parallelism. How many bytes of model states does one GPU
//! hold?
//!
//! About 5 lines. Checked against `brrr_perf::memory::model_state_bytes`.
//!
//! ## Hint
//!
//! Count the bytes per parameter of each part first (their sum is the famous figure of
//! mixed-precision Adam), then divide each part by `dp` from the stage that shards it on.

use crate::check::{Outcome, close, rng, with_seed};
use brrr_perf::memory::{Optimizer, Precision, model_state_bytes};
use rand::Rng;

/// YOUR CODE: bytes of weights, gradients, master weights and Adam moments per GPU.
#[cfg(not(feature = "solutions"))]
pub fn model_state_bytes_per_gpu(params: f64, zero_stage: u8, dp: u64) -> f64 {
    let _ = (params, zero_stage, dp);
    0.0
}

#[cfg(feature = "solutions")]
pub use solution::model_state_bytes_per_gpu;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/memory/model_states.rs"]
pub mod solution;

/// Against brrr-perf for random sizes, every stage, and data-parallel degrees.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..10 {
        let params = 10f64.powf(rng.random_range(6.0..12.0)).round();
        let dp = rng.random_range(2..1024u64);
        for stage in 0..=3u8 {
            let want = model_state_bytes(params, Precision::Mixed, Optimizer::Adam, stage, dp)
                .map_err(|e| e.to_string())?
                .total();
            let got = model_state_bytes_per_gpu(params, stage, dp);
            close(
                &format!("{params:.3e} params, ZeRO-{stage}, {dp} GPUs"),
                got,
                want,
                1e-12,
            )?;
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
