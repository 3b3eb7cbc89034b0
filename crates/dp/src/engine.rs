//! [`DataParallel`]: one rank's side of a data-parallel run. Every rank builds the same
//! GPT, trains on its rows of the same global batch, and keeps the replicas equal by
//! communicating gradients (and, with ZeRO, parameters) over a [`Communicator`].

use crate::bucket::{Bucket, assign_buckets, chunk_len, padded_len};
use crate::config::DpConfig;
use crate::layout::{FlatLayout, Pieces, Segment, covered_len, segments};
use crate::model::ReplicaModel;
use crate::overlap::hidden_fraction;
use crate::walk::Walk;
use brrr_amp::DynamicLossScaler;
use brrr_backend::{AdamWParams, Backend, DType, ElemRange, Error, Result};
use brrr_checkpoint::Recompute;
use brrr_collectives::{CommStats, Communicator, Handle, ReduceOp};
use brrr_nn::{AdamW, AdamWConfig, Gpt, MicroBatch, Module, Param, clip_grad_norm_on_device, walk};
use brrr_perf::trace::Tracer;
use brrr_tensor::Tensor;
use brrr_train::{Batch, BatchSource, StepStats, TrainConfig, upload_mask};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::Instant;

/// What one step measured beyond [`StepStats`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepReport {
    /// What the gradient/parameter communicator moved during the step (the loss and the
    /// gradient norm go over a second communicator and are not counted here).
    pub comm: CommStats,
    /// Device bytes in use after the step: the model states (parameters, gradients,
    /// moments, with ZeRO their shards), activations having been freed.
    pub model_state_bytes: u64,
    /// The device's peak bytes during the step.
    pub peak_bytes: u64,
    /// Each bucket collective's (start, end), seconds from the engine's creation.
    pub comm_spans: Vec<(f64, f64)>,
    /// The last micro-batch's backward, (start, end) on the same clock.
    pub backward_span: (f64, f64),
    /// The fraction of the bucket collectives' time spent while the backward ran.
    pub hidden_fraction: f64,
    /// Stage 3: seconds the parameter all-gathers took on the communicator's thread
    /// (forward and backward, every micro-batch).
    pub gather_seconds: f64,
    /// Stage 3: of those, seconds the compute waited for them (each gather's wait,
    /// capped at its duration): the part prefetching did not hide.
    pub gather_exposed_seconds: f64,
    /// Stage 3: the most blocks whose gathered parameters were on the device at once
    /// during the forward and backward (2 with prefetching, 1 without).
    pub max_blocks_gathered: usize,
}

impl StepReport {
    /// Stage 3: the fraction of the all-gathers' time hidden behind compute,
    /// `1 - exposed / total` (0 when nothing was gathered).
    pub fn gather_hidden_fraction(&self) -> f64 {
        match self.gather_seconds > 0.0 {
            true => (1.0 - self.gather_exposed_seconds / self.gather_seconds).clamp(0.0, 1.0),
            false => 0.0,
        }
    }
}

/// A rank's shard of one bucket (ZeRO stages 1-3).
pub(crate) struct GroupShard<B: Backend> {
    pub(crate) segments: Vec<Segment>,
    /// AdamW's two moments for the chunk's parameter elements (the segments laid end to
    /// end, [`covered_len`] elements: no padding), one flat buffer each; AdamW updates
    /// each segment in place through [`AdamWParams::range`].
    pub(crate) moments: (Tensor<B>, Tensor<B>),
    /// The averaged gradient chunk, after the reduce-scatter.
    pub(crate) grad: Option<Tensor<B>>,
    /// Stage 3: this rank's chunk of the parameters (the only copy between uses; with
    /// `--amp`, the f32 master of the chunk).
    pub(crate) param: Option<Tensor<B>>,
    /// With `--amp` at stages 1-2: the f32 master of this rank's chunk, the only f32
    /// copy of these parameters on this rank (the model holds 16-bit copies).
    pub(crate) master: Option<Tensor<B>>,
}

/// What an optimizer update reports.
pub(crate) struct Update {
    /// The global gradient norm before clipping (after unscaling).
    pub(crate) norm: f64,
    /// The loss scale after the step (1 without scaling).
    pub(crate) loss_scale: f32,
    /// Whether an overflow on some rank skipped the step on every rank.
    pub(crate) skipped: bool,
}

/// A bucket collective in flight: its bucket and its result with (start, end) times.
pub(crate) type Pending = (usize, Handle<(Vec<f32>, f64, f64)>);

/// Stage 3: a bucket's all-gather in flight on the communicator's thread: its bucket,
/// and the gathered parameters already uploaded to the device (one tensor per
/// parameter) with the gather's (start, end) times.
pub(crate) type Gathering<B> = (usize, Handle<(Result<Vec<Tensor<B>>>, f64, f64)>);

/// One rank of a data-parallel run (DDP, or ZeRO stage 1, 2 or 3) of a whole GPT or
/// (`--dp × --tp`) of its tensor-parallel shards: see [`ReplicaModel`].
pub struct DataParallel<B: Backend, M: ReplicaModel<B> = Gpt<B>> {
    pub(crate) backend: B,
    pub(crate) config: TrainConfig,
    pub(crate) dp: DpConfig,
    pub(crate) rank: usize,
    /// Gradients and parameters: the traffic of [`StepReport::comm`].
    pub(crate) comm: Arc<Communicator>,
    /// Losses and norms (a few scalars per step).
    pub(crate) scalars: Communicator,
    pub(crate) model: M,
    /// Whether each parameter's gradient counts in this rank's part of the norm (a
    /// shard's replicated parameters count on the group's first rank only).
    pub(crate) counted: Vec<bool>,
    pub(crate) layout: FlatLayout,
    pub(crate) pieces: Pieces,
    pub(crate) groups: Vec<Bucket>,
    /// The whole optimizer (stage 0).
    pub(crate) opt: AdamW<B>,
    /// This rank's shards, one per bucket (stages 1-3).
    pub(crate) shards: Vec<GroupShard<B>>,
    pub(crate) adamw_step: u32,
    pub(crate) data: Box<dyn BatchSource>,
    pub(crate) step: u64,
    pub(crate) tracer: Arc<Tracer>,
    pub(crate) origin: Instant,
    pub(crate) report: StepReport,
    /// Stage 3: start each block's all-gather while the previous one computes.
    pub(crate) prefetch: bool,
    /// Stage 3: which buckets' full parameters are on the device now.
    pub(crate) gathered: Vec<bool>,
    /// `--amp fp16`'s dynamic loss scaler (the one-device trainer's).
    pub(crate) scaler: Option<DynamicLossScaler<B>>,
    /// The dtype layers compute with: f32, or `--amp`'s 16-bit format.
    pub(crate) compute: DType,
    /// See [`DataParallel::inject_overflow`].
    pub(crate) inject_inf: bool,
    /// The current micro-batch's document mask (positions, segment ids), uploaded.
    pub(crate) mask: Option<(Tensor<B>, Tensor<B>)>,
    /// The fixed validation batches of [`brrr_train::Engine::evaluate`].
    pub(crate) val: Vec<Batch>,
    /// Overlap summed over the steps timed by the engine loop (all but a run's first).
    pub(crate) timed: crate::run::Timed,
    /// `--checkpoint`: the executor that drops and recomputes blocks (one device's plan).
    pub(crate) recompute: Option<Recompute<B, M::Targets>>,
}

impl<B: Backend> DataParallel<B> {
    /// Rank `comm.rank()` of a run: the model initialised from `config.seed` as
    /// [`brrr_train::Trainer`] does, then broadcast from rank 0; buckets assigned; with
    /// ZeRO, this rank's shards made (and, at stage 3, the full parameters freed).
    /// `data` yields *global* batches of `config.batch_size` rows (the same on every
    /// rank); this rank trains on its `batch_size / world` rows of each.
    pub fn new(
        backend: &B,
        config: TrainConfig,
        dp: DpConfig,
        comm: &Communicator,
        data: Box<dyn BatchSource>,
    ) -> Result<Self> {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let mut model = Gpt::new(backend, config.model.clone(), DType::F32, &mut rng)?;
        model.set_fused_attention(config.fused_attention);
        DataParallel::with_model(backend, config, dp, comm, model, data)
    }
}

impl<B: Backend, M: ReplicaModel<B>> DataParallel<B, M> {
    /// [`DataParallel::new`] with a model the caller built (in f32, the same on every
    /// rank of `comm` up to rank 0's broadcast): a tensor-parallel shard, say, whose
    /// `comm` is then the data-parallel group of the shard's rank.
    pub fn with_model(
        backend: &B,
        config: TrainConfig,
        dp: DpConfig,
        comm: &Communicator,
        mut model: M,
        data: Box<dyn BatchSource>,
    ) -> Result<Self> {
        dp.validate_for(&config)?;
        if comm.world_size() != dp.world {
            return Err(Error::invalid(
                "dp",
                format!(
                    "--dp {} but the communicator has {} ranks",
                    dp.world,
                    comm.world_size()
                ),
            ));
        }
        let rank = comm.rank();
        let grads = Arc::new(comm.split(0, rank as u32)?);
        let scalars = comm.split(0, rank as u32)?;
        broadcast_params(&grads, &mut model)?;
        let layout = FlatLayout::of(&model)?;
        let pieces = model.pieces();
        let first_of_group = model.shard_group().is_none_or(|g| g.rank() == 0);
        let counted = model
            .replicated_params()
            .into_iter()
            .map(|r| first_of_group || !r)
            .collect();
        let groups = match dp.zero {
            3 => pieces.units(&layout),
            _ => assign_buckets(&layout.numels(), 4, dp.bucket_bytes, dp.first_bucket_bytes)?,
        };
        let opt = AdamW::new(AdamWConfig {
            weight_decay: config.weight_decay,
            ..AdamWConfig::default()
        });
        let scaler = match config.amp.scales_loss() {
            true => Some(DynamicLossScaler::new(backend, config.amp.scaler.clone())?),
            false => None,
        };
        let mut me = DataParallel {
            backend: backend.clone(),
            config,
            dp,
            rank,
            comm: grads,
            scalars,
            model,
            counted,
            layout,
            pieces,
            groups,
            opt,
            shards: Vec::new(),
            adamw_step: 0,
            data,
            step: 0,
            tracer: Arc::new(Tracer::disabled()),
            origin: Instant::now(),
            report: StepReport::default(),
            prefetch: true,
            gathered: Vec::new(),
            scaler,
            compute: DType::F32,
            inject_inf: false,
            mask: None,
            val: Vec::new(),
            timed: Default::default(),
            recompute: None,
        };
        me.recompute = me.config.recompute()?;
        me.make_shards()?;
        me.adopt_amp()?;
        me.comm.reset_stats();
        Ok(me)
    }

    fn make_shards(&mut self) -> Result<()> {
        if self.dp.zero == 0 {
            return Ok(());
        }
        for g in 0..self.groups.len() {
            let segs = segments(&self.layout, &self.groups[g], self.dp.world, self.rank);
            let z = || Tensor::zeros(&self.backend, [covered_len(&segs)], DType::F32);
            let moments = (z()?, z()?);
            let param = match self.dp.zero {
                3 => {
                    let chunk = self.group_chunk(g, |p| &p.value)?;
                    Some(Tensor::from_f32(
                        &self.backend,
                        &chunk,
                        [chunk.len()],
                        DType::F32,
                    )?)
                }
                _ => None,
            };
            self.shards.push(GroupShard {
                segments: segs,
                moments,
                grad: None,
                param,
                master: None,
            });
        }
        if self.dp.zero >= 2 {
            self.free_grads(0..self.layout.params.len())?;
        }
        if self.dp.zero == 3 {
            for g in 0..self.groups.len() {
                self.free_params(g)?;
            }
        }
        Ok(())
    }

    /// Records spans (per block of the backward, per bucket collective on the
    /// communicator's thread, the optimizer) into `tracer`.
    pub fn set_tracer(&mut self, tracer: Arc<Tracer>) {
        self.tracer = tracer;
    }

    /// Stage 3: whether the next block's all-gather runs while a block computes (on by
    /// default). Prefetching hides the gathers behind compute at the cost of a second
    /// block's parameters on the device; the results are the same bit for bit.
    pub fn set_prefetch(&mut self, on: bool) {
        self.prefetch = on;
    }

    /// The model (at stage 3 its parameters are empty between uses: see
    /// [`DataParallel::gather_all`]).
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The buckets in launch order (bucket 0 first).
    pub fn buckets(&self) -> &[Bucket] {
        &self.groups
    }

    /// The parameter layout.
    pub fn layout(&self) -> &FlatLayout {
        &self.layout
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The data-parallel layout.
    pub fn dp_config(&self) -> &DpConfig {
        &self.dp
    }

    /// The run's configuration.
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// Optimizer steps completed.
    pub fn steps_done(&self) -> u64 {
        self.step
    }

    /// What the last step measured.
    pub fn report(&self) -> &StepReport {
        &self.report
    }

    /// The batch source (its position goes into checkpoints).
    pub fn data(&self) -> &dyn BatchSource {
        self.data.as_ref()
    }

    /// One optimizer step over `grad_accum` micro-batches of the global batch. Gradients
    /// are communicated only after the last micro-batch's backward (`no_sync` on the
    /// others): each bucket's collective starts as soon as the backward has finished its
    /// gradients, and runs on the communicator's thread while the backward continues.
    pub fn step(&mut self) -> Result<StepStats> {
        let tracer = self.tracer.clone();
        let _step = tracer.span("step");
        let t0 = Instant::now();
        let lr = self.config.schedule().lr(self.step);
        self.comm.reset_stats();
        self.backend.reset_peak_memory();
        if self.dp.zero <= 1 {
            self.model.zero_grad()?;
        }
        let k = self.config.grad_accum;
        let rows = self.config.batch_size / self.dp.world;
        let dloss = 1.0 / ((rows * self.config.seq_len) as f32 * k as f32);
        // As the one-device trainer: every backward carries the loss scale (fp16).
        let loss_scale = self.scaler.as_ref().map_or(1.0, |s| s.scale());
        let dloss = if loss_scale == 1.0 {
            dloss
        } else {
            dloss * loss_scale
        };
        let mut loss_sum: Option<Tensor<B>> = None;
        let mut pending = Vec::new();
        let mut launched = vec![false; self.groups.len()];
        let recompute = match &mut self.recompute {
            // Nothing of an earlier, failed step stays in flight.
            Some(r) => {
                r.clear();
                true
            }
            None => false,
        };
        for mb in 0..k {
            let batch = self.local_batch()?;
            let targets = self.model.targets(&self.backend, &batch)?;
            self.mask = upload_mask(&self.backend, &batch)?;
            let mbid = MicroBatch(mb as u32);
            let losses = match recompute {
                true => self.forward_recomputed(mbid, &batch, &targets),
                false => self.forward(mbid, &batch, &targets),
            };
            self.end_mask();
            let mean = losses?.mean_all()?;
            match &mut loss_sum {
                None => loss_sum = Some(mean),
                Some(s) => s.add_(&mean)?,
            }
            let last = (mb + 1 == k).then_some((&mut pending, &mut launched));
            let bw = match recompute {
                true => self.backward_recomputed(mbid, dloss, last)?,
                false => self.backward(mbid, dloss, last)?,
            };
            self.report.backward_span = bw;
        }
        let loss_sum = loss_sum.ok_or_else(|| Error::invalid("dp", "no micro-batch"))?;
        let update = {
            self.finish_buckets(pending)?;
            self.report.comm = self.comm.stats();
            let tracer = self.tracer.clone();
            let _s = tracer.span("optimizer");
            match self.dp.zero {
                0 => self.replicated_update(lr)?,
                _ => self.sharded_update(lr)?,
            }
        };
        self.report.comm = self.comm.stats();
        let mut loss = [loss_sum.to_vec_f32()?[0]];
        self.scalars.all_reduce(&mut loss, ReduceOp::Avg)?;
        let loss = (f64::from(loss[0]) / k as f64) as f32;
        let m = self.backend.memory_stats();
        self.report.model_state_bytes = m.bytes_in_use;
        self.report.peak_bytes = m.peak_bytes;
        self.report.hidden_fraction =
            hidden_fraction(&self.report.comm_spans, self.report.backward_span);
        if !loss.is_finite() {
            return Err(Error::invalid(
                "train",
                format!("loss became {loss} at step {}; lower --lr", self.step + 1),
            ));
        }
        self.step += 1;
        Ok(StepStats {
            step: self.step,
            loss,
            grad_norm: update.norm,
            lr,
            tokens: self.config.tokens_per_step(),
            loss_scale: update.loss_scale,
            skipped: update.skipped,
            seconds: Some(t0.elapsed().as_secs_f64()),
            peak_bytes: m.peak_bytes,
            activation_peak_bytes: m.peak_bytes.saturating_sub(m.bytes_in_use),
        })
    }

    /// This rank's rows of the next global batch: rows `rank·b/world ..
    /// (rank+1)·b/world`, with their document mask if the source gives one. The source
    /// produces only those rows where it can ([`BatchSource::next_rows`]; a
    /// [`brrr_train::Batcher`] draws every row's position, to stay where the other ranks'
    /// generators are, and copies only its own); the union over the ranks is the global
    /// batch one device trains on.
    fn local_batch(&mut self) -> Result<Batch> {
        let (b, t) = (self.config.batch_size, self.config.seq_len);
        let rows = b / self.dp.world;
        let mine = self.rank * rows..(self.rank + 1) * rows;
        let batch = self.data.next_rows(mine.clone())?;
        if batch.batch != rows || batch.seq != t || batch.inputs.len() != rows * t {
            return Err(Error::shape(
                "dp",
                format!(
                    "asked the batch source for rows {mine:?} of {b}×{t}, it gave {}×{}",
                    batch.batch, batch.seq
                ),
            ));
        }
        Ok(batch)
    }

    /// The token and position embeddings of micro-batch `mb`'s rows `batch`. With a
    /// document mask the positions restart at each document and every block's attention
    /// gets the segment ids (what [`Gpt::forward_loss_packed_mb`] does, part by part);
    /// the blocks' saved state keeps the segments for their backward.
    pub(crate) fn embed(&mut self, mb: MicroBatch, batch: &Batch) -> Result<Tensor<B>> {
        let mask = self.mask.clone();
        self.model.embed(&self.backend, mb, batch, mask.as_ref())
    }

    /// Clears what [`DataParallel::embed`] set for a masked micro-batch.
    pub(crate) fn end_mask(&mut self) {
        if self.mask.take().is_some() {
            self.model.end_mask();
        }
    }

    /// The forward of micro-batch `mb`: the embeddings, then brrr-nn's plain walk over
    /// the blocks and the head ([`Walk`] gathers and frees each part's parameters at
    /// stage 3, the next part's gather in flight while one computes).
    fn forward(
        &mut self,
        mb: MicroBatch,
        batch: &Batch,
        targets: &M::Targets,
    ) -> Result<Tensor<B>> {
        let tracer = self.tracer.clone();
        let _s = tracer.span("forward");
        if mb.0 == 0 {
            self.report.gather_seconds = 0.0;
            self.report.gather_exposed_seconds = 0.0;
            self.report.max_blocks_gathered = 0;
        }
        let mut walk = Walk::new(self, None);
        let x0 = walk.embed(mb, batch)?;
        walk::forward_loss(&mut walk, mb, x0, targets)
    }

    /// The backward of micro-batch `mb`: brrr-nn's plain walk back to the first block's
    /// input, then the embeddings; with `launch` (the last micro-batch) each bucket's
    /// collective starts once its gradients are final. Returns the backward's (start,
    /// end).
    fn backward(
        &mut self,
        mb: MicroBatch,
        dloss: f32,
        launch: Option<(&mut Vec<Pending>, &mut Vec<bool>)>,
    ) -> Result<(f64, f64)> {
        let start = self.now();
        let mut walk = Walk::new(self, launch);
        let dx = walk::backward_to_input(&mut walk, mb, dloss)?;
        let launch = walk.into_launch();
        self.embed_backward(mb, &dx, launch)?;
        Ok((start, self.now()))
    }

    /// The embeddings' backward from the gradient of the first block's input, then the
    /// collective of their bucket (on the last micro-batch).
    pub(crate) fn embed_backward(
        &mut self,
        mb: MicroBatch,
        dx: &Tensor<B>,
        launch: Option<(&mut Vec<Pending>, &mut Vec<bool>)>,
    ) -> Result<()> {
        {
            let tracer = self.tracer.clone();
            let _s = tracer.span("backward embed");
            self.model.embed_backward(mb, dx)?;
        }
        match launch {
            Some((p, done)) => self.launch_ready(self.pieces.embed.start, p, done),
            None => Ok(()),
        }
    }

    pub(crate) fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    /// Stage 3's bucket for block `l` (buckets run head, last block, ..., embeddings).
    pub(crate) fn block_group(&self, l: usize) -> usize {
        self.pieces.blocks.len() - l
    }

    /// Starts the collective of every bucket whose parameters (from `final_from` on)
    /// all have final gradients.
    pub(crate) fn launch_ready(
        &mut self,
        final_from: usize,
        pending: &mut Vec<Pending>,
        launched: &mut [bool],
    ) -> Result<()> {
        for (g, done) in launched.iter_mut().enumerate() {
            if *done || self.groups[g].params.start < final_from {
                continue;
            }
            *done = true;
            let bucket = self.groups[g].clone();
            // A shard's gradients are whole over its group before replicas average them.
            self.model.complete_grads(bucket.params.clone())?;
            let mut data = Vec::with_capacity(padded_len(bucket.len(), self.dp.world));
            for p in &self.model.params()[bucket.params.clone()] {
                data.extend(p.grad.to_vec_f32()?);
            }
            if self.dp.zero >= 2 {
                self.free_grads(bucket.params.clone())?;
            }
            let (tracer, origin, zero) = (self.tracer.clone(), self.origin, self.dp.zero);
            let name = match zero {
                0 => format!("all-reduce bucket {g}"),
                _ => format!("reduce-scatter bucket {g}"),
            };
            data.resize(
                match zero {
                    0 => bucket.len(),
                    _ => padded_len(bucket.len(), self.dp.world),
                },
                0.0,
            );
            let h = self.comm.start(move |c| {
                let _s = tracer.span(name);
                let t0 = origin.elapsed().as_secs_f64();
                let out = match zero {
                    0 => {
                        c.all_reduce(&mut data, ReduceOp::Avg)?;
                        data
                    }
                    _ => c.reduce_scatter(&data, ReduceOp::Avg)?,
                };
                Ok((out, t0, origin.elapsed().as_secs_f64()))
            })?;
            pending.push((g, h));
        }
        Ok(())
    }

    /// Waits for every bucket; stage 0 writes the averaged gradients back, stages 1-3
    /// keep their averaged chunk.
    fn finish_buckets(&mut self, pending: Vec<Pending>) -> Result<()> {
        let _s = self.tracer.span("wait buckets");
        self.report.comm_spans.clear();
        for (g, h) in pending {
            let (data, t0, t1) = h.wait()?;
            self.report.comm_spans.push((t0, t1));
            if self.dp.zero == 0 {
                let bucket = self.groups[g].clone();
                let base = bucket.elems.start;
                let slots = self.layout.params[bucket.params.clone()].to_vec();
                let backend = self.backend.clone();
                let ps = self.model.params_mut();
                for (p, slot) in ps.into_iter().skip(bucket.params.start).zip(&slots) {
                    let r = slot.offset - base..slot.offset - base + slot.numel;
                    p.grad = Tensor::from_f32(&backend, &data[r], slot.dims.clone(), DType::F32)?;
                }
            } else {
                let t = Tensor::from_f32(&self.backend, &data, [data.len()], DType::F32)?;
                self.shards[g].grad = Some(t);
            }
        }
        Ok(())
    }

    /// Stage 0: unscaling (fp16), clipping and AdamW on the whole model, exactly as the
    /// one-device [`brrr_train::Trainer`] runs them; the overflow flag is every rank's.
    fn replicated_update(&mut self, lr: f64) -> Result<Update> {
        self.unscale_replicated()?;
        // The flag skips the update on the device (f32 masters and 16-bit copies alike).
        let found_inf = self.scaler.as_ref().map(|s| s.found_inf());
        let norm = match self.model.shard_group() {
            None => {
                let (norm, coef) =
                    clip_grad_norm_on_device(&self.model.params(), self.config.grad_clip)?;
                let params = self.model.params_mut();
                self.opt
                    .step_scaled(params, lr as f32, 1.0, Some(&coef), found_inf)?;
                f64::from(norm.to_vec_f32()?[0])
            }
            // A shard's norm is the whole model's: its part, summed over the group.
            Some(_) => {
                let mut ss = 0.0f64;
                for (p, _) in self
                    .model
                    .params()
                    .iter()
                    .zip(&self.counted)
                    .filter(|c| *c.1)
                {
                    ss += sum_sq(&p.grad.to_vec_f32()?);
                }
                let norm = self.shard_sum(ss)?.sqrt();
                let coef = (self.config.grad_clip / (norm + 1e-6)).min(1.0) as f32;
                let params = self.model.params_mut();
                self.opt
                    .step_scaled(params, lr as f32, coef, None, found_inf)?;
                norm
            }
        };
        let (loss_scale, skipped) = self.update_scale()?;
        if skipped {
            // A skipped step is no AdamW step: its bias-correction count stays (as the
            // one-device trainer).
            self.opt.step -= 1;
        }
        Ok(Update {
            norm,
            loss_scale,
            skipped,
        })
    }

    /// Stages 1-3: unscaling (fp16) of this rank's chunks, the global norm from every
    /// rank's chunk, AdamW on this rank's chunk of every bucket, then (stages 1-2) an
    /// all-gather of the updated parameters. A step skipped for an overflow (on any
    /// rank: the flag is all-reduced) changes nothing on any rank.
    fn sharded_update(&mut self, lr: f64) -> Result<Update> {
        self.unscale_shards()?;
        let mut ss = 0.0f64;
        let mut grads = Vec::with_capacity(self.groups.len());
        for s in &self.shards {
            let g = s
                .grad
                .as_ref()
                .ok_or_else(|| Error::invalid("dp", "a bucket was never reduced"))?
                .to_vec_f32()?;
            for seg in s.segments.iter().filter(|seg| self.counted[seg.param]) {
                ss += sum_sq(&g[seg.in_chunk.clone()]);
            }
            grads.push(g);
        }
        let mut total = [ss as f32];
        self.scalars.all_reduce(&mut total, ReduceOp::Sum)?;
        let norm = self.shard_sum(f64::from(total[0]))?.sqrt();
        let coef = (self.config.grad_clip / (norm + 1e-6)).min(1.0) as f32;
        let (loss_scale, skipped) = self.update_scale()?;
        if !skipped {
            self.adamw_step += 1;
        }
        for (g, grad) in grads.iter().enumerate() {
            if !skipped {
                self.update_group(g, grad, lr as f32, coef)?;
            }
            // Stage 1's gradient memory is the full buffer; the averaged chunk is
            // transient. Stages 2-3 keep the chunk: it is their gradient partition.
            if self.dp.zero == 1 {
                self.shards[g].grad = None;
            }
        }
        Ok(Update {
            norm,
            loss_scale,
            skipped,
        })
    }

    /// `x` summed over the shard group (`x` itself for a whole model): a shard's part
    /// of the squared gradient norm, made the whole model's.
    pub(crate) fn shard_sum(&self, x: f64) -> Result<f64> {
        let mut buf = [x as f32];
        if let Some(group) = self.model.shard_group() {
            group.all_reduce(&mut buf, ReduceOp::Sum)?;
        }
        Ok(f64::from(buf[0]))
    }

    /// AdamW on this rank's chunk of bucket `g` (its f32 master with `--amp`), then the
    /// new values where they live: stage 3 keeps the chunk; stages 1-2 all-gather it
    /// into every rank's (compute-dtype) parameters.
    ///
    /// The chunk, its gradient and the moments are flat buffers holding several
    /// parameters' segments; each segment is updated in place (its own weight decay),
    /// so the whole update costs one upload of the gradient and, at stages 1-2, one
    /// read of the new chunk, however many parameters the bucket holds.
    fn update_group(&mut self, g: usize, grad: &[f32], lr: f32, coef: f32) -> Result<()> {
        let had_master = self.shards[g].master.is_some();
        // Stage 3's chunk and `--amp`'s master already live on the device; otherwise
        // the chunk is read from the model's (f32) values.
        let mut chunk = match (self.shards[g].param.take(), self.shards[g].master.take()) {
            (Some(p), master) => {
                self.shards[g].master = master;
                p
            }
            (None, Some(m)) => m,
            (None, None) => {
                let host = self.group_chunk(g, |p| &p.value)?;
                Tensor::from_f32(&self.backend, &host, [host.len()], DType::F32)?
            }
        };
        self.update_chunk(g, &mut chunk, grad, lr, coef)?;
        if self.dp.zero == 3 {
            self.shards[g].param = Some(chunk);
            return Ok(());
        }
        let host = chunk.to_vec_f32()?;
        if had_master {
            self.shards[g].master = Some(chunk);
        }
        let full = self.comm.all_gather(&host)?;
        self.write_params(g, &full)
    }

    /// AdamW (the backend's fused kernel) on each parameter segment of bucket `g`'s
    /// chunk, in place: `chunk`, the gradient and the moments are flat, and each launch
    /// names its segment with [`AdamWParams::range`].
    fn update_chunk(
        &mut self,
        g: usize,
        chunk: &mut Tensor<B>,
        grad: &[f32],
        lr: f32,
        coef: f32,
    ) -> Result<()> {
        let c = self.opt.config;
        let backend = self.backend.clone();
        let grad = Tensor::from_f32(&backend, grad, [grad.len()], DType::F32)?;
        let shard = &mut self.shards[g];
        let (m, v) = &mut shard.moments;
        for seg in &shard.segments {
            let decays = self.layout.params[seg.param].dims.len() >= 2;
            let hp = AdamWParams {
                lr,
                beta1: c.beta1,
                beta2: c.beta2,
                eps: c.eps,
                weight_decay: if decays { c.weight_decay } else { 0.0 },
                step: self.adamw_step,
                grad_scale: coef,
                range: Some(ElemRange::new(seg.in_chunk.start, seg.in_chunk.len())),
            };
            backend.adamw(
                &hp,
                chunk.buffer_mut()?,
                grad.buffer()?,
                m.buffer_mut()?,
                v.buffer_mut()?,
                None,
                None,
            )?;
        }
        Ok(())
    }

    /// This rank's chunk (padded) of bucket `g`, read from each parameter's `which`.
    pub(crate) fn group_chunk(
        &self,
        g: usize,
        which: impl Fn(&Param<B>) -> &Tensor<B>,
    ) -> Result<Vec<f32>> {
        let ps = self.model.params();
        self.chunk_of(g, |i| which(ps[i]).to_vec_f32())
    }

    /// This rank's chunk (padded) of bucket `g` of a per-parameter quantity: `host(i)`
    /// is parameter `i`'s, on the host.
    pub(crate) fn chunk_of(
        &self,
        g: usize,
        host: impl Fn(usize) -> Result<Vec<f32>>,
    ) -> Result<Vec<f32>> {
        let bucket = &self.groups[g];
        let mut out = vec![0.0; chunk_len(bucket.len(), self.dp.world)];
        for seg in segments(&self.layout, bucket, self.dp.world, self.rank) {
            let h = host(seg.param)?;
            out[seg.in_chunk].copy_from_slice(&h[seg.in_param]);
        }
        Ok(out)
    }

    /// Replaces bucket `g`'s parameter values with `full` (the padded bucket, f32), in
    /// the compute dtype.
    pub(crate) fn write_params(&mut self, g: usize, full: &[f32]) -> Result<()> {
        let bucket = self.groups[g].clone();
        let base = bucket.elems.start;
        let backend = self.backend.clone();
        let slots = self.layout.params[bucket.params.clone()].to_vec();
        let ps = self.model.params_mut();
        for (p, slot) in ps.into_iter().skip(bucket.params.start).zip(&slots) {
            let r = slot.offset - base..slot.offset - base + slot.numel;
            // The compute copy: the f32 values, or (`--amp`) rounded once to 16 bits,
            // as `Backend::adamw_master` rounds them.
            p.value = Tensor::from_f32(&backend, &full[r], slot.dims.clone(), self.compute)?;
        }
        Ok(())
    }

    /// Stage 3: gathers bucket `g`'s parameters and waits for them (a no-op otherwise).
    pub(crate) fn gather_if_sharded(&mut self, g: usize) -> Result<()> {
        let h = self.start_gather(g)?;
        self.land_gather(h)
    }

    /// Stage 3: starts bucket `g`'s all-gather on the communicator's thread, which also
    /// uploads the gathered parameters to the device; `None` at other stages. Every rank
    /// starts the same gathers in the same order (among the bucket reduce-scatters,
    /// which share the thread's queue), so the collectives match up.
    fn start_gather(&mut self, g: usize) -> Result<Option<Gathering<B>>> {
        if self.dp.zero != 3 {
            return Ok(None);
        }
        let chunk = self.shards[g]
            .param
            .as_ref()
            .ok_or_else(|| Error::invalid("dp", "stage 3 lost a parameter shard"))?
            .to_vec_f32()?;
        // From here until it is freed, the bucket's full parameters may be on the device
        // (the communicator's thread uploads them as soon as they arrive).
        if self.gathered.len() != self.groups.len() {
            self.gathered = vec![false; self.groups.len()];
        }
        self.gathered[g] = true;
        // Blocks are buckets 1..=L (0 is the head, the last the embeddings).
        let blocks = (1..=self.pieces.blocks.len())
            .filter(|&b| self.gathered[b])
            .count();
        self.report.max_blocks_gathered = self.report.max_blocks_gathered.max(blocks);
        let bucket = self.groups[g].clone();
        let slots = self.layout.params[bucket.params.clone()].to_vec();
        let (backend, tracer, origin) = (self.backend.clone(), self.tracer.clone(), self.origin);
        // The compute copy's dtype: f32, or `--amp`'s 16 bits (rounded once, on upload).
        let compute = self.compute;
        let h = self.comm.start(move |c| {
            let _s = tracer.span(format!("all-gather bucket {g}"));
            let t0 = origin.elapsed().as_secs_f64();
            let full = c.all_gather(&chunk)?;
            let upload = bucket_views(
                &backend,
                &full[..bucket.len()],
                &slots,
                bucket.elems.start,
                compute,
            );
            Ok((upload, t0, origin.elapsed().as_secs_f64()))
        })?;
        Ok(Some((g, h)))
    }

    /// With prefetching, starts bucket `g`'s gather now, before the current unit
    /// computes: the next unit's parameters arrive while it does (two blocks gathered
    /// at once at most: the computing one and the next).
    pub(crate) fn prefetch_start(&mut self, g: usize) -> Result<Option<Gathering<B>>> {
        match self.prefetch {
            true => self.start_gather(g),
            false => Ok(None),
        }
    }

    /// Without prefetching, starts bucket `g`'s gather only now that the current unit
    /// is done (one block gathered at a time); with it, keeps `started`, the gather
    /// [`Self::prefetch_start`] began.
    pub(crate) fn late_start(
        &mut self,
        started: Option<Gathering<B>>,
        g: usize,
    ) -> Result<Option<Gathering<B>>> {
        match self.prefetch {
            true => Ok(started),
            false => self.start_gather(g),
        }
    }

    /// Waits for a gather and puts its parameters into the model; counts the time the
    /// wait exposed and how many blocks are gathered now.
    pub(crate) fn land_gather(&mut self, gathering: Option<Gathering<B>>) -> Result<()> {
        let Some((g, h)) = gathering else {
            return Ok(());
        };
        let waited = {
            let _s = self.tracer.span(format!("wait all-gather bucket {g}"));
            let t = Instant::now();
            let out = h.wait();
            (out, t.elapsed().as_secs_f64())
        };
        let ((tensors, t0, t1), waited) = (waited.0?, waited.1);
        let r = self.groups[g].params.clone();
        let ps = self.model.params_mut();
        for (p, t) in ps.into_iter().skip(r.start).take(r.len()).zip(tensors?) {
            p.value = t;
        }
        self.report.gather_seconds += t1 - t0;
        self.report.gather_exposed_seconds += waited.min(t1 - t0);
        Ok(())
    }

    pub(crate) fn free_if_sharded(&mut self, g: usize) -> Result<()> {
        match self.dp.zero {
            3 => self.free_params(g),
            _ => Ok(()),
        }
    }

    /// Drops bucket `g`'s full parameter values (stage 3 between uses).
    fn free_params(&mut self, g: usize) -> Result<()> {
        if let Some(x) = self.gathered.get_mut(g) {
            *x = false;
        }
        let r = self.groups[g].params.clone();
        let backend = self.backend.clone();
        for p in self
            .model
            .params_mut()
            .into_iter()
            .skip(r.start)
            .take(r.len())
        {
            p.value = Tensor::zeros(&backend, [0], DType::F32)?;
        }
        Ok(())
    }

    /// Drops the gradients of parameters `r` (stages 2-3, once reduced).
    fn free_grads(&mut self, r: std::ops::Range<usize>) -> Result<()> {
        let backend = self.backend.clone();
        for p in self
            .model
            .params_mut()
            .into_iter()
            .skip(r.start)
            .take(r.len())
        {
            p.grad = Tensor::zeros(&backend, [0], DType::F32)?;
        }
        Ok(())
    }

    /// Zero gradients for parameters `r` where they were dropped.
    pub(crate) fn ensure_grads(&mut self, r: std::ops::Range<usize>) -> Result<()> {
        let backend = self.backend.clone();
        let slots = self.layout.params[r.clone()].to_vec();
        let ps = self.model.params_mut();
        for (p, slot) in ps.into_iter().skip(r.start).zip(&slots) {
            if p.grad.elem_count() != slot.numel {
                p.grad = Tensor::zeros(&backend, slot.dims.clone(), DType::F32)?;
            }
        }
        Ok(())
    }

    /// Stage 3: gathers every parameter (for evaluation or sampling); a no-op otherwise.
    pub fn gather_all(&mut self) -> Result<()> {
        // Gathering everything for evaluation is not part of a step's peak of blocks.
        let (max, secs, exposed) = (
            self.report.max_blocks_gathered,
            self.report.gather_seconds,
            self.report.gather_exposed_seconds,
        );
        for g in 0..self.groups.len() {
            self.gather_if_sharded(g)?;
        }
        self.report.max_blocks_gathered = max;
        self.report.gather_seconds = secs;
        self.report.gather_exposed_seconds = exposed;
        Ok(())
    }

    /// Stage 3: frees what [`DataParallel::gather_all`] gathered; a no-op otherwise.
    pub fn free_all(&mut self) -> Result<()> {
        for g in 0..self.groups.len() {
            self.free_if_sharded(g)?;
        }
        Ok(())
    }

    /// Mean loss over `val` (every replica evaluates every batch, on the whole model or,
    /// for a shard, with its tensor-parallel group), with each batch's document mask if
    /// it has one.
    pub fn evaluate(&mut self, val: &[Batch]) -> Result<f32> {
        self.gather_all()?;
        let mut sum = 0.0f64;
        for b in val {
            let losses = self.model.eval_loss(&self.backend, b)?;
            let mean = losses.mean_all()?;
            sum += f64::from(mean.to_vec_f32()?[0]);
            self.model.clear_saved();
        }
        self.free_all()?;
        Ok(match val.len() {
            0 => 0.0,
            n => (sum / n as f64) as f32,
        })
    }
}

/// A gathered bucket on the device as one flat buffer (one upload, in the compute
/// dtype), and each parameter a view into it at its offset, as llm.c keeps all its
/// parameters in one `params_memory`. Every op reads the views in place: GEMMs through
/// `GemmSpec`'s offsets, LayerNorm through `LayerNormSpec`'s, the embedding through
/// `EmbeddingSpec`'s table range. The buffer is freed when the last view is.
fn bucket_views<B: Backend>(
    backend: &B,
    full: &[f32],
    slots: &[crate::layout::ParamSlot],
    base: usize,
    compute: DType,
) -> Result<Vec<Tensor<B>>> {
    let flat = Tensor::from_f32(backend, full, [full.len()], compute)?;
    slots
        .iter()
        .map(|s| {
            flat.narrow(0, s.offset - base, s.numel)?
                .reshape(s.dims.clone())
        })
        .collect()
}

/// Σ x² in f64.
fn sum_sq(x: &[f32]) -> f64 {
    x.iter().map(|&x| f64::from(x) * f64::from(x)).sum()
}

/// Makes every rank's parameters rank 0's (DDP's start: the replicas begin equal).
fn broadcast_params<B: Backend>(comm: &Communicator, model: &mut impl Module<B>) -> Result<()> {
    for p in model.params_mut() {
        let mut host = p.value.to_vec_f32()?;
        comm.broadcast(&mut host, 0)?;
        p.value = Tensor::from_f32(
            p.value.backend(),
            &host,
            p.value.shape().clone(),
            DType::F32,
        )?;
    }
    Ok(())
}
