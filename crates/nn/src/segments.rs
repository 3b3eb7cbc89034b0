//! [`Segments`]: a GPT as the chain of segments that walks of the model share — its
//! blocks, then its head — so that a walker written once (activation recomputation's
//! executor in brrr-checkpoint) drives the one-device [`Gpt`], brrr-tp's shard of it,
//! or a data-parallel engine that gathers a block's parameters before it runs (ZeRO-3).
//!
//! The embeddings are not a segment: every walk starts from the first block's input
//! and ends with its gradient, and what the embeddings need (token ids, packed
//! positions, a tensor-parallel exit) differs by model.

use crate::{CausalSelfAttention, Gpt, MicroBatch, Module};
use brrr_backend::{Backend, Result};
use brrr_tensor::Tensor;

/// A model as a chain: blocks `0..n_blocks()`, then the head (final LayerNorm, tied
/// projection, loss), each run forward and backward on its own, saving under a
/// micro-batch as the whole model's forward does.
pub trait Segments<B: Backend> {
    /// What the head's loss needs besides its input (the targets, in whatever form
    /// this model's loss takes them).
    type Targets: Clone;

    /// The number of blocks.
    fn n_blocks(&self) -> usize;

    /// Block `l` on `x`, saving under `mb`. With `selective` the attention keeps no
    /// scores and recomputes them in its backward (Korthikanti et al. 2022).
    fn block_forward(
        &mut self,
        mb: MicroBatch,
        l: usize,
        x: &Tensor<B>,
        selective: bool,
    ) -> Result<Tensor<B>>;

    /// Block `l`'s backward: the gradient of its input from that of its output,
    /// accumulating its parameters' gradients.
    fn block_backward(&mut self, mb: MicroBatch, l: usize, dy: &Tensor<B>) -> Result<Tensor<B>>;

    /// Drops what block `l` saved for `mb` (its forward will be run again).
    fn block_discard(&mut self, mb: MicroBatch, l: usize) -> Result<()>;

    /// The head on the last block's output: per-position losses `[B, T]`.
    fn head_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Self::Targets,
    ) -> Result<Tensor<B>>;

    /// The head's backward from `Σ losses · dloss`: the gradient of the last block's
    /// output.
    fn head_backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>>;

    /// Drops what the head saved for `mb`.
    fn head_discard(&mut self, mb: MicroBatch) -> Result<()>;

    /// A hint from the walk: `next` runs after the segment about to run. A model whose
    /// parameters live elsewhere (ZeRO-3's shards) may start fetching `next`'s now, so
    /// they arrive while this one computes. The default does nothing.
    fn prefetch(&mut self, next: SegmentId) -> Result<()> {
        let _ = next;
        Ok(())
    }
}

/// A segment of a [`Segments`] chain, as [`Segments::prefetch`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentId {
    /// Block `l`.
    Block(usize),
    /// The head.
    Head,
}

/// The plain forward walk, every activation kept: blocks `0..n` from the first block's
/// input `x0`, then the head's per-position losses. Before each segment runs the model
/// hears which one follows ([`Segments::prefetch`]). Activation recomputation walks the
/// same chain in its own order (brrr-checkpoint's executor).
pub fn forward_loss<B: Backend, M: Segments<B> + ?Sized>(
    model: &mut M,
    mb: MicroBatch,
    x0: Tensor<B>,
    targets: &M::Targets,
) -> Result<Tensor<B>> {
    let n = model.n_blocks();
    let mut x = x0;
    for l in 0..n {
        model.prefetch(match l + 1 < n {
            true => SegmentId::Block(l + 1),
            false => SegmentId::Head,
        })?;
        x = model.block_forward(mb, l, &x, false)?;
    }
    model.head_loss(mb, &x, targets)
}

/// The plain backward walk after [`forward_loss`]: the head from `Σ losses · dloss`,
/// then blocks `n-1..0`; returns the gradient of the first block's input (the
/// embeddings' backward is the caller's, as their forward was).
pub fn backward_to_input<B: Backend, M: Segments<B> + ?Sized>(
    model: &mut M,
    mb: MicroBatch,
    dloss: f32,
) -> Result<Tensor<B>> {
    let n = model.n_blocks();
    if n > 0 {
        model.prefetch(SegmentId::Block(n - 1))?;
    }
    let mut dx = model.head_backward(mb, dloss)?;
    for l in (0..n).rev() {
        if l > 0 {
            model.prefetch(SegmentId::Block(l - 1))?;
        }
        dx = model.block_backward(mb, l, &dx)?;
    }
    Ok(dx)
}

/// Runs `forward` on `layer` with its attention keeping no scores when `selective`
/// (they are recomputed in its backward), then puts the switch back: the block forward
/// of every [`Segments`] implementation.
pub fn forward_selective<B: Backend, L>(
    layer: &mut L,
    attn: fn(&mut L) -> &mut CausalSelfAttention<B>,
    selective: bool,
    forward: impl FnOnce(&mut L) -> Result<Tensor<B>>,
) -> Result<Tensor<B>> {
    attn(layer).recompute_scores = selective;
    let out = forward(layer);
    attn(layer).recompute_scores = false;
    out
}

impl<B: Backend> Segments<B> for Gpt<B> {
    type Targets = Tensor<B>;

    fn n_blocks(&self) -> usize {
        self.h.len()
    }

    fn block_forward(
        &mut self,
        mb: MicroBatch,
        l: usize,
        x: &Tensor<B>,
        selective: bool,
    ) -> Result<Tensor<B>> {
        forward_selective(
            &mut self.h[l],
            |b| &mut b.attn,
            selective,
            |b| b.forward(mb, x),
        )
    }

    fn block_backward(&mut self, mb: MicroBatch, l: usize, dy: &Tensor<B>) -> Result<Tensor<B>> {
        self.h[l].backward(mb, dy)
    }

    fn block_discard(&mut self, mb: MicroBatch, l: usize) -> Result<()> {
        self.h[l].discard_saved(mb)
    }

    fn head_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        self.head_loss_mb(mb, x, targets)
    }

    fn head_backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        self.head_backward_mb(mb, dloss)
    }

    fn head_discard(&mut self, mb: MicroBatch) -> Result<()> {
        self.discard_head(mb)
    }
}
