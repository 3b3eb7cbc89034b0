//! # What does each rank hold at each ZeRO stage?
//!
//! f32 training with AdamW keeps, per parameter, a 4-byte weight, a 4-byte gradient and
//! two 4-byte moments. Over `n` data-parallel ranks, ZeRO stage 1 shards the optimizer
//! states, stage 2 also the gradients, stage 3 also the weights; stage 0 is plain DDP,
//! everything replicated. How many bytes of model states does one rank hold for `params`
//! parameters?
//!
//! About 5 lines. Checked against `brrr_dp::estimate_model_states` (which is brrr-perf's
//! formula) and against what `DataParallel` measures in the chapter's table.
//!
//! ## Hint
//!
//! Write the total as three parts and divide each by `n` from the stage that shards it on.
//! Check yourself: at stage 1 over 4 ranks, 10 parameters take 100 bytes.

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;

/// YOUR CODE: one rank's model-state bytes at ZeRO `stage` over `world` ranks.
#[cfg(not(feature = "solutions"))]
pub fn model_state_bytes(params: f64, stage: u8, world: u64) -> f64 {
    let _ = (params, stage, world);
    0.0
}

#[cfg(feature = "solutions")]
pub use solution::model_state_bytes;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/data_parallel/zero_memory.rs"]
pub mod solution;

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
