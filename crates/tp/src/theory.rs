//! How many collectives of what size tensor parallelism needs, per block and per pass,
//! in theory: what the tests hold the [`brrr_collectives::CommStats`] of a real step
//! to, and what the book and the browser page quote.
//!
//! Per block and per pass, without sequence parallelism: two all-reduces of the
//! activations `B·T·C` (attention's and the MLP's exit in the forward, their entries in
//! the backward; Shoeybi et al. 2019, §3). With it each all-reduce becomes a
//! reduce-scatter plus an all-gather of the same size (Korthikanti et al. 2022, §4.2.2),
//! which on a ring moves the same bytes: `2(n−1)/n · B·T·C` per rank either way. The
//! backward under sequence parallelism adds one all-gather per column-parallel GEMM
//! (two per block) to rebuild the input the forward kept only a shard of: Megatron-LM
//! does the same, overlapped with the input-gradient GEMM.

use brrr_nn::GptConfig;

/// Calls and logical elements of one collective kind (the all-reduce's buffer, the
/// reduce-scatter's input, the all-gather's output: as `CommStats` counts them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    pub calls: u64,
    pub elements: u64,
}

impl Count {
    fn add(&mut self, calls: u64, elements: u64) {
        self.calls += calls;
        self.elements += calls * elements;
    }
}

/// The collectives of one pass over the tensor-parallel group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassComm {
    pub all_reduce: Count,
    pub reduce_scatter: Count,
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

/// A whole model's forward and backward: every block, plus the vocabulary-parallel
/// embedding's exit (forward; its backward under sequence parallelism), the head's
/// entry (its all-gather forward with sequence parallelism; its backward always), and
/// the cross-entropy's two all-reduces of `N` and `2N` (`N = b·t`). The all-reduce of
/// the replicated gradients under sequence parallelism is not part of a pass.
pub fn model_passes(model: &GptConfig, b: usize, t: usize, sp: bool) -> (PassComm, PassComm) {
    let act = (b * t * model.n_embd) as u64;
    let n = (b * t) as u64;
    let layers = model.n_layer as u64;
    let (block_f, block_b) = (
        block_pass(b, t, model.n_embd, sp, false),
        block_pass(b, t, model.n_embd, sp, true),
    );
    let scale = |p: PassComm| PassComm {
        all_reduce: Count {
            calls: p.all_reduce.calls * layers,
            elements: p.all_reduce.elements * layers,
        },
        reduce_scatter: Count {
            calls: p.reduce_scatter.calls * layers,
            elements: p.reduce_scatter.elements * layers,
        },
        all_gather: Count {
            calls: p.all_gather.calls * layers,
            elements: p.all_gather.elements * layers,
        },
    };
    let (mut fwd, mut bwd) = (scale(block_f), scale(block_b));
    fwd.all_reduce.add(1, n);
    fwd.all_reduce.add(1, 2 * n);
    if sp {
        fwd.reduce_scatter.add(1, act); // embedding exit
        fwd.all_gather.add(1, act); // head entry
        bwd.all_gather.add(1, act); // embedding exit
        bwd.reduce_scatter.add(1, act); // head entry
    } else {
        fwd.all_reduce.add(1, act); // embedding exit
        bwd.all_reduce.add(1, act); // head entry
    }
    (fwd, bwd)
}
