//! The pipeline's own configuration (the rest comes from the training config).

use crate::schedule::ScheduleKind;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// `--pp N --schedule S --micro-batches M`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PpConfig {
    /// Pipeline stages (ranks).
    pub pp: usize,
    /// `gpipe`, `1f1b`, `interleaved:V`, `zb-h1` or `zb-h2`.
    pub schedule: String,
    /// Micro-batches per optimizer step.
    pub micro_batches: usize,
}

impl PpConfig {
    /// The parsed schedule kind.
    pub fn kind(&self) -> Result<ScheduleKind, String> {
        ScheduleKind::parse(&self.schedule)
    }

    /// Checks the configuration for a model of `n_layer` blocks and a batch of
    /// `batch` rows: at least one stage and micro-batch, at least one block per model
    /// piece, the batch divisible into the micro-batches.
    pub fn validate(&self, n_layer: usize, batch: usize) -> Result<(), String> {
        let kind = self.kind()?;
        if self.pp == 0 {
            return Err("--pp must be at least 1".into());
        }
        if self.micro_batches == 0 {
            return Err("--micro-batches must be at least 1".into());
        }
        let pieces = self.pp * kind.chunks();
        if pieces > n_layer {
            return Err(format!(
                "{} stages × {} chunks = {pieces} model pieces, but the model has only {n_layer} blocks",
                self.pp,
                kind.chunks()
            ));
        }
        if !batch.is_multiple_of(self.micro_batches) {
            return Err(format!(
                "the batch of {batch} rows does not split into {} equal micro-batches",
                self.micro_batches
            ));
        }
        if let ScheduleKind::Interleaved { .. } = kind
            && !self.micro_batches.is_multiple_of(self.pp)
        {
            return Err(format!(
                "interleaved needs --micro-batches ({}) to be a multiple of --pp ({})",
                self.micro_batches, self.pp
            ));
        }
        Ok(())
    }
}

/// `n_layer` blocks split into `pieces` contiguous ranges, as even as possible (the
/// earlier pieces get the extra block).
pub fn split_layers(n_layer: usize, pieces: usize) -> Vec<Range<usize>> {
    let pieces = pieces.max(1);
    let (q, rem) = (n_layer / pieces, n_layer % pieces);
    let mut start = 0;
    (0..pieces)
        .map(|i| {
            let len = q + usize::from(i < rem);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}
