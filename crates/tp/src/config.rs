//! The tensor-parallel configuration and the checks of a `dp × tp × pp` grid against a
//! model, a batch and a world, each with an error that says what does not divide.

use brrr_backend::{Error, Result};
use brrr_collectives::ParallelLayout;
use brrr_nn::GptConfig;
use brrr_train::TrainConfig;
use serde::{Deserialize, Serialize};

/// How a run splits each layer: `tp` ranks per tensor-parallel group, and whether the
/// residual stream between the tensor-parallel regions is split over the sequence too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TpConfig {
    /// Tensor-parallel degree (1: off).
    pub tp: usize,
    /// Sequence parallelism (Korthikanti et al. 2022).
    #[serde(default)]
    pub sp: bool,
}

impl Default for TpConfig {
    fn default() -> Self {
        TpConfig { tp: 1, sp: false }
    }
}

fn bad(msg: String) -> Error {
    Error::invalid("tensor parallelism", msg)
}

/// Checks that `tp` ranks can split `model`: heads and vocabulary divide by `tp`.
pub fn check_model(model: &GptConfig, tp: usize) -> Result<()> {
    if tp == 0 {
        return Err(bad("--tp must be at least 1".into()));
    }
    if !model.n_head.is_multiple_of(tp) {
        return Err(bad(format!(
            "--tp {tp}: the {} attention heads do not divide by {tp} ranks",
            model.n_head
        )));
    }
    if !model.vocab_size.is_multiple_of(tp) {
        return Err(bad(format!(
            "--tp {tp}: the vocabulary of {} does not divide by {tp} ranks",
            model.vocab_size
        )));
    }
    Ok(())
}

impl TpConfig {
    /// Checks this configuration within the grid `layout` of a world of `world` ranks
    /// for the run `cfg`: the grid fits the world exactly; heads and vocabulary divide
    /// by `tp`; layers by `pp`; the batch by `dp`; with sequence parallelism the
    /// sequence by `tp`.
    pub fn validate(&self, layout: ParallelLayout, world: usize, cfg: &TrainConfig) -> Result<()> {
        if layout.tp != self.tp {
            return Err(bad(format!("layout tp {} but --tp {}", layout.tp, self.tp)));
        }
        validate_layout(layout, world, &cfg.model, cfg.batch_size)?;
        if self.sp && !cfg.seq_len.is_multiple_of(self.tp) {
            return Err(bad(format!(
                "--sp: the sequence length {} does not divide by --tp {}",
                cfg.seq_len, self.tp
            )));
        }
        Ok(())
    }
}

/// Checks a `dp × tp × pp` grid for a world of `world` ranks, a model and a global
/// batch of `batch` sequences.
pub fn validate_layout(
    layout: ParallelLayout,
    world: usize,
    model: &GptConfig,
    batch: usize,
) -> Result<()> {
    let ParallelLayout { dp, tp, pp } = layout;
    if dp == 0 || pp == 0 {
        return Err(bad(format!("every degree must be at least 1: {layout:?}")));
    }
    let size = dp
        .checked_mul(tp)
        .and_then(|x| x.checked_mul(pp))
        .ok_or_else(|| bad(format!("dp {dp} × tp {tp} × pp {pp} overflows")))?;
    if size > world {
        return Err(bad(format!(
            "the grid dp {dp} × tp {tp} × pp {pp} = {size} ranks is larger than the world of {world}"
        )));
    }
    if size != world {
        return Err(bad(format!(
            "the grid dp {dp} × tp {tp} × pp {pp} = {size} ranks leaves {} of the world of {world} idle",
            world - size
        )));
    }
    check_model(model, tp)?;
    if !model.n_layer.is_multiple_of(pp) {
        return Err(bad(format!(
            "the {} layers do not divide by {pp} pipeline stages",
            model.n_layer
        )));
    }
    if batch == 0 || !batch.is_multiple_of(dp) {
        return Err(bad(format!(
            "the batch of {batch} sequences does not divide by {dp} data-parallel ranks"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> GptConfig {
        GptConfig {
            vocab_size: 64,
            block_size: 16,
            n_layer: 2,
            n_head: 4,
            n_embd: 32,
        }
    }

    fn layout(dp: usize, tp: usize, pp: usize) -> ParallelLayout {
        ParallelLayout { dp, tp, pp }
    }

    #[test]
    fn each_indivisible_size_is_named() {
        let m = model();
        let err = |l, w, b| validate_layout(l, w, &m, b).unwrap_err().to_string();
        assert!(err(layout(1, 8, 1), 8, 8).contains("heads"));
        let odd_vocab = GptConfig {
            vocab_size: 65,
            ..m.clone()
        };
        let e = validate_layout(layout(1, 2, 1), 2, &odd_vocab, 8).unwrap_err();
        assert!(e.to_string().contains("vocabulary"), "{e}");
        assert!(err(layout(1, 1, 4), 4, 8).contains("layers"));
        assert!(err(layout(3, 1, 1), 3, 8).contains("batch"));
        assert!(err(layout(2, 2, 1), 2, 8).contains("larger than the world"));
        assert!(err(layout(1, 2, 1), 4, 8).contains("idle"));
        validate_layout(layout(2, 2, 2), 8, &m, 8).unwrap();
    }

    #[test]
    fn sequence_parallel_needs_the_sequence_to_divide() {
        let cfg = TrainConfig {
            model: model(),
            seq_len: 6,
            batch_size: 4,
            ..TrainConfig::default()
        };
        let tp = TpConfig { tp: 4, sp: true };
        let e = tp.validate(layout(1, 4, 1), 4, &cfg).unwrap_err();
        assert!(e.to_string().contains("sequence length 6"), "{e}");
        TpConfig { tp: 2, sp: true }
            .validate(layout(1, 2, 1), 2, &cfg)
            .unwrap();
    }
}
