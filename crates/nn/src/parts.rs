//! The parts a pipeline stage is built from: the embeddings ([`EmbeddingPart`]), the
//! transformer blocks ([`BlockPart`], held in a [`BlocksStage`](crate::BlocksStage)),
//! and the head ([`HeadPart`]). brrr-nn's whole layers implement them, and a
//! tensor-parallel crate's shards of those layers implement them too, so a pipeline
//! executor holds `Box<dyn …Part>` and drives either kind with the same calls: the
//! walk over the model is written once, here and in [`crate::Segments`], instead of once
//! per kind of layer.
//!
//! Every part offers the fused backward and the zero-bubble split of it (Qi et al.,
//! "Zero Bubble Pipeline Parallelism", 2023): `backward_input` ("B", the input
//! gradient, weight gradients deferred) then `backward_weight` ("W"), which together
//! give the fused backward's gradients bit for bit.

use crate::{Block, CausalSelfAttention, EmbeddingStage, HeadStage, MicroBatch, Module, Param};
use brrr_backend::{Backend, Result};
use brrr_tensor::Tensor;

/// One transformer block, `[B, T, C] -> [B, T, C]` (or this rank's shard of the
/// residual stream), saving under a micro-batch: brrr-nn's [`Block`] or a
/// tensor-parallel shard of one.
pub trait BlockPart<B: Backend>: Module<B> {
    /// The block on `x`, saving under `mb`.
    fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>>;
    /// The fused backward: the gradient of the input, weight gradients accumulated.
    fn backward(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>>;
    /// The zero-bubble "B": the input gradient, projection weight gradients deferred.
    fn backward_input(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>>;
    /// The zero-bubble "W": the deferred weight gradients of `mb`.
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()>;
    /// The block's attention (all heads, or this rank's): where a walk sets the
    /// document mask and selective recomputation.
    fn attn_mut(&mut self) -> &mut CausalSelfAttention<B>;
}

/// The first part: token ids `[B, T]` to the residual stream.
pub trait EmbeddingPart<B: Backend>: Module<B> {
    /// Ids `[B, T]` (u32) at `positions` (u32 `[B, T]`, restarting at each packed
    /// document; `None` is `0..T`) to the residual stream, saving under `mb`.
    fn forward(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        positions: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>>;
    /// Scatter-adds the residual stream's gradient into the tables.
    fn backward(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()>;
    /// The token embedding, tied to the head (the whole table or a shard of rows).
    fn tied_mut(&mut self) -> &mut Param<B>;
}

/// The last part: final LayerNorm, the projection tied to the token embedding, and the
/// per-position cross-entropy.
pub trait HeadPart<B: Backend>: Module<B> {
    /// Per-position losses `[B, T]` of the residual stream `x` against i32 `targets`.
    fn forward_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>>;
    /// The fused backward from `Σ losses · dloss`: the gradient of the head's input.
    fn backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>>;
    /// The zero-bubble "B": the tied projection's weight gradient deferred.
    fn backward_input(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>>;
    /// The zero-bubble "W": the tied projection's weight gradient of `mb`.
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()>;
    /// The head's copy of the tied weight (the whole matrix or a shard of rows).
    fn tied(&self) -> &Param<B>;
    /// [`HeadPart::tied`], writable.
    fn tied_mut(&mut self) -> &mut Param<B>;
}

impl<B: Backend> BlockPart<B> for Block<B> {
    fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        Block::forward(self, mb, x)
    }
    fn backward(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        Block::backward(self, mb, dout)
    }
    fn backward_input(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        Block::backward_input(self, mb, dout)
    }
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        Block::backward_weight(self, mb)
    }
    fn attn_mut(&mut self) -> &mut CausalSelfAttention<B> {
        &mut self.attn
    }
}

/// A boxed block is a block: a pipeline stage holds `BlocksStage<B, Box<dyn BlockPart<B>>>`
/// whichever kind of block it was built with.
impl<B: Backend> BlockPart<B> for Box<dyn BlockPart<B>> {
    fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        (**self).forward(mb, x)
    }
    fn backward(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        (**self).backward(mb, dout)
    }
    fn backward_input(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        (**self).backward_input(mb, dout)
    }
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        (**self).backward_weight(mb)
    }
    fn attn_mut(&mut self) -> &mut CausalSelfAttention<B> {
        (**self).attn_mut()
    }
}

impl<B: Backend> Module<B> for Box<dyn BlockPart<B>> {
    fn params(&self) -> Vec<&Param<B>> {
        (**self).params()
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        (**self).params_mut()
    }
    fn clear_saved(&mut self) {
        (**self).clear_saved()
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        (**self).discard_saved(mb)
    }
}

impl<B: Backend> EmbeddingPart<B> for EmbeddingStage<B> {
    fn forward(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        positions: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        self.forward_packed(mb, ids, positions)
    }
    fn backward(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()> {
        EmbeddingStage::backward(self, mb, dx)
    }
    fn tied_mut(&mut self) -> &mut Param<B> {
        &mut self.wte.weight
    }
}

impl<B: Backend> HeadPart<B> for HeadStage<B> {
    fn forward_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        HeadStage::forward_loss(self, mb, x, targets)
    }
    fn backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        HeadStage::backward(self, mb, dloss)
    }
    fn backward_input(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        HeadStage::backward_input(self, mb, dloss)
    }
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        HeadStage::backward_weight(self, mb)
    }
    fn tied(&self) -> &Param<B> {
        &self.wte
    }
    fn tied_mut(&mut self) -> &mut Param<B> {
        &mut self.wte
    }
}

/// Runs `blocks` in order on `x`, saving under `mb`; with `segments` (u32 `[B, T]`)
/// attention stays inside each packed document, and the mask is taken off again
/// afterwards, also on an error. The forward walk over blocks that [`crate::Gpt`], the
/// stages and a tensor-parallel crate's model share.
pub fn forward_blocks<B: Backend, L: BlockPart<B>>(
    blocks: &mut [L],
    mb: MicroBatch,
    x: Tensor<B>,
    segments: Option<&Tensor<B>>,
) -> Result<Tensor<B>> {
    crate::stage::with_segments(blocks, L::attn_mut, segments, |h| {
        let mut x = x;
        for block in h.iter_mut() {
            x = block.forward(mb, &x)?;
        }
        Ok(x)
    })
}

/// The backward of `blocks` in reverse order from the gradient of the last one's
/// output: the gradient of the first one's input. `input_only`: each block's
/// zero-bubble B (weight gradients deferred to [`backward_weight_blocks`]).
pub fn backward_blocks<B: Backend, L: BlockPart<B>>(
    blocks: &mut [L],
    mb: MicroBatch,
    dy: Tensor<B>,
    input_only: bool,
) -> Result<Tensor<B>> {
    let mut dx = dy;
    for block in blocks.iter_mut().rev() {
        dx = match input_only {
            true => block.backward_input(mb, &dx)?,
            false => block.backward(mb, &dx)?,
        };
    }
    Ok(dx)
}

/// The zero-bubble W of `blocks` (in the backward's order, last block first): the
/// weight gradients [`backward_blocks`] with `input_only` deferred.
pub fn backward_weight_blocks<B: Backend, L: BlockPart<B>>(
    blocks: &mut [L],
    mb: MicroBatch,
) -> Result<()> {
    for block in blocks.iter_mut().rev() {
        block.backward_weight(mb)?;
    }
    Ok(())
}
