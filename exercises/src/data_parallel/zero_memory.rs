//! # What does each rank hold at each ZeRO stage?
//!
//! f32 training with AdamW keeps, per parameter, 4 bytes of weight, 4 of gradient and 8
//! of moments. Over `n` data-parallel ranks, stage 1 shards the moments, stage 2 also the
//! gradients, stage 3 also the weights (each sharded part is divided by `n`; stage 0,
//! DDP, shards nothing). Return one rank's model-state bytes for `params` parameters.
//!
//! Checked against `brrr_dp::estimate_model_states` (which is `brrr-perf`'s formula) and
//! against what `DataParallel` measures in the chapter's table.

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;

/// YOUR CODE: one rank's model-state bytes at ZeRO `stage` over `world` ranks.
#[cfg(not(feature = "solutions"))]
pub fn model_state_bytes(params: f64, stage: u8, world: u64) -> f64 {
    let _ = (stage, world);
    16.0 * params
}

#[cfg(feature = "solutions")]
pub use solution::model_state_bytes;

/// The reference solution.
pub mod solution {
    /// Weights, gradients and moments, each divided by `world` from the stage that
    /// shards it on (ZeRO, Rajbhandari et al. 2020, Figure 1, with f32 weights).
    pub fn model_state_bytes(params: f64, stage: u8, world: u64) -> f64 {
        let n = world as f64;
        let split = |from: u8| if stage >= from { n } else { 1.0 };
        4.0 * params / split(3) + 4.0 * params / split(2) + 8.0 * params / split(1)
    }
}

/// Against brrr-dp on random sizes, stages and worlds.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..200 {
        let params = rng.random_range(1..10_000_000usize);
        let stage = rng.random_range(0..=3u8);
        let world = rng.random_range(1..=64usize);
        let want = brrr_dp::estimate_model_states(params, stage, world)
            .map_err(|e| e.to_string())?
            .total();
        let got = model_state_bytes(params as f64, stage, world as u64);
        if (got - want).abs() > 1e-6 * want {
            return Err(format!(
                "{params} parameters, stage {stage}, {world} ranks: expected {want} B, got {got} B"
            ));
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
