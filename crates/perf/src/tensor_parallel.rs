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

/// Collectives of tensor parallelism per block and pass (Shoeybi et al. 2019, §3;
/// Korthikanti et al. 2022, §4.2.2), as `brrr_collectives::CommStats` counts them.
/// Calls and logical elements of one collective kind (the all-reduce's buffer, the
/// reduce-scatter's input, the all-gather's output: as `CommStats` counts them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// How many collectives.
    pub calls: u64,
    /// Their logical elements, summed.
    pub elements: u64,
}

impl Count {
    /// Adds `calls` collectives of `elements` each.
    pub fn add(&mut self, calls: u64, elements: u64) {
        self.calls += calls;
        self.elements += calls * elements;
    }
}

/// The collectives of one pass over the tensor-parallel group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassComm {
    /// All-reduces (their buffers).
    pub all_reduce: Count,
    /// Reduce-scatters (their inputs).
    pub reduce_scatter: Count,
    /// All-gathers (their outputs).
    pub all_gather: Count,
}

impl PassComm {
    /// Elements one rank sends for this pass on a ring of `n` ranks: `2(n−1)/n` of an
    /// all-reduce's buffer, `(n−1)/n` of a reduce-scatter's input or an all-gather's
    /// output.
    pub fn ring_elements_sent(&self, n: u64) -> u64 {
        let part = |e: u64| e / n * (n - 1);
        2 * part(self.all_reduce.elements)
            + part(self.reduce_scatter.elements)
            + part(self.all_gather.elements)
    }
}

/// One block's collectives in one pass on activations of `b × t × c`. Forward and
/// backward are alike, except that under sequence parallelism the backward all-gathers
/// the two column-parallel GEMMs' inputs once more: the forward kept only their sequence
/// shards (Korthikanti et al. 2022, §4.2.2, the memory saving that makes sequence
/// parallelism's activations `1/t`), and the weight gradients need all of them.
pub fn block_pass(b: usize, t: usize, c: usize, sp: bool, backward: bool) -> PassComm {
    let act = (b * t * c) as u64;
    let mut p = PassComm::default();
    if sp {
        p.reduce_scatter.add(2, act);
        p.all_gather.add(2, act);
        if backward {
            p.all_gather.add(2, act);
        }
    } else {
        p.all_reduce.add(2, act);
    }
    p
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
