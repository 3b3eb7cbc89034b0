//! Runs a [`Schedule`] for real: one rank per stage, each owning only its pieces of a
//! `brrr-nn` GPT, activations and gradients passed with [`Communicator::send`] /
//! [`Communicator::recv`], each in-flight micro-batch's activations held in the
//! layers' own stashes (keyed by micro-batch) until its backward.
//!
//! `BW` runs the fused backward. The zero-bubble schedules' `B` runs only the input
//! gradient (`backward_input` of `brrr-nn`'s stages: the projections keep their input
//! and output gradient) and their `W` the projections' and the tied head's weight
//! gradients from that stash (`backward_weight`), so W passes fill the bubbles as the
//! schedule plans (Qi et al., "Zero Bubble Pipeline Parallelism", 2023). LayerNorm and
//! embedding gradients stay in B (cheap row reductions and scatter-adds).
//!
//! With tensor parallelism ([`PipelineStage::new_tensor_parallel`], `--pp P --tp T`)
//! each stage is `T` ranks wide: every rank of a stage's tensor-parallel group holds
//! brrr-tp's slices of the stage's pieces (vocabulary-parallel embedding and head,
//! blocks split by heads and MLP columns), and the pipeline communicator given to
//! [`PipelineStage::run`] is the one joining the stages' ranks of the same tensor rank
//! (`ParallelGroups::pp`), so tensor rank `r` of a stage sends to tensor rank `r` of
//! the next. The tensor-parallel collectives all happen in F and B; W is local, so the
//! zero-bubble split carries over unchanged.

use crate::config::split_layers;
use crate::parts::stage_parts;
use crate::recompute::ChunkWalk;
use crate::schedule::{Action, Schedule};
use crate::simulate::{InFlight, Span, Timeline};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_checkpoint::{Recompute, Seed};
use brrr_collectives::{Communicator, ReduceOp};
use brrr_dp::ParamOwners;
use brrr_nn::{
    AdamW, AdamWConfig, BlockPart, BlocksStage, EmbeddingPart, Gpt, GptConfig, HeadPart,
    MicroBatch, Module, Param,
};
use brrr_tensor::Tensor;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// One micro-batch on the device: token ids and targets, and the document mask of
/// packed rows (`--doc-mask`).
pub struct MicroBatchData<B: Backend> {
    /// Token ids, u32 `[b, T]` (read by the first stage).
    pub ids: Tensor<B>,
    /// Next-token targets, i32 `[b, T]` (read by the last stage).
    pub targets: Tensor<B>,
    /// Each token's position inside its document and its document's segment id, u32
    /// `[b, T]` each (`brrr_train::upload_mask`); `None`: plain causal rows.
    pub mask: Option<(Tensor<B>, Tensor<B>)>,
}

impl<B: Backend> MicroBatchData<B> {
    /// Uploads a batch (its ids, targets and document mask).
    pub fn upload(backend: &B, batch: &brrr_train::Batch) -> Result<Self> {
        let (ids, targets) = brrr_train::upload(backend, batch)?;
        let mask = brrr_train::upload_mask(backend, batch)?;
        Ok(MicroBatchData { ids, targets, mask })
    }
}

impl<B: Backend> From<(Tensor<B>, Tensor<B>)> for MicroBatchData<B> {
    /// Ids and targets of plain rows.
    fn from((ids, targets): (Tensor<B>, Tensor<B>)) -> Self {
        MicroBatchData {
            ids,
            targets,
            mask: None,
        }
    }
}

/// What one rank ran in one step.
#[derive(Clone, Debug, Default)]
pub struct StageRun {
    /// Sum of the micro-batches' mean losses (only on the stage holding the head;
    /// `None` elsewhere).
    pub loss_sum: Option<f64>,
    /// Compute actions with start and end in seconds since the step began (after a
    /// barrier, so in-process ranks share the origin).
    pub spans: Vec<Span>,
    /// Most micro-batch chunks whose activations this stage held at once.
    pub peak_in_flight: usize,
    /// Peak bytes of this stage's device during the step (`Backend::memory_stats`).
    pub peak_bytes: u64,
    /// Bytes in use when the step began (parameters, gradients, optimizer state).
    pub start_bytes: u64,
}

/// Tags of messages: what they carry, so a receive picks the right one whatever the
/// order the peer sent in (activations and gradients can share a link, e.g. in the
/// interleaved schedule).
const ACT: f32 = 0.0;
const GRAD: f32 = 1.0;

/// One stage of a pipeline: this rank's pieces of the model and its optimizer.
pub struct PipelineStage<B: Backend> {
    /// This stage's index (its rank in the pipeline group).
    pub rank: usize,
    /// Stages.
    pub p: usize,
    /// Chunks per stage.
    pub v: usize,
    /// The whole model's configuration (not only this stage's layers).
    pub config: GptConfig,
    /// The token and position embeddings (stage 0 only).
    pub embedding: Option<Box<dyn EmbeddingPart<B>>>,
    /// Chunk `c` holds the model piece `c · p + rank`.
    pub chunks: Vec<BlocksStage<B, Box<dyn BlockPart<B>>>>,
    /// The final LayerNorm and tied head (the last stage only).
    pub head: Option<Box<dyn HeadPart<B>>>,
    /// AdamW over this stage's parameters only; each stage steps its own.
    pub opt: AdamW<B>,
    backend: B,
    /// The tensor-parallel group of this stage and whether sequence parallelism is on
    /// (`None`: the stage is one rank wide).
    tp: Option<(Arc<Communicator>, bool)>,
    /// Names of this stage's parameters that are full copies on every tensor rank
    /// (LayerNorms, positions, row-parallel biases); empty without tensor parallelism.
    replicated: BTreeSet<String>,
    /// Messages received before the action that wants them.
    mailbox: HashMap<(usize, u32, u32, u32), Vec<f32>>,
    /// Outputs (activations or input gradients) waiting for their send or for the
    /// next chunk on this stage: (is gradient, micro-batch, receiving piece).
    outbox: HashMap<(bool, u32, usize), Tensor<B>>,
    /// Activation recomputation (`--checkpoint`): one executor per chunk, each running
    /// the whole model's plan on its chunk's blocks; empty without it.
    recompute: Vec<Recompute<B>>,
    /// `--zero 1` over the data-parallel group: which replica keeps each parameter's
    /// moments (`opt` holds this rank's only); `None`: every replica keeps all of them.
    owners: Option<ParamOwners>,
    /// The data-parallel gradient average's bucket (`--bucket-mb`), bytes.
    bucket_bytes: usize,
}

impl<B: Backend> PipelineStage<B> {
    /// Keeps stage `rank`'s pieces of `model` (cut into `p · v` pieces of blocks, as
    /// even as possible) and drops the rest. Every rank builds the same `model` from
    /// the same seed, so the pieces together are exactly the one-device model.
    pub fn new(model: Gpt<B>, rank: usize, p: usize, v: usize, opt: AdamWConfig) -> Result<Self> {
        Self::build(model, rank, p, v, opt, None)
    }

    /// [`PipelineStage::new`] with the stage split over the tensor-parallel group `tp`
    /// (Megatron's 3D layout): this rank keeps its `1/T` slice of each of the stage's
    /// pieces (brrr-tp's [`brrr_tp::TpEmbeddingStage`], [`brrr_tp::TpBlocksStage`], [`brrr_tp::TpHeadStage`]);
    /// with `sp` the residual stream between the tensor-parallel regions, and across
    /// the stage boundary, is this rank's sequence shard. Errors when heads or the
    /// vocabulary do not divide by the group's size.
    pub fn new_tensor_parallel(
        model: Gpt<B>,
        rank: usize,
        p: usize,
        v: usize,
        opt: AdamWConfig,
        tp: Arc<Communicator>,
        sp: bool,
    ) -> Result<Self> {
        brrr_tp::check_model(&model.config, tp.world_size())?;
        Self::build(model, rank, p, v, opt, Some((tp, sp)))
    }

    fn build(
        model: Gpt<B>,
        rank: usize,
        p: usize,
        v: usize,
        opt: AdamWConfig,
        tp: Option<(Arc<Communicator>, bool)>,
    ) -> Result<Self> {
        let n_layer = model.config.n_layer;
        let pieces = p * v;
        if p == 0 || v == 0 || rank >= p || pieces > n_layer {
            return Err(Error::invalid(
                "PipelineStage::new",
                format!(
                    "stage {rank} of p = {p} with v = {v}: need rank < p and p·v <= n_layer = {n_layer}"
                ),
            ));
        }
        let backend = model.wte.weight.value.backend().clone();
        // Whatever keeps the single-device shape after slicing is a full copy.
        let full: HashMap<String, Vec<usize>> = model
            .params()
            .iter()
            .map(|p| (p.name.clone(), p.value.dims().to_vec()))
            .collect();
        let st = model.into_stages(&split_layers(n_layer, pieces))?;
        let mine = st
            .blocks
            .into_iter()
            .enumerate()
            .filter(|(k, _)| k % p == rank)
            .map(|(_, b)| b);
        let (embedding, chunks, head) = stage_parts(st.embedding, mine, st.head, &tp)?;
        let mut stage = PipelineStage {
            rank,
            p,
            v,
            config: st.config,
            embedding: (rank == 0).then_some(embedding),
            chunks,
            head: (rank == p - 1).then_some(head),
            opt: AdamW::new(opt),
            backend,
            tp,
            replicated: BTreeSet::new(),
            mailbox: HashMap::new(),
            outbox: HashMap::new(),
            recompute: Vec::new(),
            owners: None,
            bucket_bytes: brrr_dp::DEFAULT_BUCKET_BYTES,
        };
        if stage.tp_size() > 1 {
            stage.replicated = stage
                .params()
                .iter()
                .filter(|p| full.get(&p.name).map(Vec::as_slice) == Some(p.value.dims()))
                .map(|p| p.name.clone())
                .collect();
        }
        Ok(stage)
    }

    /// The data-parallel dimension: gradients averaged over the replicas in buckets of
    /// `bucket_bytes`, and with `zero1` (ZeRO stage 1, `brrr_dp::ParamOwners`) each
    /// parameter's moments kept by one of the `world` replicas (this is `rank`).
    pub fn set_data_parallel(
        &mut self,
        bucket_bytes: usize,
        zero1: Option<(usize, usize)>,
    ) -> Result<()> {
        self.bucket_bytes = bucket_bytes.max(1);
        self.owners = match zero1 {
            Some((rank, world)) => {
                let numels: Vec<usize> = self.params().iter().map(|p| p.numel()).collect();
                Some(ParamOwners::new(&numels, rank, world)?)
            }
            None => None,
        };
        Ok(())
    }

    /// The ZeRO-1 owners of this stage's parameters (`--zero 1`).
    pub fn owners(&self) -> Option<&ParamOwners> {
        self.owners.as_ref()
    }

    /// Every parameter's moments on the host, in parameter order (empty before the
    /// first step): this rank's own, or under `--zero 1` gathered from their owners
    /// (collective over `dp`: every replica of the stage calls it).
    pub fn gather_moments(&self, dp: &Communicator) -> Result<Vec<(Vec<f32>, Vec<f32>)>> {
        let params = self.params();
        let Some(o) = &self.owners else {
            return self
                .opt
                .f32_moments("pipeline checkpoint")?
                .into_iter()
                .map(|(m, v)| Ok((m.to_vec_f32()?, v.to_vec_f32()?)))
                .collect();
        };
        let mut out = Vec::new();
        for (i, p) in params.iter().enumerate() {
            match o.moments(dp, &self.opt, i, p.numel())? {
                Some(mv) => out.push(mv),
                None => return Ok(Vec::new()),
            }
        }
        Ok(out)
    }

    /// Activation recomputation: `plan()` makes the executor of one chunk (every chunk
    /// gets its own, since a micro-batch is in flight in several chunks at once);
    /// `None` from it turns recomputation off. Its plan must be the whole model's
    /// (`brrr_train::TrainConfig::recompute`), so each stage recomputes the blocks one
    /// device does. Document masks are not recomputed: a masked batch is an error.
    pub fn set_recompute(&mut self, plan: impl Fn() -> Result<Option<Recompute<B>>>) -> Result<()> {
        self.recompute = (0..self.chunks.len())
            .map(|_| plan())
            .collect::<Result<Option<Vec<_>>>>()?
            .unwrap_or_default();
        Ok(())
    }

    /// Mixed precision (`--amp`) on this stage, as `brrr_amp::apply_policy` on one
    /// device: every parameter (the f32 pieces of the seed's model) becomes its f32
    /// master with a 16-bit compute copy, and every block's attention core takes the
    /// policy's dtype. Activations and their gradients then cross the stage boundaries
    /// in 16 bits.
    pub fn apply_policy(&mut self, policy: &brrr_amp::Policy) -> Result<()> {
        brrr_amp::apply_policy_to_params(policy, self.params_mut())?;
        let core = brrr_amp::attention_core_dtype(policy);
        for chunk in &mut self.chunks {
            for attn in chunk.attentions_mut() {
                attn.core_dtype = core;
            }
        }
        Ok(())
    }

    /// Ranks in this stage's tensor-parallel group (1 without tensor parallelism).
    pub fn tp_size(&self) -> usize {
        self.tp.as_ref().map_or(1, |(c, _)| c.world_size())
    }

    /// This rank's index in its stage's tensor-parallel group (0 without one).
    pub fn tp_rank(&self) -> usize {
        self.tp.as_ref().map_or(0, |(c, _)| c.rank())
    }

    /// Whether the residual stream is sequence-sharded over the tensor-parallel group.
    pub fn sequence_parallel(&self) -> bool {
        self.tp.as_ref().is_some_and(|(_, sp)| *sp)
    }

    /// Whether the parameter `name` is a full copy on every tensor rank of the stage
    /// (false for every parameter without tensor parallelism).
    pub fn is_replicated(&self, name: &str) -> bool {
        self.replicated.contains(name)
    }

    /// This stage's parameters: embeddings, chunks in order, head (its tied `wte`
    /// copy first).
    pub fn params(&self) -> Vec<&Param<B>> {
        let mut v = Vec::new();
        if let Some(e) = &self.embedding {
            v.extend(e.params());
        }
        for c in &self.chunks {
            v.extend(c.params());
        }
        if let Some(h) = &self.head {
            v.extend(h.params());
        }
        v
    }

    /// [`PipelineStage::params`], mutable.
    pub fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = Vec::new();
        if let Some(e) = &mut self.embedding {
            v.extend(e.params_mut());
        }
        for c in &mut self.chunks {
            v.extend(c.params_mut());
        }
        if let Some(h) = &mut self.head {
            v.extend(h.params_mut());
        }
        v
    }

    /// The backend this stage runs on.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Every parameter's name and gradient, read to the host.
    pub fn named_grads(&self) -> Result<Vec<(String, Vec<f32>)>> {
        self.params()
            .iter()
            .map(|p| Ok((p.name.clone(), p.grad.to_vec_f32()?)))
            .collect()
    }

    /// Runs this stage's list of `s` for one step: zeroes the gradients, then each
    /// action in order. `data[mb]` is micro-batch `mb` (ids are read on stage 0,
    /// targets on the last); every backward seeds the loss gradient with `dloss` (for
    /// the mean over all tokens of the step, `1 / (tokens per micro-batch · m)`).
    pub fn run(
        &mut self,
        comm: &Communicator,
        s: &Schedule,
        data: &[MicroBatchData<B>],
        dloss: f32,
    ) -> Result<StageRun> {
        self.check(comm, s, data)?;
        self.zero_grad()?;
        self.mailbox.clear();
        self.outbox.clear();
        // Nothing of an earlier, failed step stays in flight.
        for r in &mut self.recompute {
            r.clear();
        }
        self.backend.reset_peak_memory();
        let start_bytes = self.backend.memory_stats().bytes_in_use;
        comm.barrier()?;
        let t0 = Instant::now();
        let mut run = StageRun {
            start_bytes,
            ..StageRun::default()
        };
        let mut flight = InFlight::default();
        for (i, &a) in s.stages[self.rank].iter().enumerate() {
            let start = t0.elapsed().as_secs_f64();
            self.act(comm, s, data, dloss, a, &mut run).map_err(|e| {
                Error::invalid(
                    "pipeline",
                    format!("stage {}, action #{i} {a}: {e}", self.rank),
                )
            })?;
            if a.is_compute() {
                flight.apply(&a);
                run.spans.push(Span {
                    stage: self.rank,
                    action: a,
                    start,
                    end: t0.elapsed().as_secs_f64(),
                });
            }
        }
        if let Some(k) = self.outbox.keys().next() {
            return Err(Error::invalid(
                "pipeline",
                format!("stage {}: an output no action used: {k:?}", self.rank),
            ));
        }
        run.peak_in_flight = flight.peak;
        run.peak_bytes = self.backend.memory_stats().peak_bytes;
        Ok(run)
    }

    fn check(&self, comm: &Communicator, s: &Schedule, data: &[MicroBatchData<B>]) -> Result<()> {
        if s.p != self.p || s.v != self.v || s.stages.len() != self.p {
            return Err(Error::invalid(
                "PipelineStage::run",
                format!(
                    "a schedule for p = {}, v = {} on a pipeline of p = {}, v = {}",
                    s.p, s.v, self.p, self.v
                ),
            ));
        }
        if comm.world_size() != self.p || comm.rank() != self.rank {
            return Err(Error::invalid(
                "PipelineStage::run",
                format!(
                    "stage {} of {} needs the pipeline group's communicator (got rank {} of {})",
                    self.rank,
                    self.p,
                    comm.rank(),
                    comm.world_size()
                ),
            ));
        }
        if data.len() != s.m {
            return Err(Error::invalid(
                "PipelineStage::run",
                format!(
                    "{} micro-batches of data for a schedule of m = {}",
                    data.len(),
                    s.m
                ),
            ));
        }
        crate::validate(s).map_err(|e| Error::invalid("PipelineStage::run", e.to_string()))
    }

    fn act(
        &mut self,
        comm: &Communicator,
        s: &Schedule,
        data: &[MicroBatchData<B>],
        dloss: f32,
        a: Action,
        run: &mut StageRun,
    ) -> Result<()> {
        let piece = s.piece(self.rank, a.chunk());
        let (mb, chunk) = (a.mb(), a.chunk() as usize);
        match a {
            Action::F { .. } => {
                if let Some(loss) =
                    self.forward(mb, chunk, piece, s.pieces(), &data[mb as usize])?
                {
                    *run.loss_sum.get_or_insert(0.0) += loss;
                }
            }
            Action::BW { .. } => self.backward(mb, chunk, piece, s.pieces(), dloss, false)?,
            Action::B { .. } => self.backward(mb, chunk, piece, s.pieces(), dloss, true)?,
            Action::W { .. } => self.backward_weight(mb, chunk, piece, s.pieces())?,
            Action::SendAct { to, .. } => {
                let t = self.take(false, mb, piece + 1)?;
                self.send(comm, to, ACT, mb, s.place(piece + 1).1, &t)?;
            }
            Action::SendGrad { to, .. } => {
                let t = self.take(true, mb, piece - 1)?;
                self.send(comm, to, GRAD, mb, s.place(piece - 1).1, &t)?;
            }
            Action::RecvAct { from, .. } => {
                let t = self.recv(comm, from, ACT, mb, a.chunk(), data)?;
                self.outbox.insert((false, mb, piece), t);
            }
            Action::RecvGrad { from, .. } => {
                let t = self.recv(comm, from, GRAD, mb, a.chunk(), data)?;
                self.outbox.insert((true, mb, piece), t);
            }
        }
        Ok(())
    }

    fn take(&mut self, grad: bool, mb: u32, piece: usize) -> Result<Tensor<B>> {
        self.outbox.remove(&(grad, mb, piece)).ok_or_else(|| {
            Error::invalid(
                "pipeline",
                format!(
                    "no {} of micro-batch {mb} for model piece {piece} has been computed or received",
                    if grad { "gradient" } else { "activation" }
                ),
            )
        })
    }

    /// Forward of piece `piece` (chunk `chunk` here); the loss mean if it is the last.
    fn forward(
        &mut self,
        mb: u32,
        chunk: usize,
        piece: usize,
        pieces: usize,
        data: &MicroBatchData<B>,
    ) -> Result<Option<f64>> {
        let id = MicroBatch(mb);
        let (positions, segments) = match &data.mask {
            Some((p, s)) => (Some(p), Some(s)),
            None => (None, None),
        };
        let x = match (&mut self.embedding, piece) {
            (Some(e), 0) => e.forward(id, &data.ids, positions)?,
            _ => self.take(false, mb, piece)?,
        };
        if !self.recompute.is_empty() {
            return self.forward_recomputed(mb, chunk, (piece, pieces), x, data);
        }
        let y = self.chunks[chunk].forward_packed(id, &x, segments)?;
        if piece + 1 < pieces {
            self.outbox.insert((false, mb, piece + 1), y);
            return Ok(None);
        }
        let head = self
            .head
            .as_mut()
            .ok_or_else(|| Error::invalid("pipeline", "the last piece has no head"))?;
        let losses = head.forward_loss(id, &y, &data.targets)?;
        let mean = losses.mean_all()?.to_vec_f32()?;
        Ok(Some(f64::from(mean[0])))
    }

    /// The backward of piece `piece` (chunk `chunk` here): the whole of it, or with
    /// `input_only` the zero-bubble B, whose weight gradients wait for
    /// [`PipelineStage::backward_weight`].
    fn backward(
        &mut self,
        mb: u32,
        chunk: usize,
        piece: usize,
        pieces: usize,
        dloss: f32,
        input_only: bool,
    ) -> Result<()> {
        let id = MicroBatch(mb);
        if !self.recompute.is_empty() {
            let dx = self.backward_recomputed(mb, chunk, (piece, pieces), dloss, input_only)?;
            return self.finish_backward(mb, piece, dx);
        }
        let dy = if piece + 1 == pieces {
            let head = self
                .head
                .as_mut()
                .ok_or_else(|| Error::invalid("pipeline", "the last piece has no head"))?;
            if input_only {
                head.backward_input(id, dloss)?
            } else {
                head.backward(id, dloss)?
            }
        } else {
            self.take(true, mb, piece)?
        };
        let dx = if input_only {
            self.chunks[chunk].backward_input(id, &dy)?
        } else {
            self.chunks[chunk].backward(id, &dy)?
        };
        self.finish_backward(mb, piece, dx)
    }

    /// The gradient of piece `piece`'s input: into the embeddings on the first piece,
    /// else out to the previous piece.
    fn finish_backward(&mut self, mb: u32, piece: usize, dx: Tensor<B>) -> Result<()> {
        match (&mut self.embedding, piece) {
            (Some(e), 0) => e.backward(MicroBatch(mb), &dx),
            _ => {
                self.outbox.insert((true, mb, piece - 1), dx);
                Ok(())
            }
        }
    }

    /// [`PipelineStage::forward`] under recomputation, from the chunk's input `x`:
    /// the executor runs the chunk's blocks (and the head on the last piece).
    fn forward_recomputed(
        &mut self,
        mb: u32,
        chunk: usize,
        (piece, pieces): (usize, usize),
        x: Tensor<B>,
        data: &MicroBatchData<B>,
    ) -> Result<Option<f64>> {
        let last = piece + 1 == pieces;
        if data.mask.is_some() {
            return Err(Error::invalid(
                "pipeline",
                "document masks with --checkpoint are not supported: use --checkpoint none",
            ));
        }
        let n_layer = self.config.n_layer;
        let blocks = &mut self.chunks[chunk];
        let layers = blocks.layers();
        let end = if last { n_layer + 1 } else { layers.end };
        let mut walk = ChunkWalk {
            blocks,
            head: self.head.as_mut().filter(|_| last),
            n_layer,
            input_only: false,
        };
        let targets = last.then_some(&data.targets);
        let y = self.recompute[chunk].forward_range(
            &mut walk,
            MicroBatch(mb),
            layers.start..end,
            x,
            targets,
            &mut |_| {},
        )?;
        if !last {
            self.outbox.insert((false, mb, piece + 1), y);
            return Ok(None);
        }
        Ok(Some(f64::from(y.mean_all()?.to_vec_f32()?[0])))
    }

    /// [`PipelineStage::backward`] under recomputation: the executor's backward of the
    /// chunk from the loss (last piece) or the gradient the next piece sent. Returns
    /// the gradient of the chunk's input.
    fn backward_recomputed(
        &mut self,
        mb: u32,
        chunk: usize,
        (piece, pieces): (usize, usize),
        dloss: f32,
        input_only: bool,
    ) -> Result<Tensor<B>> {
        let last = piece + 1 == pieces;
        let seed = match last {
            true => Seed::Loss(dloss),
            false => Seed::Grad(self.take(true, mb, piece)?),
        };
        let mut walk = ChunkWalk {
            blocks: &mut self.chunks[chunk],
            head: self.head.as_mut().filter(|_| last),
            n_layer: self.config.n_layer,
            input_only,
        };
        self.recompute[chunk].backward_range(&mut walk, MicroBatch(mb), seed, &mut |_| {})
    }

    /// The zero-bubble W of piece `piece`: the weight gradients its B deferred.
    fn backward_weight(
        &mut self,
        mb: u32,
        chunk: usize,
        piece: usize,
        pieces: usize,
    ) -> Result<()> {
        let id = MicroBatch(mb);
        if piece + 1 == pieces {
            let head = self
                .head
                .as_mut()
                .ok_or_else(|| Error::invalid("pipeline", "the last piece has no head"))?;
            head.backward_weight(id)?;
        }
        self.chunks[chunk].backward_weight(id)
    }

    fn send(
        &self,
        comm: &Communicator,
        to: usize,
        kind: f32,
        mb: u32,
        chunk: u32,
        t: &Tensor<B>,
    ) -> Result<()> {
        let mut msg = vec![kind, mb as f32, chunk as f32];
        msg.extend(t.to_vec_f32()?);
        Ok(comm.send(to, &msg)?)
    }

    /// Receives the message `(kind, mb, chunk)` from `from`, keeping any other that
    /// arrives first for the action that wants it.
    fn recv(
        &mut self,
        comm: &Communicator,
        from: usize,
        kind: f32,
        mb: u32,
        chunk: u32,
        data: &[MicroBatchData<B>],
    ) -> Result<Tensor<B>> {
        let dims = data[mb as usize].ids.dims();
        let (b, t, c) = (dims[0], dims[1], self.config.n_embd);
        // Under sequence parallelism each tensor rank passes its sequence shard.
        let t = if self.sequence_parallel() {
            t / self.tp_size()
        } else {
            t
        };
        let key = (from, kind as u32, mb, chunk);
        let body = loop {
            if let Some(body) = self.mailbox.remove(&key) {
                break body;
            }
            let mut buf = vec![0.0f32; 3 + b * t * c];
            comm.recv(from, &mut buf)?;
            let got = (from, buf[0] as u32, buf[1] as u32, buf[2] as u32);
            self.mailbox.insert(got, buf.split_off(3));
        };
        Tensor::from_f32(&self.backend, &body, [b, t, c], self.dtype())
    }

    fn dtype(&self) -> DType {
        self.params()
            .first()
            .map_or(DType::F32, |p| p.value.dtype())
    }

    fn zero_grad(&mut self) -> Result<()> {
        brrr_nn::zero_grads(self.params_mut())
    }

    /// The mean loss over `data` with forwards only (validation): each micro-batch
    /// goes through the pieces in order, the last stage computes the loss, and nothing
    /// is kept for a backward. Returns the mean of the micro-batches' mean losses on
    /// every stage of `comm` (broadcast from the last).
    pub fn eval_loss(&mut self, comm: &Communicator, data: &[MicroBatchData<B>]) -> Result<f64> {
        let (p, pieces) = (self.p, self.p * self.v);
        let mut actions = Vec::new();
        for mb in 0..data.len() as u32 {
            for piece in (0..pieces).filter(|k| k % p == self.rank) {
                let chunk = (piece / p) as u32;
                if piece > 0 && p > 1 {
                    let from = (piece - 1) % p;
                    actions.push(Action::RecvAct { mb, chunk, from });
                }
                actions.push(Action::F { mb, chunk });
                if piece + 1 < pieces && p > 1 {
                    let to = (piece + 1) % p;
                    actions.push(Action::SendAct { mb, chunk, to });
                }
            }
        }
        let s = Schedule {
            kind: crate::ScheduleKind::Custom,
            p,
            v: self.v,
            m: data.len(),
            stages: Vec::new(),
        };
        self.mailbox.clear();
        self.outbox.clear();
        let mut run = StageRun::default();
        // Nothing is kept for a backward: no recomputation plan applies.
        let recompute = std::mem::take(&mut self.recompute);
        let out = actions
            .into_iter()
            .try_for_each(|a| self.act(comm, &s, data, 0.0, a, &mut run));
        self.recompute = recompute;
        self.clear_saved();
        out?;
        let mut buf = [(run.loss_sum.unwrap_or(0.0) / data.len().max(1) as f64) as f32];
        comm.broadcast(&mut buf, p - 1)?;
        Ok(f64::from(buf[0]))
    }

    /// Drops every activation this stage saved (and any pending W).
    fn clear_saved(&mut self) {
        if let Some(e) = &mut self.embedding {
            e.clear_saved();
        }
        for c in &mut self.chunks {
            c.clear_saved();
        }
        if let Some(h) = &mut self.head {
            h.clear_saved();
        }
    }

    /// Sums the tied embedding/head gradients (stage 0 and stage `p − 1` exchange
    /// theirs; both then hold `embedding + head`, bitwise equal), then averages every
    /// gradient over `dp` when given (a plain loop; `brrr-dp` owns the bucketed one).
    ///
    /// With tensor parallelism `pp` joins the stages' ranks of one tensor rank, whose
    /// embedding and head hold the same vocabulary rows, so the exchange pairs shard
    /// with shard. Under sequence parallelism the replicated parameters' gradients
    /// first are summed over the tensor-parallel group (each rank's covers only its
    /// sequence shard); without it they are already complete, and equal, on every rank.
    pub fn reduce_grads(&mut self, pp: &Communicator, dp: Option<&Communicator>) -> Result<()> {
        self.reduce_replicated_grads()?;
        if self.p == 1 {
            if let (Some(e), Some(h)) = (&mut self.embedding, &mut self.head) {
                let (e, h) = (&mut e.tied_mut().grad, &mut h.tied_mut().grad);
                let (e_old, h_old) = (e.deep_clone()?, h.deep_clone()?);
                e.add_(&h_old)?;
                h.add_(&e_old)?;
            }
        } else if let Some(e) = &mut self.embedding {
            exchange_add(pp, self.p - 1, &mut e.tied_mut().grad)?;
        } else if let Some(h) = &mut self.head {
            exchange_add(pp, 0, &mut h.tied_mut().grad)?;
        }
        if let Some(dp) = dp {
            let bucket = self.bucket_bytes;
            brrr_dp::average_grads(dp, &mut self.params_mut(), bucket)?;
        }
        Ok(())
    }

    /// Sequence parallelism: sums the replicated parameters' partial gradients over
    /// the tensor-parallel group (one packed all-reduce). Nothing to do otherwise.
    fn reduce_replicated_grads(&mut self) -> Result<()> {
        let comm = match &self.tp {
            Some((comm, true)) if comm.world_size() > 1 => comm.clone(),
            _ => return Ok(()),
        };
        let replicated = self.replicated.clone();
        let mut params: Vec<&mut Param<B>> = self
            .params_mut()
            .into_iter()
            .filter(|p| replicated.contains(&p.name))
            .collect();
        let mut flat = Vec::new();
        for p in &params {
            flat.extend(p.grad.to_vec_f32()?);
        }
        comm.all_reduce(&mut flat, ReduceOp::Sum)?;
        let mut at = 0;
        for p in params.iter_mut() {
            let n = p.grad.elem_count();
            let g = &p.grad;
            p.grad =
                Tensor::from_f32(g.backend(), &flat[at..at + n], g.shape().clone(), g.dtype())?;
            at += n;
        }
        Ok(())
    }

    /// The global gradient norm over the whole pipeline (the head's tied copy counted
    /// once, through the embedding's) and, with tensor parallelism, over every tensor
    /// rank: each shard counted on its own rank, each replicated parameter once (on
    /// tensor rank 0).
    pub fn grad_norm(&self, pp: &Communicator) -> Result<f64> {
        let mut sq = 0.0f64;
        let tied = self.head.as_ref().map(|h| h.tied() as *const Param<B>);
        let first_tp = self.tp_rank() == 0;
        for p in self.params() {
            if Some(p as *const Param<B>) == tied || (!first_tp && self.is_replicated(&p.name)) {
                continue;
            }
            for g in p.grad.to_vec_f32()? {
                sq += f64::from(g) * f64::from(g);
            }
        }
        let mut buf = [sq as f32];
        pp.all_reduce(&mut buf, ReduceOp::Sum)?;
        if let Some((tp, _)) = self.tp.as_ref().filter(|(c, _)| c.world_size() > 1) {
            tp.all_reduce(&mut buf, ReduceOp::Sum)?;
        }
        Ok(f64::from(buf[0]).sqrt())
    }

    /// Clips to `max_norm` (0: no clipping) by the global norm and takes one AdamW step
    /// at `lr`; returns the norm before clipping.
    pub fn update(&mut self, pp: &Communicator, lr: f32, max_norm: f64) -> Result<f64> {
        self.update_scaled(pp, None, lr, max_norm, None)
    }

    /// [`PipelineStage::update`] that a non-zero `found_inf` (f32, one element: the
    /// loss scaler's overflow flag, agreed by every rank) turns into no update at all,
    /// as `brrr_nn::AdamW::step_scaled` does. The optimizer's step count still moves:
    /// the caller takes a skipped step back. Under `--zero 1` the owners update and
    /// broadcast over `dp`, which is then required.
    pub fn update_scaled(
        &mut self,
        pp: &Communicator,
        dp: Option<&Communicator>,
        lr: f32,
        max_norm: f64,
        found_inf: Option<&Tensor<B>>,
    ) -> Result<f64> {
        let norm = self.grad_norm(pp)?;
        let coef = if max_norm > 0.0 {
            (max_norm / (norm + 1e-6)).min(1.0)
        } else {
            1.0
        };
        let params = {
            let mut v = Vec::new();
            if let Some(e) = &mut self.embedding {
                v.extend(e.params_mut());
            }
            for c in &mut self.chunks {
                v.extend(c.params_mut());
            }
            if let Some(h) = &mut self.head {
                v.extend(h.params_mut());
            }
            v
        };
        match (&self.owners, dp) {
            (None, _) => self
                .opt
                .step_scaled(params, lr, coef as f32, None, found_inf)?,
            (Some(o), Some(dp)) => {
                o.step(dp, &mut self.opt, params, lr, coef as f32, None, found_inf)?
            }
            (Some(_), None) => {
                return Err(Error::invalid(
                    "PipelineStage::update",
                    "--zero 1 needs the data-parallel group",
                ));
            }
        }
        Ok(norm)
    }
}

/// Sends `grad` to `peer`, receives the peer's, and adds it: both ranks end with the
/// same sum (float addition commutes).
fn exchange_add<B: Backend>(comm: &Communicator, peer: usize, grad: &mut Tensor<B>) -> Result<()> {
    let mine = grad.to_vec_f32()?;
    comm.send(peer, &mine)?;
    let mut theirs = vec![0.0f32; mine.len()];
    comm.recv(peer, &mut theirs)?;
    let t = Tensor::from_f32(grad.backend(), &theirs, grad.shape().clone(), grad.dtype())?;
    grad.add_(&t)
}

/// The step's mean loss on every rank of the pipeline: the last stage's sum over
/// micro-batches divided by `m`, broadcast over `pp`, then averaged over `dp`.
pub fn step_loss(
    run: &StageRun,
    m: usize,
    pp: &Communicator,
    dp: Option<&Communicator>,
) -> Result<f64> {
    let mut buf = [(run.loss_sum.unwrap_or(0.0) / m as f64) as f32];
    pp.broadcast(&mut buf, pp.world_size() - 1)?;
    if let Some(dp) = dp.filter(|d| d.world_size() > 1) {
        dp.all_reduce(&mut buf, ReduceOp::Avg)?;
    }
    Ok(f64::from(buf[0]))
}

/// Gathers every stage's spans on stage 0 of `pp` into one measured [`Timeline`]
/// (seconds); `None` on the other stages.
pub fn gather_timeline(pp: &Communicator, spans: &[Span]) -> Result<Option<Timeline>> {
    let encode = |s: &Span| {
        let code = match s.action {
            Action::F { .. } => 0.0,
            Action::B { .. } => 1.0,
            Action::W { .. } => 2.0,
            _ => 3.0,
        };
        [
            s.stage as f32,
            code,
            s.action.mb() as f32,
            s.action.chunk() as f32,
            s.start as f32,
            s.end as f32,
        ]
    };
    if pp.rank() != 0 {
        pp.send(0, &[spans.len() as f32])?;
        let flat: Vec<f32> = spans.iter().flat_map(encode).collect();
        pp.send(0, &flat)?;
        return Ok(None);
    }
    let mut all: Vec<Span> = spans.to_vec();
    for r in 1..pp.world_size() {
        let mut n = [0.0f32];
        pp.recv(r, &mut n)?;
        let mut flat = vec![0.0f32; 6 * n[0] as usize];
        pp.recv(r, &mut flat)?;
        for x in flat.chunks_exact(6) {
            let (mb, chunk) = (x[2] as u32, x[3] as u32);
            let action = match x[1] as u32 {
                0 => Action::F { mb, chunk },
                1 => Action::B { mb, chunk },
                2 => Action::W { mb, chunk },
                _ => Action::BW { mb, chunk },
            };
            all.push(Span {
                stage: x[0] as usize,
                action,
                start: f64::from(x[4]),
                end: f64::from(x[5]),
            });
        }
    }
    Ok(Some(Timeline::from_spans(pp.world_size(), all)))
}
