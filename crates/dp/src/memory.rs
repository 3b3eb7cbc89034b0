//! The model-state memory a rank should hold, from `brrr-perf`'s ZeRO formula, for the
//! f32 training this crate runs (4-byte weights and gradients, 8 bytes of AdamW moments
//! per parameter, no master copy).

use crate::bucket::padded_len;
use brrr_backend::{Error, Result};
use brrr_perf::memory::{ModelStates, Optimizer, Precision, model_state_bytes};

/// `brrr-perf`'s estimate of one rank's model-state bytes for `params` parameters at
/// ZeRO `stage` over `world` ranks.
pub fn estimate_model_states(params: usize, stage: u8, world: usize) -> Result<ModelStates> {
    model_state_bytes(
        params as f64,
        Precision::Fp32,
        Optimizer::Adam,
        stage,
        world as u64,
    )
    .map_err(|e| Error::invalid("dp memory estimate", e.to_string()))
}

/// The elements the sharded buffers really hold: every bucket padded to a multiple of
/// `world` (what the estimate ignores; a few elements per bucket).
pub fn padded_elems(buckets: &[crate::Bucket], world: usize) -> usize {
    buckets.iter().map(|b| padded_len(b.len(), world)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assign_buckets;

    #[test]
    fn padding_is_below_the_world_size_per_bucket() {
        let b = assign_buckets(&[10, 7, 3], 4, 40, 40).unwrap();
        assert_eq!(b.len(), 2); // [7, 3] then [10]
        assert_eq!(padded_elems(&b, 4), 12 + 12);
        let est = estimate_model_states(1000, 3, 4).unwrap().total();
        assert_eq!(est, 16.0 * 1000.0 / 4.0);
    }
}
