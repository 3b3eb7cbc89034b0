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
/// Re-exported from brrr-perf, where the browser page computes them too.
pub use brrr_perf::tensor_parallel::{Count, PassComm, block_pass};

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
