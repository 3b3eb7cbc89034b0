//! [`ReplicaModel`]: what the data-parallel engine asks of the model each rank holds.
//! A replica is brrr-nn's whole [`Gpt`], or (`--dp × --tp`) one tensor-parallel shard
//! of it, brrr-tp's `TpGpt`: the engine's buckets, ZeRO's shards and gathers, the
//! overlap of gradient collectives with the backward and the optimizer are written once
//! for both. What a shard adds is said here, as hooks with the whole model's answers as
//! defaults: the group its shard is cut over, which parameters are full copies on every
//! rank of that group (counted once in the gradient norm), gradients to complete over
//! the group before the replicas average them (sequence parallelism), and how a whole
//! checkpoint maps to the shard and back.

use crate::layout::Pieces;
use brrr_amp::Policy;
use brrr_backend::{Backend, Result};
use brrr_collectives::Communicator;
use brrr_nn::{Gpt, MicroBatch, Module, Segments};
use brrr_tensor::Tensor;
use brrr_train::{Batch, TrainState};
use std::ops::Range;

/// A document mask on the device: each token's position inside its document and the
/// documents' segment ids, both u32 `[B, T]`.
pub type DeviceMask<B> = (Tensor<B>, Tensor<B>);

/// The model one data-parallel rank trains, walked segment by segment by the engine
/// ([`Segments`]: blocks, then the head). Its parameters come in forward order: the
/// embeddings, each block, the head's own ([`ReplicaModel::pieces`]), the head's
/// projection being the token embedding (tied).
pub trait ReplicaModel<B: Backend>: Module<B> + Segments<B> + Sized {
    /// The parameter indices of the embeddings, each block and the head.
    fn pieces(&self) -> Pieces;

    /// `batch`'s targets in the form the head reads them.
    fn targets(&self, backend: &B, batch: &Batch) -> Result<Self::Targets>;

    /// The embeddings of `batch`'s rows, saving under `mb`. With a document `mask` the
    /// positions restart at each document, and every block's attention stays inside its
    /// document until [`ReplicaModel::end_mask`].
    fn embed(
        &mut self,
        backend: &B,
        mb: MicroBatch,
        batch: &Batch,
        mask: Option<&DeviceMask<B>>,
    ) -> Result<Tensor<B>>;

    /// Takes off what [`ReplicaModel::embed`] set for a masked batch.
    fn end_mask(&mut self);

    /// The embeddings' backward from the gradient of the first block's input.
    fn embed_backward(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()>;

    /// Per-position losses `[B, T]` of `batch` (with its document mask, if any); the
    /// caller clears what the forward saved.
    fn eval_loss(&mut self, backend: &B, batch: &Batch) -> Result<Tensor<B>>;

    /// Mixed precision: 16-bit compute copies beside f32 masters (`--amp`).
    fn apply_policy(&mut self, policy: &Policy) -> Result<()>;

    /// The tensor-parallel group this replica is a shard over; `None` for a whole model.
    fn shard_group(&self) -> Option<&Communicator> {
        None
    }

    /// For each parameter, whether it is a full copy on every rank of the shard group
    /// (a LayerNorm, the positional table): its gradient counts once in the norm.
    fn replicated_params(&self) -> Vec<bool> {
        vec![false; self.params().len()]
    }

    /// Completes the gradients of parameters `params` before the replicas average them:
    /// under sequence parallelism a replicated parameter's gradient covers one sequence
    /// shard per rank and is summed over the group. Nothing to do for a whole model.
    fn complete_grads(&mut self, params: Range<usize>) -> Result<()> {
        let _ = params;
        Ok(())
    }

    /// The whole model's state from this shard's (collective over the shard group).
    fn whole_state(&self, local: TrainState) -> Result<TrainState> {
        Ok(local)
    }

    /// This shard's part of a whole model's state.
    fn local_state(&self, whole: &TrainState) -> Result<TrainState> {
        Ok(whole.clone())
    }

    /// What the shard is, for the engine's description (`""` for a whole model).
    fn describe(&self) -> String {
        String::new()
    }
}

impl<B: Backend> ReplicaModel<B> for Gpt<B> {
    fn pieces(&self) -> Pieces {
        Pieces::from_counts(
            self.wte.params().len() + self.wpe.params().len(),
            self.h.iter().map(|b| b.params().len()),
            self.ln_f.params().len(),
        )
    }

    fn targets(&self, backend: &B, batch: &Batch) -> Result<Tensor<B>> {
        let targets: Vec<i32> = batch.targets.iter().map(|&t| t as i32).collect();
        Tensor::from_i32(backend, &targets, [batch.batch, batch.seq])
    }

    fn embed(
        &mut self,
        backend: &B,
        mb: MicroBatch,
        batch: &Batch,
        mask: Option<&DeviceMask<B>>,
    ) -> Result<Tensor<B>> {
        let ids = Tensor::from_u32(backend, &batch.inputs, [batch.batch, batch.seq])?;
        let Some((positions, segments)) = mask else {
            return self.embed_mb(mb, &ids);
        };
        self.set_segments(Some(segments));
        self.embed_packed_mb(mb, &ids, Some(positions))
    }

    fn end_mask(&mut self) {
        self.set_segments(None);
    }

    fn embed_backward(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()> {
        self.embed_backward_mb(mb, dx)
    }

    fn eval_loss(&mut self, backend: &B, batch: &Batch) -> Result<Tensor<B>> {
        let (ids, targets) = brrr_train::upload(backend, batch)?;
        // As the one-device trainer: a masked batch attends within its documents.
        match brrr_train::upload_mask(backend, batch)? {
            None => self.forward_loss(&ids, &targets),
            Some((pos, seg)) => {
                self.forward_loss_packed_mb(MicroBatch::default(), &ids, &targets, &pos, &seg)
            }
        }
    }

    fn apply_policy(&mut self, policy: &Policy) -> Result<()> {
        brrr_amp::apply_policy(policy, self)
    }
}
