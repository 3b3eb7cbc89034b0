//! A [`Gpt`] cut into pipeline stages: the embeddings, ranges of blocks, and the head.
//!
//! Each stage owns only its layers (as picotron's pipeline-parallel model does), so it
//! can live on its own backend instance; activations pass between stages as tensors the
//! caller moves. The first and the last stage both need the token embedding matrix (the
//! head is tied to it), so after the split each holds its own copy; the gradients the
//! two copies receive are summed by [`sum_tied_grads`] once per optimizer step, after
//! which both copies get the same update and stay equal (Megatron-LM does the same with
//! an all-reduce over the embedding group).

use crate::gpt::{
    HeadSaved, embed, embed_backward, head_backward, head_backward_input, head_backward_weight,
    head_forward, head_loss,
};
use crate::{
    Block, BlockPart, CausalSelfAttention, Embedding, Gpt, GptConfig, LayerNorm, MicroBatch,
    Module, Param, Stash, backward_blocks, backward_weight_blocks, forward_blocks,
    forward_selective,
};
use brrr_backend::{Backend, Error, Result};
use brrr_tensor::Tensor;
use std::marker::PhantomData;
use std::ops::Range;

/// The first stage: token plus position embeddings, ids `[B, T]` to `[B, T, C]`.
pub struct EmbeddingStage<B: Backend> {
    /// Token embedding `[V, C]`: the original; the head stage holds a copy.
    pub wte: Embedding<B>,
    /// Positional embedding `[block_size, C]`.
    pub wpe: Embedding<B>,
    /// The longest sequence `wpe` covers.
    pub block_size: usize,
}

impl<B: Backend> EmbeddingStage<B> {
    /// Token ids `[B, T]` (u32) to the residual stream `[B, T, C]`, saving under `mb`.
    pub fn forward(&mut self, mb: MicroBatch, ids: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_packed(mb, ids, None)
    }

    /// [`EmbeddingStage::forward`] on packed rows: `positions` (u32 `[B, T]`) restart
    /// at each document, as in [`Gpt::forward_loss_packed_mb`]; `None` is `0..T`.
    pub fn forward_packed(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        positions: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        embed(
            &mut self.wte,
            &mut self.wpe,
            self.block_size,
            mb,
            ids,
            positions,
            "EmbeddingStage::forward",
        )
    }

    /// Scatter-adds the gradient of the residual stream `[B, T, C]` into both tables.
    pub fn backward(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()> {
        // The kernels and order of Gpt::backward_mb.
        embed_backward(&mut self.wte, &mut self.wpe, mb, dx)
    }
}

impl<B: Backend> Module<B> for EmbeddingStage<B> {
    fn clear_saved(&mut self) {
        self.wte.clear_saved();
        self.wpe.clear_saved();
    }
    fn params(&self) -> Vec<&Param<B>> {
        vec![&self.wte.weight, &self.wpe.weight]
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        vec![&mut self.wte.weight, &mut self.wpe.weight]
    }
}

/// A contiguous range of transformer blocks, `[B, T, C] -> [B, T, C]`: brrr-nn's whole
/// [`Block`]s by default, or any other [`BlockPart`] (a tensor-parallel crate's shards of
/// them; a pipeline stage's `Box<dyn BlockPart<B>>`). The walk over the range is written
/// here once for every kind of block.
pub struct BlocksStage<B: Backend, L: BlockPart<B> = Block<B>> {
    /// Index of `h[0]` in the whole model (its parameters are named `h.{first_layer}.…`).
    pub first_layer: usize,
    /// The blocks, in order (possibly none).
    pub h: Vec<L>,
    _backend: PhantomData<fn() -> B>,
}

impl<B: Backend, L: BlockPart<B>> BlocksStage<B, L> {
    /// Blocks `first_layer..first_layer + h.len()` of a model.
    pub fn new(first_layer: usize, h: Vec<L>) -> Self {
        BlocksStage {
            first_layer,
            h,
            _backend: PhantomData,
        }
    }

    /// The same range with each block turned into another kind (sharded, or boxed).
    pub fn try_map<M: BlockPart<B>>(
        self,
        f: impl FnMut(L) -> Result<M>,
    ) -> Result<BlocksStage<B, M>> {
        let h = self.h.into_iter().map(f).collect::<Result<_>>()?;
        Ok(BlocksStage::new(self.first_layer, h))
    }

    /// The whole model's block indices this stage holds.
    pub fn layers(&self) -> Range<usize> {
        self.first_layer..self.first_layer + self.h.len()
    }

    /// Runs the blocks in order, saving under `mb`.
    pub fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_packed(mb, x, None)
    }

    /// [`BlocksStage::forward`] on packed rows: attention stays inside each document
    /// of `segments` (u32 `[B, T]`, the whole sequence also under sequence
    /// parallelism), as in [`Gpt::forward_loss_packed_mb`]. Each block saves the ids
    /// with its activations, so the backward (fused or split) masks the same; `None` is
    /// plain causal attention.
    pub fn forward_packed(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        segments: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        forward_blocks(&mut self.h, mb, x.clone(), segments)
    }

    /// The blocks' backward in reverse order; returns the gradient of the stage's input.
    pub fn backward(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        backward_blocks(&mut self.h, mb, dout.clone(), false)
    }

    /// [`BlocksStage::backward`] with the projections' weight gradients deferred to
    /// [`BlocksStage::backward_weight`] (the zero-bubble "B"): bitwise the same input
    /// gradient, computed sooner so the previous stage can start its own B.
    pub fn backward_input(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        backward_blocks(&mut self.h, mb, dout.clone(), true)
    }

    /// The blocks' projection weight gradients of micro-batch `mb` (the zero-bubble
    /// "W"), freeing what [`BlocksStage::backward_input`] kept. An error naming the
    /// layer if B of `mb` has not run.
    pub fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        backward_weight_blocks(&mut self.h, mb)
    }

    /// Block `i` of the range alone (`selective`: its attention keeps no scores and
    /// recomputes them in its backward): a step of activation recomputation's walk.
    pub fn block_forward(
        &mut self,
        i: usize,
        mb: MicroBatch,
        x: &Tensor<B>,
        selective: bool,
    ) -> Result<Tensor<B>> {
        let block = self.block_mut(i)?;
        forward_selective(block, L::attn_mut, selective, |b| b.forward(mb, x))
    }

    /// Block `i`'s backward alone: fused, or the zero-bubble B (`input_only`).
    pub fn block_backward(
        &mut self,
        i: usize,
        mb: MicroBatch,
        dy: &Tensor<B>,
        input_only: bool,
    ) -> Result<Tensor<B>> {
        let block = self.block_mut(i)?;
        match input_only {
            true => block.backward_input(mb, dy),
            false => block.backward(mb, dy),
        }
    }

    /// Block `i` of the range, or an error naming the range.
    pub fn block_mut(&mut self, i: usize) -> Result<&mut L> {
        let layers = self.layers();
        self.h.get_mut(i).ok_or_else(|| {
            Error::invalid(
                "BlocksStage",
                format!("no block {i} in the stage of layers {layers:?}"),
            )
        })
    }

    /// Each block's attention, in order.
    pub fn attentions_mut(&mut self) -> Vec<&mut CausalSelfAttention<B>> {
        self.h.iter_mut().map(L::attn_mut).collect()
    }
}

impl<B: Backend, L: BlockPart<B>> Module<B> for BlocksStage<B, L> {
    fn clear_saved(&mut self) {
        for b in &mut self.h {
            b.clear_saved();
        }
    }
    fn params(&self) -> Vec<&Param<B>> {
        self.h.iter().flat_map(|b| b.params()).collect()
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        self.h.iter_mut().flat_map(|b| b.params_mut()).collect()
    }
}

/// The last stage: final LayerNorm, the projection tied to the token embedding, and the
/// cross-entropy. `wte` is this stage's copy of the embedding matrix (see
/// [`sum_tied_grads`]).
pub struct HeadStage<B: Backend> {
    /// The final LayerNorm.
    pub ln_f: LayerNorm<B>,
    /// The tied weight `[V, C]`, named `wte.weight` like the embedding stage's.
    pub wte: Param<B>,
    saved: Stash<HeadSaved<B>>,
    /// `(dlogits, x_final)` of each micro-batch between [`HeadStage::backward_input`]
    /// and [`HeadStage::backward_weight`].
    pending_weight: Stash<(Tensor<B>, Tensor<B>)>,
}

impl<B: Backend> HeadStage<B> {
    /// The residual stream `[B, T, C]` to logits `[B, T, V]`, saving under `mb`.
    pub fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        head_forward(&mut self.ln_f, &self.wte.value, &mut self.saved, mb, x)
    }

    /// [`HeadStage::forward`] plus per-position cross-entropy `[B, T]` against i32
    /// `targets`; [`HeadStage::backward`] of the same `mb` starts from it.
    pub fn forward_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        let logits = self.forward(mb, x)?;
        head_loss(&mut self.saved, mb, logits, targets)
    }

    /// Backward from `Σ losses · dloss` (as [`Gpt::backward_mb`]): accumulates into
    /// `ln_f` and `wte`, returns the gradient of the stage's input `[B, T, C]`.
    pub fn backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        head_backward(&mut self.ln_f, &mut self.wte, &mut self.saved, mb, dloss)
    }

    /// [`HeadStage::backward`] without the tied projection's weight gradient (the
    /// zero-bubble "B"): keeps the logits' gradient `[B·T, V]` and the projection's
    /// input `[B·T, C]` for [`HeadStage::backward_weight`]. This copy of `wte` gets no
    /// other gradient on this stage, so deferring it changes no order of additions.
    pub fn backward_input(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        let (dx, pending) =
            head_backward_input(&mut self.ln_f, &self.wte, &mut self.saved, mb, dloss)?;
        self.pending_weight.put(mb, pending);
        Ok(dx)
    }

    /// The tied projection's weight gradient of micro-batch `mb` (the zero-bubble
    /// "W"), freeing what [`HeadStage::backward_input`] kept. An error if B of `mb`
    /// has not run.
    pub fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        if !self.pending_weight.contains(mb) {
            return Err(Error::invalid(
                "HeadStage::backward_weight",
                format!(
                    "no input gradient (B) of {mb} is waiting for its weight gradient \
                     (W before B, or W twice)"
                ),
            ));
        }
        let pending = self.pending_weight.take(mb, "HeadStage")?;
        head_backward_weight(&mut self.wte, pending)
    }

    /// The micro-batches whose forward ran and whose backward has not.
    pub fn in_flight(&self) -> Vec<MicroBatch> {
        self.saved.micro_batches()
    }
}

impl<B: Backend> Module<B> for HeadStage<B> {
    fn clear_saved(&mut self) {
        self.saved.clear();
        self.pending_weight.clear();
        self.ln_f.clear_saved();
    }
    /// Drops what the forward saved for `mb` (a recomputed head runs it again).
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.saved.discard(mb);
        self.ln_f.discard_saved(mb)
    }
    /// `wte.weight` (the tied copy) first, then `ln_f`. A global gradient norm over
    /// all stages must count the tied weight once: skip this copy after
    /// [`sum_tied_grads`].
    fn params(&self) -> Vec<&Param<B>> {
        let mut v = vec![&self.wte];
        v.extend(self.ln_f.params());
        v
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = vec![&mut self.wte];
        v.extend(self.ln_f.params_mut());
        v
    }
}

/// A [`Gpt`] cut into stages by [`Gpt::into_stages`].
pub struct GptStages<B: Backend> {
    /// The whole model's shape.
    pub config: GptConfig,
    /// The first stage.
    pub embedding: EmbeddingStage<B>,
    /// One entry per requested range of blocks, in order.
    pub blocks: Vec<BlocksStage<B>>,
    /// The last stage.
    pub head: HeadStage<B>,
}

impl<B: Backend> Gpt<B> {
    /// Cuts the model into an embedding stage, one [`BlocksStage`] per range of block
    /// indices, and a head stage. The ranges must be contiguous, in order and cover
    /// `0..n_layer` (an empty range is allowed: a stage with no blocks). Saved
    /// activations are dropped. The head gets a private copy of `wte` (with its f32
    /// master under mixed precision) with a zero gradient; the embedding stage keeps the
    /// original and its gradient.
    pub fn into_stages(mut self, layers: &[Range<usize>]) -> Result<GptStages<B>> {
        check_ranges(layers, self.config.n_layer)?;
        self.clear_saved();
        let w = &self.wte.weight;
        let tied = match &w.master {
            // Mixed precision: the copy gets its own f32 master, and its compute value
            // is rounded from it exactly as the original's was.
            Some(master) => Param::with_master(
                w.name.clone(),
                master.deep_clone()?,
                w.value.dtype(),
                w.grad.dtype(),
            )?,
            None => Param::new(w.name.clone(), w.value.deep_clone()?)?,
        };
        let mut rest = self.h.into_iter();
        let blocks = layers
            .iter()
            .map(|r| BlocksStage::new(r.start, rest.by_ref().take(r.len()).collect()))
            .collect();
        Ok(GptStages {
            embedding: EmbeddingStage {
                wte: self.wte,
                wpe: self.wpe,
                block_size: self.config.block_size,
            },
            blocks,
            head: HeadStage {
                ln_f: self.ln_f,
                wte: tied,
                saved: Stash::new(),
                pending_weight: Stash::new(),
            },
            config: self.config,
        })
    }
}

fn check_ranges(layers: &[Range<usize>], n_layer: usize) -> Result<()> {
    let mut next = 0;
    for r in layers {
        if r.start != next || r.end < r.start {
            return Err(Error::invalid(
                "Gpt::into_stages",
                format!(
                    "block ranges {layers:?} must be contiguous and ordered from 0 \
                     (expected one starting at {next}, got {r:?})"
                ),
            ));
        }
        next = r.end;
    }
    if next != n_layer {
        return Err(Error::invalid(
            "Gpt::into_stages",
            format!("block ranges {layers:?} must end at n_layer = {n_layer}"),
        ));
    }
    Ok(())
}

/// A copy of `t` on `backend`, through the host: the exact bits, in `t`'s dtype. How
/// activations and gradients cross from one stage's backend to another's when there is
/// no device-to-device path (native only: it waits for the read).
#[cfg(not(target_arch = "wasm32"))]
pub fn copy_to_backend<B1: Backend, B2: Backend>(
    t: &Tensor<B1>,
    backend: &B2,
) -> Result<Tensor<B2>> {
    let host = brrr_backend::block_on(t.to_host())?;
    Tensor::from_host(backend, &host, t.shape().clone())
}

/// Moves every parameter (value and gradient) of `module` onto `backend` through the
/// host, after dropping its saved activations: how a stage is placed on its own device.
#[cfg(not(target_arch = "wasm32"))]
pub fn move_to_backend<B: Backend, M: Module<B> + ?Sized>(
    module: &mut M,
    backend: &B,
) -> Result<()> {
    module.clear_saved();
    for p in module.params_mut() {
        p.value = copy_to_backend(&p.value, backend)?;
        p.grad = copy_to_backend(&p.grad, backend)?;
    }
    Ok(())
}

/// Sums the tied weight's two gradients: afterwards the embedding stage's `wte` gradient
/// and the head's both hold `embedding + head` (bitwise the same, as float addition is
/// commutative), so the same optimizer step on each copy keeps them equal. Call it once
/// per optimizer step, after the last backward and before clipping. The gradients cross
/// through the host, so the stages may live on different backends (native only).
///
/// On one device this adds the head's contributions after all of the embedding's,
/// while [`Gpt::backward_mb`] interleaves them per micro-batch, so the sum matches the
/// unsplit model's to rounding (about 1e-7 relative in f32), not bitwise.
#[cfg(not(target_arch = "wasm32"))]
pub fn sum_tied_grads<B1: Backend, B2: Backend>(
    embedding: &mut EmbeddingStage<B1>,
    head: &mut HeadStage<B2>,
) -> Result<()> {
    let e = &mut embedding.wte.weight.grad;
    let h = &mut head.wte.grad;
    if e.shape() != h.shape() || e.dtype() != h.dtype() {
        return Err(Error::shape(
            "sum_tied_grads",
            format!(
                "embedding gradient {} {} vs head gradient {} {}",
                e.shape(),
                e.dtype(),
                h.shape(),
                h.dtype()
            ),
        ));
    }
    let h_on_e = copy_to_backend(h, e.backend())?;
    let e_on_h = copy_to_backend(e, h.backend())?;
    e.add_(&h_on_e)?;
    h.add_(&e_on_h)
}

/// Runs `f` with the attention of every item of `layers` (blocks, or a tensor-parallel
/// crate's shards of them; `attn` finds each one's) masked by `segments`, and unmasked
/// again afterwards, also when `f` fails, so a later forward without a mask is causal.
pub fn with_segments<B: Backend, L, T>(
    layers: &mut [L],
    attn: fn(&mut L) -> &mut CausalSelfAttention<B>,
    segments: Option<&Tensor<B>>,
    f: impl FnOnce(&mut [L]) -> Result<T>,
) -> Result<T> {
    for layer in layers.iter_mut() {
        attn(layer).segments = segments.cloned();
    }
    let out = f(layers);
    for layer in layers.iter_mut() {
        attn(layer).segments = None;
    }
    out
}
