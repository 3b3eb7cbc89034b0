//! The pieces a [`crate::PipelineStage`] holds: brrr-nn's single-device stages, or
//! brrr-tp's tensor-parallel slices of them (`--pp P --tp T`). Both kinds offer the same
//! calls (forward, fused backward, the zero-bubble B and W), so the executor drives a
//! stage the same way whichever it holds; these enums only dispatch.

use brrr_backend::{Backend, Result};
use brrr_nn::{
    BlocksStage, CausalSelfAttention, EmbeddingStage, HeadStage, MicroBatch, Module, Param,
};
use brrr_tensor::Tensor;
use brrr_tp::{TpBlocksStage, TpEmbeddingStage, TpHeadStage};

/// The token and position embeddings of the first stage.
pub enum StageEmbedding<B: Backend> {
    /// The whole tables.
    Plain(EmbeddingStage<B>),
    /// This tensor rank's vocabulary rows and the replicated positions.
    Tensor(TpEmbeddingStage<B>),
}

/// A chunk of consecutive blocks.
pub enum StageBlocks<B: Backend> {
    /// Whole blocks.
    Plain(BlocksStage<B>),
    /// This tensor rank's shard of each block.
    Tensor(TpBlocksStage<B>),
}

/// The final LayerNorm, tied head and loss of the last stage.
pub enum StageHead<B: Backend> {
    /// The whole tied matrix.
    Plain(HeadStage<B>),
    /// This tensor rank's vocabulary rows, the vocabulary-parallel loss.
    Tensor(TpHeadStage<B>),
}

impl<B: Backend> StageEmbedding<B> {
    /// Ids `[B, T]` to this rank's part of the residual stream; `positions` (u32
    /// `[B, T]`) restart at each packed document, `None` is `0..T`.
    pub fn forward(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        positions: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        match self {
            StageEmbedding::Plain(e) => e.forward_packed(mb, ids, positions),
            StageEmbedding::Tensor(e) => e.forward_packed(mb, ids, positions),
        }
    }

    /// Scatter-adds the residual stream's gradient into the tables.
    pub fn backward(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()> {
        match self {
            StageEmbedding::Plain(e) => e.backward(mb, dx),
            StageEmbedding::Tensor(e) => e.backward(mb, dx),
        }
    }

    /// The token embedding (tied to the head): the whole table or this rank's rows.
    pub fn tied_mut(&mut self) -> &mut Param<B> {
        match self {
            StageEmbedding::Plain(e) => &mut e.wte.weight,
            StageEmbedding::Tensor(e) => &mut e.wte.weight,
        }
    }
}

impl<B: Backend> StageBlocks<B> {
    /// Runs the blocks in order, saving under `mb`; attention stays inside each
    /// document of `segments` (u32 `[B, T]`) when given.
    pub fn forward(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        segments: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        match self {
            StageBlocks::Plain(s) => s.forward_packed(mb, x, segments),
            StageBlocks::Tensor(s) => s.forward_packed(mb, x, segments),
        }
    }

    /// The fused backward; the gradient of the chunk's input.
    pub fn backward(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        match self {
            StageBlocks::Plain(s) => s.backward(mb, dy),
            StageBlocks::Tensor(s) => s.backward(mb, dy),
        }
    }

    /// The zero-bubble B: the input gradient, weight gradients deferred.
    pub fn backward_input(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        match self {
            StageBlocks::Plain(s) => s.backward_input(mb, dy),
            StageBlocks::Tensor(s) => s.backward_input(mb, dy),
        }
    }

    /// The zero-bubble W: the deferred weight gradients.
    pub fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        match self {
            StageBlocks::Plain(s) => s.backward_weight(mb),
            StageBlocks::Tensor(s) => s.backward_weight(mb),
        }
    }

    /// Each block's attention (whole, or this tensor rank's heads), in order.
    pub fn attentions_mut(&mut self) -> Vec<&mut CausalSelfAttention<B>> {
        match self {
            StageBlocks::Plain(s) => s.h.iter_mut().map(|b| &mut b.attn).collect(),
            StageBlocks::Tensor(s) => s.h.iter_mut().map(|b| &mut b.attn).collect(),
        }
    }
}

impl<B: Backend> StageHead<B> {
    /// Per-position losses `[B, T]` of this rank's part of the residual stream.
    pub fn forward_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        match self {
            StageHead::Plain(h) => h.forward_loss(mb, x, targets),
            StageHead::Tensor(h) => h.forward_loss(mb, x, targets),
        }
    }

    /// The fused backward from `Σ losses · dloss`.
    pub fn backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        match self {
            StageHead::Plain(h) => h.backward(mb, dloss),
            StageHead::Tensor(h) => h.backward(mb, dloss),
        }
    }

    /// The zero-bubble B: the tied projection's weight gradient deferred.
    pub fn backward_input(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        match self {
            StageHead::Plain(h) => h.backward_input(mb, dloss),
            StageHead::Tensor(h) => h.backward_input(mb, dloss),
        }
    }

    /// The zero-bubble W: the tied projection's weight gradient.
    pub fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        match self {
            StageHead::Plain(h) => h.backward_weight(mb),
            StageHead::Tensor(h) => h.backward_weight(mb),
        }
    }

    /// The head's copy of the tied weight (the whole matrix or this rank's rows).
    pub fn tied(&self) -> &Param<B> {
        match self {
            StageHead::Plain(h) => &h.wte,
            StageHead::Tensor(h) => &h.wte,
        }
    }

    /// [`StageHead::tied`], mutable.
    pub fn tied_mut(&mut self) -> &mut Param<B> {
        match self {
            StageHead::Plain(h) => &mut h.wte,
            StageHead::Tensor(h) => &mut h.wte,
        }
    }
}

impl<B: Backend> Module<B> for StageEmbedding<B> {
    fn clear_saved(&mut self) {
        match self {
            StageEmbedding::Plain(x) => x.clear_saved(),
            StageEmbedding::Tensor(x) => x.clear_saved(),
        }
    }
    fn params(&self) -> Vec<&Param<B>> {
        match self {
            StageEmbedding::Plain(x) => x.params(),
            StageEmbedding::Tensor(x) => x.params(),
        }
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        match self {
            StageEmbedding::Plain(x) => x.params_mut(),
            StageEmbedding::Tensor(x) => x.params_mut(),
        }
    }
}

impl<B: Backend> Module<B> for StageBlocks<B> {
    fn clear_saved(&mut self) {
        match self {
            StageBlocks::Plain(x) => x.clear_saved(),
            StageBlocks::Tensor(x) => x.clear_saved(),
        }
    }
    fn params(&self) -> Vec<&Param<B>> {
        match self {
            StageBlocks::Plain(x) => x.params(),
            StageBlocks::Tensor(x) => x.params(),
        }
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        match self {
            StageBlocks::Plain(x) => x.params_mut(),
            StageBlocks::Tensor(x) => x.params_mut(),
        }
    }
}

impl<B: Backend> Module<B> for StageHead<B> {
    fn clear_saved(&mut self) {
        match self {
            StageHead::Plain(x) => x.clear_saved(),
            StageHead::Tensor(x) => x.clear_saved(),
        }
    }
    fn params(&self) -> Vec<&Param<B>> {
        match self {
            StageHead::Plain(x) => x.params(),
            StageHead::Tensor(x) => x.params(),
        }
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        match self {
            StageHead::Plain(x) => x.params_mut(),
            StageHead::Tensor(x) => x.params_mut(),
        }
    }
}
