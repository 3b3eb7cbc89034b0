//! # Model states under mixed precision and ZeRO
//!
//! Mixed-precision training with Adam keeps, per parameter: a 16-bit weight (2 bytes),
//! a 16-bit gradient (2), an f32 master weight (4) and two f32 moments (8): 16 bytes
//! (Rajbhandari et al. 2020, "ZeRO", §3.1). Over `dp` data-parallel GPUs, ZeRO shards
//! them: stage 1 shards the master weights and moments, stage 2 also the gradients,
//! stage 3 also the weights; stage 0 is plain data parallelism (everything replicated).
//!
//! Return the model-state bytes on one GPU. Checked against
//! `brrr_perf::memory::model_state_bytes`.

use crate::check::{Outcome, close, rng, with_seed};
use brrr_perf::memory::{Optimizer, Precision, model_state_bytes};
use rand::Rng;

/// YOUR CODE: bytes of weights, gradients, master weights and Adam moments per GPU.
#[cfg(not(feature = "solutions"))]
pub fn model_state_bytes_per_gpu(params: f64, zero_stage: u8, dp: u64) -> f64 {
    let _ = (zero_stage, dp);
    16.0 * params
}

#[cfg(feature = "solutions")]
pub use solution::model_state_bytes_per_gpu;

/// The reference solution.
pub mod solution {
    /// `2Ψ + 2Ψ + 12Ψ`, each part divided by `dp` from the stage that shards it.
    pub fn model_state_bytes_per_gpu(params: f64, zero_stage: u8, dp: u64) -> f64 {
        let shard = |from: u8| if zero_stage >= from { dp as f64 } else { 1.0 };
        2.0 * params / shard(3) + 2.0 * params / shard(2) + 12.0 * params / shard(1)
    }
}

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
