//! The two ends of a tensor-parallel GPT, written once for [`crate::TpGpt`] and the
//! pipeline's [`crate::TpEmbeddingStage`] and [`crate::TpHeadStage`]: the
//! vocabulary-parallel embedding with the positional table, and the head (final
//! LayerNorm, this rank's vocabulary columns of the logits against its rows of the tied
//! embedding, the vocabulary-parallel cross-entropy). The model ties the head to its own
//! embedding table; a pipeline's last stage holds a copy of those rows, whose gradient
//! it exchanges with the first stage. So these functions take the tables they use.

use crate::comm::{RegionEntry, RegionExit};
use crate::model::rank_positions;
use crate::vocab::{VocabParallelEmbedding, VocabParallelLoss, vocab_parallel_cross_entropy};
use brrr_backend::{Backend, Result};
use brrr_collectives::Communicator;
use brrr_nn::{Embedding, LayerNorm, MicroBatch};
use brrr_tensor::Tensor;

/// The group a piece is sliced over, and whether the residual stream between the
/// tensor-parallel regions is a sequence shard.
#[derive(Clone, Copy)]
pub(crate) struct Region<'a> {
    pub(crate) comm: &'a Communicator,
    pub(crate) sp: bool,
}

/// Token ids (host, `[B, T]` row-major) at `positions` (`0..T`, or packed documents'
/// own) to this rank's part of the residual stream: the partial token lookups summed
/// (or reduce-scattered over the sequence) by the region's exit, plus the positions'
/// rows of the replicated table. Saves under `mb`.
pub(crate) fn embed<B: Backend>(
    (wte, wpe): (&mut VocabParallelEmbedding<B>, &mut Embedding<B>),
    region: Region<'_>,
    mb: MicroBatch,
    ids: &[u32],
    (b, t): (usize, usize),
    positions: Option<&[u32]>,
) -> Result<Tensor<B>> {
    let exit = RegionExit::for_sequence_parallel(region.sp);
    let tok = exit.forward(region.comm, &wte.forward(mb, ids, [b, t])?)?;
    let pos = rank_positions(region.comm, region.sp, (b, t), positions)?;
    let pos = Tensor::from_u32(tok.backend(), &pos, [b, pos.len() / b.max(1)])?;
    tok.add(&wpe.forward(mb, &pos)?)
}

/// [`embed`]'s backward: scatter-adds the gradient of this rank's part of the residual
/// stream into the positional table and (after the exit's backward) into this rank's
/// vocabulary rows.
pub(crate) fn embed_backward<B: Backend>(
    (wte, wpe): (&mut VocabParallelEmbedding<B>, &mut Embedding<B>),
    region: Region<'_>,
    mb: MicroBatch,
    dx: &Tensor<B>,
) -> Result<()> {
    wpe.backward(mb, dx)?;
    let exit = RegionExit::for_sequence_parallel(region.sp);
    wte.backward(mb, &exit.backward(region.comm, dx)?)
}

/// What the head keeps between its forward and backward.
pub(crate) struct HeadSaved<B: Backend> {
    /// ln_f's output over the whole sequence, `[B·T, C]`.
    x_final: Tensor<B>,
    loss: VocabParallelLoss<B>,
    /// `[B, T]` of the whole sequence.
    bt: (usize, usize),
}

/// The head on this rank's part of the residual stream `x`, against `targets` (host,
/// `[B, T]`): per-position losses `[B, T]`, the same on every rank, and what the
/// backward needs. `wte` holds this rank's vocabulary rows `[V/n, C]`, the first being
/// row `start`; `ln_f` saves under `mb`.
pub(crate) fn head_forward<B: Backend>(
    ln_f: &mut LayerNorm<B>,
    (wte, start): (&Tensor<B>, usize),
    region: Region<'_>,
    mb: MicroBatch,
    x: &Tensor<B>,
    targets: &[u32],
) -> Result<(Tensor<B>, HeadSaved<B>)> {
    let b = x.dims()[0];
    let t = targets.len() / b.max(1);
    let c = wte.dims()[1];
    let entry = RegionEntry::for_sequence_parallel(region.sp);
    let x_final = entry
        .forward(region.comm, &ln_f.forward(mb, x)?)?
        .reshape([b * t, c])?;
    let logits = x_final.matmul(&wte.transpose(0, 1)?)?;
    let loss = vocab_parallel_cross_entropy(region.comm, &logits, targets, start)?;
    let losses = loss.losses.reshape([b, t])?;
    let saved = HeadSaved {
        x_final,
        loss,
        bt: (b, t),
    };
    Ok((losses, saved))
}

/// The tied rows' weight gradient, `grad += dlogitsᵀ · x_final`: what the head's
/// backward adds at once, or (zero bubble) its "W" later.
pub(crate) type TiedGrad<B> = (Tensor<B>, Tensor<B>);

/// The head's backward from `Σ losses · dloss`, up to the rank's partial input
/// gradient `dx = dlogits · wte_r` `[B, T, C]`; returns it and the tied rows' pending
/// weight gradient.
pub(crate) fn head_backward<B: Backend>(
    saved: HeadSaved<B>,
    wte: &Tensor<B>,
    dloss: f32,
) -> Result<(Tensor<B>, TiedGrad<B>)> {
    let (b, t) = saved.bt;
    let dlogits = saved.loss.backward(dloss)?; // [B·T, V/n]
    let dx = dlogits.matmul(wte)?.reshape([b, t, wte.dims()[1]])?;
    Ok((dx, (dlogits, saved.x_final)))
}

/// Adds a [`TiedGrad`] into the tied rows' gradient.
pub(crate) fn add_tied_grad<B: Backend>(
    grad: &mut Tensor<B>,
    (dlogits, x_final): TiedGrad<B>,
) -> Result<()> {
    Tensor::matmul_into(grad, &dlogits.transpose(0, 1)?, &x_final, 1.0, 1.0)
}

/// The rest of the head's backward: the entry's backward (the sum, or reduce-scatter,
/// of the ranks' partial `dx`), then ln_f's; the gradient of this rank's part of the
/// head's input.
pub(crate) fn head_backward_input<B: Backend>(
    ln_f: &mut LayerNorm<B>,
    region: Region<'_>,
    mb: MicroBatch,
    dx: &Tensor<B>,
) -> Result<Tensor<B>> {
    let entry = RegionEntry::for_sequence_parallel(region.sp);
    ln_f.backward(mb, &entry.backward(region.comm, dx)?)
}
