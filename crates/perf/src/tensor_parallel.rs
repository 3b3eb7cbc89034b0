//! Per-rank memory of a tensor-parallel (and sequence-parallel) GPT as brrr trains it:
//! f32 activations, no dropout. Korthikanti et al. 2022 (Table 2) count `34·sbh` bytes
//! per layer for 16-bit activations with dropout masks; without dropout and counting
//! elements the same items are `16·sbh + a·s²·b` (see [`activation_elements_per_layer`]).
//! The estimates of [`crate::memory`] keep the paper's accounting; these are the ones a
//! run of `brrr train --tp` is measured against.

use crate::error::{Result, at_least_one, divides};
use crate::memory::TransformerConfig;

/// Activation elements one transformer layer keeps for its backward on one
/// tensor-parallel rank, for micro-batch `b` (no dropout, no recomputation):
///
/// | layout | elements per layer |
/// |---|---|
/// | one device | `sbh·16 + a·s²·b` |
/// | tensor parallel `t` | `sbh·(4 + 12/t) + a·s²·b/t` |
/// | tensor + sequence parallel | `sbh·16/t + a·s²·b/t` |
///
/// The 16: the two LayerNorm inputs and outputs (4, replicated under tensor
/// parallelism: they are the inputs of the column-parallel GEMMs), q, k, v (3),
/// attention's output (1), the MLP's GELU input and output (8); `a·s²·b` the softmax
/// probabilities. Sequence parallelism keeps the replicated four as sequence shards
/// (the GEMM inputs are gathered again in the backward). The per-row LayerNorm
/// statistics (`4·sb`) are left out.
pub fn activation_elements_per_layer(
    cfg: &TransformerConfig,
    micro_batch: u64,
    tp: u64,
    sequence_parallel: bool,
) -> Result<f64> {
    cfg.validate()?;
    at_least_one("micro-batch size", micro_batch)?;
    divides("attention heads", cfg.heads, "tensor parallel degree", tp)?;
    let (s, b, h, a, t) = (
        cfg.seq_len as f64,
        micro_batch as f64,
        cfg.hidden as f64,
        cfg.heads as f64,
        tp as f64,
    );
    let sbh = s * b * h;
    let attention = a * s * s * b / t;
    Ok(if sequence_parallel {
        sbh * 16.0 / t + attention
    } else {
        sbh * (4.0 + 12.0 / t) + attention
    })
}

/// Elements the head keeps for its backward on one rank: the final LayerNorm's input
/// (`sbh`, or `sbh/t` as a sequence shard), its gathered output (`sbh`), and the
/// vocabulary-parallel cross-entropy's `exp(logits − max)` and target indicator
/// (`2·sb·V/t`).
pub fn head_activation_elements(
    cfg: &TransformerConfig,
    micro_batch: u64,
    tp: u64,
    sequence_parallel: bool,
) -> Result<f64> {
    cfg.validate()?;
    at_least_one("micro-batch size", micro_batch)?;
    at_least_one("tensor parallel degree", tp)?;
    let (s, b, h, v, t) = (
        cfg.seq_len as f64,
        micro_batch as f64,
        cfg.hidden as f64,
        cfg.vocab as f64,
        tp as f64,
    );
    let ln_input = if sequence_parallel {
        s * b * h / t
    } else {
        s * b * h
    };
    Ok(ln_input + s * b * h + 2.0 * s * b * v / t)
}

/// Parameters one tensor-parallel rank holds: every layer's shard, the
/// vocabulary-parallel embedding, the replicated positions and final LayerNorm.
pub fn params_per_rank(cfg: &TransformerConfig, tp: u64) -> Result<f64> {
    cfg.validate()?;
    divides("attention heads", cfg.heads, "tensor parallel degree", tp)?;
    Ok(cfg.layers as f64 * cfg.layer_params(tp) + cfg.embedding_params(tp) + cfg.head_params(tp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rank_is_the_whole_layer_and_sequence_parallel_divides_everything() {
        let cfg = TransformerConfig::gpt(2, 64, 4, 32, 256);
        let sbh = 32.0 * 2.0 * 64.0;
        let att = 4.0 * 32.0 * 32.0 * 2.0;
        let one = activation_elements_per_layer(&cfg, 2, 1, false).unwrap();
        assert_eq!(one, 16.0 * sbh + att);
        assert_eq!(
            activation_elements_per_layer(&cfg, 2, 1, true).unwrap(),
            one
        );
        let sp4 = activation_elements_per_layer(&cfg, 2, 4, true).unwrap();
        assert_eq!(sp4, one / 4.0);
        let tp4 = activation_elements_per_layer(&cfg, 2, 4, false).unwrap();
        assert_eq!(tp4, sbh * 7.0 + att / 4.0);
        assert!(activation_elements_per_layer(&cfg, 2, 3, false).is_err());
        assert_eq!(params_per_rank(&cfg, 1).unwrap(), cfg.params());
    }
}
