//! The training step over a `dp × tp` grid: each tensor-parallel group trains its
//! data-parallel slice of the global batch, the replicated gradients are completed
//! (sequence parallelism), averaged over the data-parallel group, clipped by the global
//! norm and applied by AdamW on each rank's shard (AdamW is element-wise, so updating
//! shards is updating the whole).

use crate::config::TpConfig;
use crate::model::TpGpt;
use crate::shard::unshard_by_name;
use brrr_amp::DynamicLossScaler;
use brrr_backend::{Backend, DType, Error, HostData, Result};
use brrr_checkpoint::Recompute;
use brrr_collectives::{Communicator, ParallelGroups, ReduceOp};
use brrr_dp::{ParamOwners, average_grads};
use brrr_nn::{AdamW, AdamWConfig, Gpt, MicroBatch, Module, Param};
use brrr_perf::trace::Tracer;
use brrr_tensor::Tensor;
use brrr_train::{Batch, BatchSource, ParamState, StepStats, TrainConfig, TrainState};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// What one rank's step measured.
pub type TpStep = StepStats;

/// One rank of a tensor- (and data-) parallel run.
pub struct TpTrainer<B: Backend> {
    /// This rank's shard.
    pub model: TpGpt<B>,
    pub(crate) opt: AdamW<B>,
    pub(crate) config: TrainConfig,
    pub(crate) dp: Communicator,
    pub(crate) backend: B,
    pub(crate) step: u64,
    /// Where [`brrr_train::Engine::step`] draws its global batches.
    pub(crate) data: Option<Box<dyn BatchSource>>,
    /// The fixed validation batches of [`brrr_train::Engine::evaluate`].
    pub(crate) val: Vec<Batch>,
    /// Records the step's phases (`--trace`); disabled by default.
    pub(crate) tracer: Arc<Tracer>,
    /// The dynamic loss scaler with `--amp fp16`, the same on every rank (the overflow
    /// flag is agreed over the tensor- and data-parallel groups).
    pub(crate) scaler: Option<DynamicLossScaler<B>>,
    /// `--checkpoint`: the executor that drops and recomputes the shard's blocks, the
    /// same plan as one device's.
    recompute: Option<Recompute<B, Arc<[u32]>>>,
    /// `--zero 1`: which data-parallel rank keeps each parameter's moments (`opt` holds
    /// this rank's only); `None`: every rank keeps all of them.
    pub(crate) owners: Option<ParamOwners>,
    /// `--bucket-mb`: the data-parallel gradient average's bucket, bytes.
    bucket_bytes: usize,
}

impl<B: Backend> TpTrainer<B> {
    /// This rank's trainer: the single-device model of `config.seed` (the weights
    /// `brrr-train`'s `Trainer` starts from), sliced for the tensor-parallel group of
    /// `groups`. `groups.layout.pp` must be 1.
    pub fn new(
        backend: &B,
        config: TrainConfig,
        tp: TpConfig,
        groups: ParallelGroups,
    ) -> Result<Self> {
        config.validate()?;
        let layout = groups.layout;
        let world = layout.dp * layout.tp * layout.pp;
        tp.validate(layout, world, &config)?;
        if layout.pp != 1 {
            return Err(Error::invalid(
                "TpTrainer",
                "pipeline parallelism with --tp is not supported by this trainer",
            ));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let mut gpt = Gpt::new(backend, config.model.clone(), DType::F32, &mut rng)?;
        // The shard's blocks take the switch from these (`TpBlock::from_block`).
        gpt.set_fused_attention(config.fused_attention);
        let mut model = TpGpt::from_gpt(&gpt, Arc::new(groups.tp), tp.sp)?;
        drop(gpt);
        // `--amp`: the shard of the f32 model gets its masters and 16-bit copies.
        if let Some(policy) = config.amp.policy() {
            model.apply_policy(&policy)?;
        }
        let scaler = match config.amp.scales_loss() {
            true => Some(DynamicLossScaler::new(backend, config.amp.scaler.clone())?),
            false => None,
        };
        let opt = AdamW::new(AdamWConfig {
            weight_decay: config.weight_decay,
            ..AdamWConfig::default()
        });
        let recompute = config.recompute()?;
        let owners = match config.layout.zero {
            0 => None,
            _ => {
                let numels: Vec<usize> = model
                    .params()
                    .iter()
                    .map(|p| p.value.elem_count())
                    .collect();
                Some(ParamOwners::new(
                    &numels,
                    groups.dp.rank(),
                    groups.dp.world_size(),
                )?)
            }
        };
        let bucket_bytes = brrr_dp::bucket_bytes(&config);
        Ok(TpTrainer {
            model,
            opt,
            config,
            dp: groups.dp,
            backend: backend.clone(),
            step: 0,
            data: None,
            val: Vec::new(),
            tracer: Arc::new(Tracer::disabled()),
            scaler,
            recompute,
            owners,
            bucket_bytes,
        })
    }

    /// The run's configuration.
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// Steps completed.
    pub fn steps_done(&self) -> u64 {
        self.step
    }

    /// This rank's data-parallel group.
    pub fn dp(&self) -> &Communicator {
        &self.dp
    }

    /// This rank's rows of a global batch: the data-parallel rank's contiguous slice
    /// (with its document mask, if any).
    fn my_rows(&self, batch: &Batch) -> Result<Batch> {
        let (n, r) = (self.dp.world_size(), self.dp.rank());
        if !batch.batch.is_multiple_of(n) {
            return Err(Error::invalid(
                "TpTrainer",
                format!("batch of {} rows for {n} data-parallel ranks", batch.batch),
            ));
        }
        let rows = batch.batch / n;
        batch.rows(r * rows..(r + 1) * rows)
    }

    /// Per-position losses `[rows, T]` of this rank's rows of `batch`, saved under `mb`
    /// for the backward: packed documents masked as on one device. With `--checkpoint`
    /// (training only: `recompute`) the executor runs the blocks and keeps what its
    /// plan says.
    fn forward_loss(
        &mut self,
        mb: MicroBatch,
        batch: &Batch,
        recompute: bool,
    ) -> Result<Tensor<B>> {
        let mine = self.my_rows(batch)?;
        let bt = (mine.batch, mine.seq);
        if let Some(r) = self.recompute.as_mut().filter(|_| recompute) {
            if mine.mask.is_some() {
                // `TrainConfig::validate` refuses the pair; a caller's batch source may not.
                return Err(Error::invalid(
                    "TpTrainer",
                    "document masks with --checkpoint are not supported: use --checkpoint none",
                ));
            }
            let x0 = self.model.embed_mb(mb, &mine.inputs, bt, None)?;
            let targets: Arc<[u32]> = mine.targets.into();
            return r.forward_loss_from(&mut self.model, mb, x0, &targets, &mut |_| {});
        }
        let segments = match &mine.mask {
            Some(m) => Some(Tensor::from_u32(&self.backend, &m.segments, [bt.0, bt.1])?),
            None => None,
        };
        let packed = mine
            .mask
            .as_ref()
            .zip(segments.as_ref())
            .map(|(m, s)| (m.positions.as_slice(), s));
        self.model
            .forward_loss_packed_mb(mb, &mine.inputs, &mine.targets, bt, packed)
    }

    /// The backward of micro-batch `mb` from `Σ losses · dloss`.
    fn backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<()> {
        match &mut self.recompute {
            None => self.model.backward_mb(mb, dloss),
            Some(r) => {
                let dx = r.backward_to_input(&mut self.model, mb, dloss, &mut |_| {})?;
                self.model.embed_backward_mb(mb, &dx)
            }
        }
    }

    /// Forward and backward of each global micro-batch in `batches` (this rank's rows),
    /// gradients accumulated with the loss scaled to the mean over the global batch;
    /// returns this rank's mean loss. Gradients are left as they are: see
    /// [`TpTrainer::finish_grads`].
    pub fn forward_backward(&mut self, batches: &[Batch]) -> Result<f64> {
        let k = batches.len().max(1);
        // fp16: the loss gradient is seeded scaled (a power of two, so exactly).
        let scale = self.scaler.as_ref().map_or(1.0, |s| s.scale());
        if let Some(r) = &mut self.recompute {
            // Nothing of an earlier, failed step stays in flight.
            r.clear();
        }
        let mut loss = 0.0;
        for (i, batch) in batches.iter().enumerate() {
            let mb = MicroBatch(i as u32);
            let losses = self.forward_loss(mb, batch, true)?;
            loss += losses.mean_all()?.to_scalar_f64()? / k as f64;
            let n = losses.elem_count() * k;
            self.backward(mb, 1.0 / n as f32 * scale)?;
        }
        Ok(loss)
    }

    /// Completes the gradients: replicated ones summed over the sequence shards (with
    /// sequence parallelism), then everything averaged over the data-parallel group.
    pub fn finish_grads(&mut self) -> Result<()> {
        self.model.reduce_replicated_grads()?;
        let mut params: Vec<&mut Param<B>> = self.model.params_mut();
        average_grads(&self.dp, &mut params, self.bucket_bytes)
    }

    /// fp16: unscales this rank's gradients and agrees on the overflow flag with MAX
    /// over the tensor- and the data-parallel group, so that every shard of every
    /// replica skips the same steps (one shard's inf would otherwise leave the others
    /// updating a model that no longer exists as a whole).
    fn unscale(&mut self) -> Result<()> {
        let Some(scaler) = &mut self.scaler else {
            return Ok(());
        };
        scaler.unscale(self.model.params_mut())?;
        let mut flag = [scaler.found_inf().to_vec_f32()?[0]];
        self.model.comm().all_reduce(&mut flag, ReduceOp::Max)?;
        self.dp.all_reduce(&mut flag, ReduceOp::Max)?;
        scaler.set_found_inf(flag[0])
    }

    /// fp16: the scale update after the step; (the scale after it, whether the step
    /// was skipped). A skipped step is no AdamW step, as on one device.
    fn update_scale(&mut self) -> Result<(f32, bool)> {
        let Some(s) = &mut self.scaler else {
            return Ok((1.0, false));
        };
        let r = s.update_and_observe()?;
        if r.skipped {
            self.opt.step -= 1;
        }
        Ok((r.scale, r.skipped))
    }

    /// One optimizer step on the global micro-batches `batches` (`grad_accum` of them).
    pub fn step(&mut self, batches: &[Batch]) -> Result<StepStats> {
        if batches.len() != self.config.grad_accum {
            return Err(Error::invalid(
                "TpTrainer::step",
                format!(
                    "{} micro-batches for --grad-accum {}",
                    batches.len(),
                    self.config.grad_accum
                ),
            ));
        }
        let t0 = std::time::Instant::now();
        let lr = self.config.schedule().lr(self.step);
        self.model.zero_grad()?;
        self.backend.reset_peak_memory();
        let start = self.backend.memory_stats().bytes_in_use;
        let tracer = self.tracer.clone();
        let _span = tracer.span("step");
        let loss = tracer.in_span("forward+backward", || self.forward_backward(batches))?;
        let mut loss = [loss as f32];
        let activation_peak_bytes = self.backend.memory_stats().peak_bytes.saturating_sub(start);
        tracer.in_span("reduce grads", || self.finish_grads())?;
        tracer.in_span("unscale", || self.unscale())?;
        self.dp.all_reduce(&mut loss, ReduceOp::Avg)?;
        let norm = tracer.in_span("clip", || self.model.grad_sq_sum())?.sqrt();
        let coef = (self.config.grad_clip / (norm + 1e-6)).min(1.0) as f32;
        let found_inf = self.scaler.as_ref().map(|s| s.found_inf());
        tracer.in_span("adamw", || {
            let params = self.model.params_mut();
            match &self.owners {
                None => self
                    .opt
                    .step_scaled(params, lr as f32, coef, None, found_inf),
                Some(o) => o.step(
                    &self.dp,
                    &mut self.opt,
                    params,
                    lr as f32,
                    coef,
                    None,
                    found_inf,
                ),
            }
        })?;
        let (loss_scale, skipped) = self.update_scale()?;
        // As the one-device trainer: a step with a non-finite loss is not counted.
        if !loss[0].is_finite() {
            return Err(Error::invalid(
                "train",
                format!(
                    "loss became {} at step {}; lower --lr",
                    loss[0],
                    self.step + 1
                ),
            ));
        }
        self.step += 1;
        Ok(StepStats {
            step: self.step,
            loss: loss[0],
            grad_norm: norm,
            lr,
            tokens: self.config.tokens_per_step(),
            loss_scale,
            skipped,
            seconds: Some(t0.elapsed().as_secs_f64()),
            peak_bytes: self.backend.memory_stats().peak_bytes,
            activation_peak_bytes,
        })
    }
}

impl<B: Backend> TpTrainer<B> {
    /// How many parameters' moments this rank's optimizer keeps (all of its shard's,
    /// or under `--zero 1` those its data-parallel rank owns).
    pub fn opt_moments(&self) -> usize {
        self.opt.moments.len()
    }

    /// Parameter `i`'s moments (this rank's shard of them), from whichever
    /// data-parallel rank keeps them under `--zero 1` (collective over the group then).
    fn moments_of(&self, i: usize, numel: usize) -> Result<Option<(Vec<f32>, Vec<f32>)>> {
        match &self.owners {
            Some(o) => o.moments(&self.dp, &self.opt, i, numel),
            None => match self.opt.moments.get(i) {
                Some(state) => {
                    let (m, v) = state.f32_moments("TpTrainer checkpoint")?;
                    Ok(Some((m.to_vec_f32()?, v.to_vec_f32()?)))
                }
                None => Ok(None),
            },
        }
    }

    /// Mean loss over `val` (global batches, this rank's data-parallel rows), averaged
    /// over the data-parallel group; nothing kept for a backward. Collective.
    pub fn evaluate(&mut self, val: &[Batch]) -> Result<f32> {
        let mut sum = 0.0;
        for batch in val {
            let losses = self.forward_loss(MicroBatch(0), batch, false)?;
            sum += losses.mean_all()?.to_scalar_f64()?;
            self.model.clear_saved();
        }
        let mut mean = [(sum / val.len().max(1) as f64) as f32];
        self.dp.all_reduce(&mut mean, ReduceOp::Avg)?;
        Ok(mean[0])
    }

    /// The whole model's state, gathered from the tensor-parallel shards (collective
    /// over the group; every rank gets it): the same checkpoint a single-device run
    /// writes, so `brrr sample` and `--resume` without `--tp` read it.
    pub fn state(&self, data_position: String, data_fingerprint: String) -> Result<TrainState> {
        let comm = self.model.comm();
        let n = comm.world_size();
        let whole = |name: &str, t: &brrr_tensor::Tensor<B>| -> Result<(Vec<f32>, Vec<usize>)> {
            let gathered = comm.all_gather(&t.to_vec_f32()?)?;
            unshard_by_name(name, &gathered, t.dims(), n)
        };
        let mut params = Vec::new();
        for (i, p) in self.model.params().into_iter().enumerate() {
            // Under mixed precision the f32 master is the run's weight.
            let (value, shape) = whole(&p.name, p.master.as_ref().unwrap_or(&p.value))?;
            let moments = match self.moments_of(i, p.value.elem_count())? {
                Some((m, v)) => {
                    let shard = |x: Vec<f32>| {
                        Tensor::from_f32(&self.backend, &x, p.value.shape().clone(), DType::F32)
                    };
                    Some((
                        HostData::F32(whole(&p.name, &shard(m)?)?.0),
                        HostData::F32(whole(&p.name, &shard(v)?)?.0),
                    ))
                }
                None => None,
            };
            params.push(ParamState {
                name: p.name.clone(),
                shape,
                value: HostData::F32(value),
                moments,
                optim: None,
            });
        }
        Ok(TrainState {
            config: self.config.clone(),
            step: self.step,
            adamw_step: self.opt.step,
            data_position,
            data_fingerprint,
            params,
            loss_scaler: match &self.scaler {
                Some(s) => {
                    let (scale, trackers, _) = brrr_backend::block_on(s.read_state())?;
                    Some(brrr_train::ScalerHeader::new(scale, &trackers).to_state())
                }
                None => None,
            },
        })
    }
}
