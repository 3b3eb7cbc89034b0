//! Tensor-parallel pipeline stages: brrr-nn's [`EmbeddingStage`], [`BlocksStage`] and
//! [`HeadStage`] sliced over a tensor-parallel group, so that a pipeline stage can be
//! `T` ranks wide (Megatron-LM's 3D layout: Narayanan et al., "Efficient Large-Scale
//! Language Model Training on GPU Clusters Using Megatron-LM", SC 2021, §2.3).
//!
//! Each piece keeps the interface of its single-device counterpart (`forward`,
//! `backward`, and the zero-bubble `backward_input`/`backward_weight`), so a pipeline
//! executor drives either kind the same way. What crosses a stage boundary is the
//! residual stream as this rank holds it: the full `[B, T, C]` (the same on every rank
//! of the group) or, with sequence parallelism, this rank's `[B, T/n, C]` shard. Tensor
//! rank `r` of one stage therefore talks only to tensor rank `r` of the next.
//!
//! The embedding and the head are vocabulary-parallel (as [`crate::TpGpt`]): rank `r`
//! holds vocabulary rows `r·V/n .. (r+1)·V/n` of the token embedding and of the head's
//! tied copy, so the first and the last stage's tied-gradient exchange pairs the same
//! rows on the same tensor rank.

use crate::ends::{self, HeadSaved, Region, TiedGrad};
use crate::model::{TpBlock, copy_layer_norm, copy_param};
use crate::shard::split_dim;
use crate::vocab::VocabParallelEmbedding;
use brrr_backend::{Backend, Error, HostData, Result};
use brrr_collectives::Communicator;
use brrr_nn::{
    BlocksStage, Embedding, EmbeddingPart, EmbeddingStage, HeadPart, HeadStage, LayerNorm,
    MicroBatch, Module, Param, Stash,
};
use brrr_tensor::Tensor;
use std::sync::Arc;

/// Token ids (u32) or targets (i32) of a `[B, T]` tensor, read to the host as u32.
fn host_ids<B: Backend>(op: &'static str, t: &Tensor<B>) -> Result<Vec<u32>> {
    match brrr_backend::block_on(t.to_host())? {
        HostData::U32(v) => Ok(v),
        HostData::I32(v) => v
            .into_iter()
            .map(|x| {
                u32::try_from(x).map_err(|_| {
                    Error::invalid(op, format!("negative token {x}: no ignore index here"))
                })
            })
            .collect(),
        other => Err(Error::invalid(
            op,
            format!("token ids must be u32 or i32, got {}", other.dtype()),
        )),
    }
}

fn dims2<B: Backend>(op: &'static str, t: &Tensor<B>) -> Result<(usize, usize)> {
    match t.dims() {
        &[b, t] => Ok((b, t)),
        _ => Err(Error::shape(
            op,
            format!("expected [B, T] ids, got {}", t.shape()),
        )),
    }
}

/// The first stage's embeddings over a tensor-parallel group: the vocabulary-parallel
/// token embedding (partial lookups summed by the region's exit) plus the replicated
/// positional table; ids `[B, T]` → `[B, T, C]`, or `[B, T/n, C]` with sequence
/// parallelism.
pub struct TpEmbeddingStage<B: Backend> {
    /// This rank's vocabulary rows `[V/n, C]`, named `wte.weight`.
    pub wte: VocabParallelEmbedding<B>,
    /// The positional table, a full copy on every rank.
    pub wpe: Embedding<B>,
    /// The longest sequence `wpe` covers.
    pub block_size: usize,
    /// Sequence parallelism on.
    pub sp: bool,
    comm: Arc<Communicator>,
}

impl<B: Backend> TpEmbeddingStage<B> {
    /// Rank `comm.rank()`'s slice of `e`. The vocabulary must divide by the group.
    pub fn from_stage(e: &EmbeddingStage<B>, comm: Arc<Communicator>, sp: bool) -> Result<Self> {
        let (r, n) = (comm.rank(), comm.world_size());
        let v = e.wte.weight.value.dims()[0];
        let rows = split_dim(&e.wte.weight.value, 0, r, n)?;
        Ok(TpEmbeddingStage {
            wte: VocabParallelEmbedding::new("wte", rows, r * v / n)?,
            wpe: Embedding {
                weight: copy_param(&e.wpe.weight)?,
                saved_ids: Stash::new(),
            },
            block_size: e.block_size,
            sp,
            comm,
        })
    }

    /// Token ids `[B, T]` to this rank's part of the residual stream, saving under `mb`.
    pub fn forward(&mut self, mb: MicroBatch, ids: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_packed(mb, ids, None)
    }

    /// [`TpEmbeddingStage::forward`] on packed rows: `positions` (u32 `[B, T]`) restart
    /// at each document, as brrr-nn's `EmbeddingStage::forward_packed`.
    pub fn forward_packed(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        positions: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        const OP: &str = "TpEmbeddingStage::forward";
        let (b, t) = dims2(OP, ids)?;
        if t > self.block_size {
            return Err(Error::shape(
                OP,
                format!("sequence length {t} exceeds block_size {}", self.block_size),
            ));
        }
        let n = self.comm.world_size();
        if self.sp && !t.is_multiple_of(n) {
            return Err(Error::invalid(
                OP,
                format!("sequence length {t} does not divide by {n} tensor-parallel ranks"),
            ));
        }
        let ids = host_ids(OP, ids)?;
        let positions = match positions {
            Some(p) => Some(host_ids(OP, p)?),
            None => None,
        };
        let region = Region {
            comm: &self.comm,
            sp: self.sp,
        };
        let tables = (&mut self.wte, &mut self.wpe);
        ends::embed(tables, region, mb, &ids, (b, t), positions.as_deref())
    }

    /// Scatter-adds the gradient of this rank's part of the residual stream into the
    /// positional table and (after the exit's backward) into this rank's vocabulary rows.
    pub fn backward(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()> {
        let region = Region {
            comm: &self.comm,
            sp: self.sp,
        };
        ends::embed_backward((&mut self.wte, &mut self.wpe), region, mb, dx)
    }
}

impl<B: Backend> Module<B> for TpEmbeddingStage<B> {
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

/// A contiguous range of tensor-parallel blocks: brrr-nn's [`BlocksStage`] walking
/// [`TpBlock`]s, so the walk (forward, fused and split backward, recomputation's block
/// by block) is brrr-nn's own.
pub type TpBlocksStage<B> = BlocksStage<B, TpBlock<B>>;

/// Rank `comm.rank()`'s shard of every block of `s`. Heads must divide by the group.
pub fn shard_blocks<B: Backend>(
    s: &BlocksStage<B>,
    comm: Arc<Communicator>,
    sp: bool,
) -> Result<TpBlocksStage<B>> {
    let h =
        s.h.iter()
            .map(|b| TpBlock::from_block(b, comm.clone(), sp))
            .collect::<Result<_>>()?;
    Ok(BlocksStage::new(s.first_layer, h))
}

impl<B: Backend> EmbeddingPart<B> for TpEmbeddingStage<B> {
    fn forward(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        positions: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        self.forward_packed(mb, ids, positions)
    }
    fn backward(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()> {
        TpEmbeddingStage::backward(self, mb, dx)
    }
    fn tied_mut(&mut self) -> &mut Param<B> {
        &mut self.wte.weight
    }
}

impl<B: Backend> HeadPart<B> for TpHeadStage<B> {
    fn forward_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        TpHeadStage::forward_loss(self, mb, x, targets)
    }
    fn backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        TpHeadStage::backward(self, mb, dloss)
    }
    fn backward_input(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        TpHeadStage::backward_input(self, mb, dloss)
    }
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        TpHeadStage::backward_weight(self, mb)
    }
    fn tied(&self) -> &Param<B> {
        &self.wte
    }
    fn tied_mut(&mut self) -> &mut Param<B> {
        &mut self.wte
    }
}

/// The last stage over a tensor-parallel group: the final LayerNorm (on the sequence
/// shard with sequence parallelism), the region's entry (nothing, or the all-gather of
/// the sequence), this rank's vocabulary columns of the logits against its rows of the
/// tied embedding, and the vocabulary-parallel cross-entropy: the full `[N, V]` logits
/// never exist on one rank.
pub struct TpHeadStage<B: Backend> {
    /// The final LayerNorm, replicated on every rank.
    pub ln_f: LayerNorm<B>,
    /// This rank's rows `[V/n, C]` of the tied weight, named `wte.weight`.
    pub wte: Param<B>,
    /// The first vocabulary row this rank holds.
    pub start: usize,
    /// Sequence parallelism on.
    pub sp: bool,
    comm: Arc<Communicator>,
    saved: Stash<HeadSaved<B>>,
    /// `(dlogits [B·T, V/n], x_final [B·T, C])` between B and W.
    pending_weight: Stash<TiedGrad<B>>,
}

impl<B: Backend> TpHeadStage<B> {
    /// Rank `comm.rank()`'s slice of `h`. The vocabulary must divide by the group.
    pub fn from_stage(h: &HeadStage<B>, comm: Arc<Communicator>, sp: bool) -> Result<Self> {
        let (r, n) = (comm.rank(), comm.world_size());
        let v = h.wte.value.dims()[0];
        Ok(TpHeadStage {
            ln_f: copy_layer_norm(&h.ln_f)?,
            wte: Param::new(h.wte.name.clone(), split_dim(&h.wte.value, 0, r, n)?)?,
            start: r * v / n,
            sp,
            comm,
            saved: Stash::new(),
            pending_weight: Stash::new(),
        })
    }

    /// This rank's part of the residual stream to per-position losses `[B, T]` (every
    /// position, the same on every rank) against the targets `[B, T]`, saving under `mb`.
    pub fn forward_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        const OP: &str = "TpHeadStage::forward_loss";
        dims2(OP, targets)?;
        let targets = host_ids(OP, targets)?;
        let region = Region {
            comm: &self.comm,
            sp: self.sp,
        };
        let tied = (&self.wte.value, self.start);
        let (losses, saved) = ends::head_forward(&mut self.ln_f, tied, region, mb, x, &targets)?;
        self.saved.put(mb, saved);
        Ok(losses)
    }

    /// Backward from `Σ losses · dloss`: accumulates into `ln_f` and this rank's rows
    /// of `wte`; returns the gradient of this rank's part of the stage's input.
    pub fn backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        let (dx, tied) = self.backward_parts(mb, dloss)?;
        ends::add_tied_grad(&mut self.wte.grad, tied)?;
        self.finish_input(mb, dx)
    }

    /// [`TpHeadStage::backward`] without the tied rows' weight gradient (the
    /// zero-bubble "B"); [`TpHeadStage::backward_weight`] adds it, locally.
    pub fn backward_input(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        let (dx, pending) = self.backward_parts(mb, dloss)?;
        self.pending_weight.put(mb, pending);
        self.finish_input(mb, dx)
    }

    /// The tied rows' weight gradient of micro-batch `mb` (the zero-bubble "W").
    pub fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        if !self.pending_weight.contains(mb) {
            return Err(Error::invalid(
                "TpHeadStage::backward_weight",
                format!("no input gradient (B) of {mb} is waiting for its weight gradient"),
            ));
        }
        let tied = self.pending_weight.take(mb, "TpHeadStage")?;
        ends::add_tied_grad(&mut self.wte.grad, tied)
    }

    /// This rank's partial input gradient and the tied rows' pending weight gradient.
    fn backward_parts(&mut self, mb: MicroBatch, dloss: f32) -> Result<(Tensor<B>, TiedGrad<B>)> {
        let saved = self.saved.take(mb, "TpHeadStage")?;
        ends::head_backward(saved, &self.wte.value, dloss)
    }

    /// The entry's backward (sum, or reduce-scatter, of the ranks' partial `dx`) and
    /// ln_f's.
    fn finish_input(&mut self, mb: MicroBatch, dx: Tensor<B>) -> Result<Tensor<B>> {
        let region = Region {
            comm: &self.comm,
            sp: self.sp,
        };
        ends::head_backward_input(&mut self.ln_f, region, mb, &dx)
    }
}

impl<B: Backend> Module<B> for TpHeadStage<B> {
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
    /// `wte.weight` (this rank's rows of the tied copy) first, then `ln_f`.
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
