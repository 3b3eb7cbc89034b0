//! [`DpConfig`]: the data-parallel layout of a run (everything else is the
//! [`brrr_train::TrainConfig`]).

use crate::bucket::{DEFAULT_BUCKET_BYTES, DEFAULT_FIRST_BUCKET_BYTES};
use brrr_backend::{Error, Result};
use serde::{Deserialize, Serialize};

/// How a data-parallel run is laid out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DpConfig {
    /// Data-parallel ranks (`--dp`).
    pub world: usize,
    /// ZeRO stage (`--zero`): 0 = DDP (everything replicated), 1 = optimizer moments
    /// sharded, 2 = + gradients sharded, 3 = + parameters sharded (FSDP).
    pub zero: u8,
    /// Gradient bucket size in bytes (`--bucket-mb`), stages 0-2.
    pub bucket_bytes: usize,
    /// The first (last parameters') bucket, smaller so communication starts early.
    pub first_bucket_bytes: usize,
}

impl Default for DpConfig {
    /// One rank, DDP, PyTorch's bucket sizes (25 MiB, first 1 MiB).
    fn default() -> Self {
        DpConfig {
            world: 1,
            zero: 0,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            first_bucket_bytes: DEFAULT_FIRST_BUCKET_BYTES,
        }
    }
}

impl DpConfig {
    /// `world` ranks at ZeRO stage `zero` with the default buckets.
    pub fn new(world: usize, zero: u8) -> Self {
        DpConfig {
            world,
            zero,
            ..DpConfig::default()
        }
    }

    /// The data-parallel part of a run's layout: `--dp`, `--zero`, and `--bucket-mb`
    /// (the first bucket no larger than it).
    pub fn of(config: &brrr_train::TrainConfig) -> Self {
        let mut dp = DpConfig::new(config.layout.dp, config.layout.zero);
        if config.layout.bucket_mb.is_some() {
            dp.bucket_bytes = bucket_bytes(config);
            dp.first_bucket_bytes = dp.first_bucket_bytes.min(dp.bucket_bytes).max(1);
        }
        dp
    }

    /// Checks the fields; errors name the `brrr train` flag.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid("dp", m));
        if self.world == 0 {
            return bad("--dp must be at least 1".into());
        }
        if self.zero > 3 {
            return bad(format!("--zero must be 0, 1, 2 or 3, got {}", self.zero));
        }
        if self.bucket_bytes == 0 || self.first_bucket_bytes == 0 {
            return bad(format!(
                "--bucket-mb must be positive (bucket {} B, first bucket {} B)",
                self.bucket_bytes, self.first_bucket_bytes
            ));
        }
        Ok(())
    }

    /// Checks this layout against the run: the global batch must split evenly over the
    /// ranks. Mixed precision (`--amp`) and activation recomputation (`--checkpoint`) run
    /// at every stage.
    pub fn validate_for(&self, train: &brrr_train::TrainConfig) -> Result<()> {
        self.validate()?;
        train.validate()?;
        if !train.batch_size.is_multiple_of(self.world) {
            return Err(Error::invalid(
                "dp",
                format!(
                    "--batch-size {} (the global batch) must be a multiple of --dp {}",
                    train.batch_size, self.world
                ),
            ));
        }
        Ok(())
    }
}

/// The gradient bucket of a run: `--bucket-mb` in bytes, or PyTorch DDP's 25 MiB.
pub fn bucket_bytes(config: &brrr_train::TrainConfig) -> usize {
    match config.layout.bucket_mb {
        Some(mb) => ((mb * (1u64 << 20) as f64) as usize).max(1),
        None => DEFAULT_BUCKET_BYTES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_flag() {
        assert!(DpConfig::new(4, 3).validate().is_ok());
        let e = DpConfig::new(0, 0).validate().unwrap_err().to_string();
        assert!(e.contains("--dp"), "{e}");
        let e = DpConfig::new(2, 4).validate().unwrap_err().to_string();
        assert!(e.contains("--zero"), "{e}");
        let t = brrr_train::TrainConfig {
            batch_size: 6,
            ..Default::default()
        };
        let e = DpConfig::new(4, 0)
            .validate_for(&t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--batch-size"), "{e}");
    }
}
