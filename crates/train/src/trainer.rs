//! The training step: a micro-batch schedule of forwards and backwards, clipping, one
//! fused AdamW update per parameter, and one read back to the host.

use crate::config::TrainConfig;
use crate::data::{Batch, BatchSource};
use crate::engine::{Engine, Observer, StepStats};
use crate::offload::Offload;
use crate::schedule::{Action, MicroBatchSchedule};
use crate::state::{LossScalerState, OptimState, ParamState, TrainState};
use brrr_amp::{DynamicLossScaler, apply_policy};
use brrr_backend::HostData;
use brrr_backend::{Backend, DType, Error, Result};
use brrr_checkpoint::{Op, Recompute};
use brrr_cpu::CpuBackend;
use brrr_nn::{
    AdamW, AdamWConfig, Gpt, MicroBatch, Module, MomentState, Optimizer, Projector,
    clip_grad_norm_on_device,
};
use brrr_perf::trace::Tracer;
use brrr_tensor::Tensor;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// Trains a GPT: owns the model, the optimizer, the batch source and the validation
/// batches. Every method that reads from the device is `async`, so the trainer runs on
/// a browser's main thread; native code can use the `_blocking` wrappers.
///
/// After an error from [`Trainer::step`] the model and optimizer may be half-updated:
/// restore a [`TrainState`] before stepping again.
pub struct Trainer<B: Backend> {
    backend: B,
    config: TrainConfig,
    model: Gpt<B>,
    opt: AdamW<B>,
    data: Box<dyn BatchSource>,
    val: Vec<Batch>,
    schedule: MicroBatchSchedule,
    step: u64,
    tracer: Arc<Tracer>,
    /// The activation-recomputation executor (`config.checkpoint`), if any.
    recompute: Option<Recompute<B>>,
    /// The dynamic loss scaler, with `--amp fp16` (see `brrr_amp::AmpConfig`).
    scaler: Option<DynamicLossScaler<B>>,
    /// With `config.offload`: the optimizer on the host, taken there by the first step.
    offload: Option<Offload>,
    /// With `config.offload`: the moments a restored checkpoint brought, on the host,
    /// until the first step hands them to the offloaded optimizer.
    restored_host_moments: Option<Vec<MomentState<CpuBackend>>>,
}

impl<B: Backend> Trainer<B> {
    /// A fresh run: the model initialised from `config.seed`, AdamW with
    /// `config.weight_decay`, gradient accumulation over `config.grad_accum`
    /// micro-batches.
    pub fn new(
        backend: &B,
        config: TrainConfig,
        data: Box<dyn BatchSource>,
        val: Vec<Batch>,
    ) -> Result<Self> {
        config.validate()?;
        // Sizes whose byte counts overflow are errors here, not allocation failures.
        crate::memory::estimate(&config)?;
        let mut init_rng = ChaCha8Rng::seed_from_u64(config.seed);
        let mut model = Gpt::new(backend, config.model.clone(), DType::F32, &mut init_rng)?;
        model.set_fused_attention(config.fused_attention);
        // LoRA: adapters beside every block's linear layers, A drawn after the weights.
        if let Some(lora) = config.lora() {
            brrr_nn::lora::add_adapters(&mut model, lora, &mut init_rng)?;
        }
        // Mixed precision: the same initial weights become f32 masters with 16-bit copies.
        if let Some(policy) = config.amp.policy() {
            apply_policy(&policy, &mut model)?;
        }
        let scaler = match config.amp.scales_loss() {
            true => Some(DynamicLossScaler::new(backend, config.amp.scaler.clone())?),
            false => None,
        };
        let opt = AdamW::new(AdamWConfig {
            weight_decay: config.weight_decay,
            optimizer: config.optimizer,
            ..AdamWConfig::default()
        });
        let schedule = MicroBatchSchedule::grad_accumulation(config.grad_accum)?;
        let recompute = config.recompute()?;
        Ok(Trainer {
            backend: backend.clone(),
            config,
            model,
            opt,
            data,
            val,
            schedule,
            step: 0,
            tracer: Arc::new(Tracer::disabled()),
            recompute,
            scaler,
            offload: None,
            restored_host_moments: None,
        })
    }

    /// Replaces the micro-batch schedule. It must cover `config.grad_accum`
    /// micro-batches; any number may be in flight at once, since every layer keeps what
    /// a forward saved per micro-batch (`brrr_nn::Stash`). Gradients accumulate, so the
    /// order of the backwards decides the order of the sums: a schedule changes the
    /// gradients only by rounding.
    pub fn set_schedule(&mut self, schedule: MicroBatchSchedule) -> Result<()> {
        let fail = |m: String| Err(Error::invalid("Trainer::set_schedule", m));
        if schedule.micro_batches() != self.config.grad_accum {
            return fail(format!(
                "the schedule has {} micro-batches, the config's grad_accum is {}",
                schedule.micro_batches(),
                self.config.grad_accum
            ));
        }
        self.schedule = schedule;
        Ok(())
    }

    /// Records each step's phases (`step`, `data`, `forward`, `backward`, `clip`,
    /// `adamw`, `read back`, `evaluate`, `checkpoint`, `zero_grad`) into `tracer`.
    pub fn set_tracer(&mut self, tracer: Tracer) {
        self.tracer = Arc::new(tracer);
    }

    /// [`Trainer::set_tracer`] with a tracer shared with others, e.g. a profiling backend
    /// that records its op spans into the same trace, nested inside the phases.
    pub fn set_shared_tracer(&mut self, tracer: Arc<Tracer>) {
        self.tracer = tracer;
    }

    /// The tracer given to [`Trainer::set_tracer`] (a disabled one by default).
    pub fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    /// The run's configuration.
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// Continues to `steps` in total (the schedule's end moves with it). Resuming a run
    /// to train it longer uses this.
    pub fn set_total_steps(&mut self, steps: u64) -> Result<()> {
        let mut c = self.config.clone();
        c.steps = steps;
        c.validate()?;
        self.config = c;
        Ok(())
    }

    /// Runs every attention core as the backend's fused kernel where it applies
    /// ([`brrr_nn::CausalSelfAttention::fused`]): f32 and no document mask. The numbers
    /// then agree with the composite path's to f32 rounding (not promised bit for bit). The same
    /// as [`TrainConfig::fused_attention`] given to [`Trainer::new`]; checkpoints record it.
    pub fn set_fused_attention(&mut self, on: bool) {
        self.config.fused_attention = on;
        self.model.set_fused_attention(on);
    }

    /// Bytes of optimizer state allocated now (0 before the first step).
    pub fn optimizer_state_bytes(&self) -> usize {
        match &self.offload {
            Some(off) => off.state_bytes(),
            None => self.opt.state_bytes(),
        }
    }

    /// With `--offload`: the optimizer's bytes on the host (moments, f32 masters) and
    /// what its updates measured; `None` before the first offloaded step.
    pub fn offload(&self) -> Option<&Offload> {
        self.offload.as_ref()
    }

    /// The model.
    pub fn model(&self) -> &Gpt<B> {
        &self.model
    }

    /// The backend the model lives on.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The micro-batch schedule of each step.
    pub fn schedule(&self) -> &MicroBatchSchedule {
        &self.schedule
    }

    /// Optimizer steps completed.
    pub fn steps_done(&self) -> u64 {
        self.step
    }

    /// Whether `config.steps` steps are done.
    pub fn is_finished(&self) -> bool {
        self.step >= self.config.steps
    }

    /// One optimizer step. Reads one buffer back from the device: the loss summed over
    /// the micro-batches and the squared gradient norm.
    pub async fn step(&mut self) -> Result<StepStats> {
        if self.is_finished() {
            return Err(Error::invalid(
                "Trainer::step",
                format!("the run already finished at step {}", self.step),
            ));
        }
        let tracer = self.tracer.clone();
        let _span = tracer.span("step");
        #[cfg(not(target_arch = "wasm32"))]
        let t0 = std::time::Instant::now();
        let lr = self.config.schedule().lr(self.step);
        tracer.in_span("zero_grad", || self.model.zero_grad())?;
        self.backend.reset_peak_memory();
        let start_bytes = self.backend.memory_stats().bytes_in_use;
        if let Some(r) = &mut self.recompute {
            // Nothing of an earlier, failed step stays in flight.
            r.clear();
            r.set_step_seed(self.config.seed ^ self.step);
        }
        let loss_scale = self.scaler.as_ref().map_or(1.0, |s| s.scale());
        let loss_sum = self.run_schedule(&tracer, loss_scale)?;
        let activation_peak_bytes = self
            .backend
            .memory_stats()
            .peak_bytes
            .saturating_sub(start_bytes);
        let norm = self.update(&tracer, lr as f32).await?;
        record_memory(&tracer, &self.backend);
        let peak_bytes = self.backend.memory_stats().peak_bytes;
        let host = {
            let _read = tracer.span("read back");
            let mut parts = vec![&loss_sum, &norm];
            if let Some(s) = &self.scaler {
                parts.extend([s.scale_tensor(), s.found_inf()]);
            }
            Tensor::cat(&parts, 0)?.to_host().await?.to_f64()
        };
        let (loss_scale, skipped) = match &mut self.scaler {
            Some(s) => {
                let r = s.observe(host[2] as f32, host[3] as f32)?;
                if r.skipped && !self.config.offload {
                    // A skipped step is no AdamW step (PyTorch never calls
                    // `optimizer.step()`): its bias-correction count stays. (The
                    // offloaded optimizer read the flag and did not step.)
                    self.opt.step -= 1;
                }
                (r.scale, r.skipped)
            }
            None => (1.0, false),
        };
        // The same arithmetic as summing each micro-batch's mean on the host in f64:
        // for one micro-batch the f32 mean itself.
        let loss = (host[0] / self.config.grad_accum as f64) as f32;
        let done = self.step + 1;
        if !loss.is_finite() {
            return Err(Error::invalid(
                "train",
                format!("loss became {loss} at step {done}; lower --lr"),
            ));
        }
        self.step = done;
        Ok(StepStats {
            step: done,
            loss,
            grad_norm: host[1],
            lr,
            tokens: self.config.tokens_per_step(),
            loss_scale,
            skipped,
            #[cfg(not(target_arch = "wasm32"))]
            seconds: Some(t0.elapsed().as_secs_f64()),
            #[cfg(target_arch = "wasm32")]
            seconds: None,
            peak_bytes,
            activation_peak_bytes,
        })
    }

    /// After the step's backwards: unscaling (loss scaling), clipping and the
    /// optimizer's update, on the device or offloaded; returns the gradient norm, on the
    /// device.
    async fn update(&mut self, tracer: &Tracer, lr: f32) -> Result<Tensor<B>> {
        // Loss scaling: once per optimizer step, after every micro-batch, before clipping.
        if let Some(s) = &mut self.scaler {
            tracer.in_span("unscale", || {
                s.unscale(trainable(&mut self.model, &self.config))
            })?;
        }
        let (norm, coef) = tracer.in_span("clip", || {
            let params: Vec<_> = self
                .model
                .params()
                .into_iter()
                .filter(|p| self.config.trains(&p.name))
                .collect();
            clip_grad_norm_on_device(&params, self.config.grad_clip)
        })?;
        // The clip factor stays on the device: the fused AdamW kernel multiplies it into
        // every gradient (`inv_scale`), so nothing is read back before the update; an
        // overflow flag skips the update there too.
        let found_inf = self.scaler.as_ref().map(|s| s.found_inf());
        match self.config.offload {
            true => {
                let _span = tracer.span("offload");
                self.offload_update(lr, &coef).await?;
            }
            false => tracer.in_span("adamw", || {
                self.opt.step_scaled(
                    trainable(&mut self.model, &self.config),
                    lr,
                    1.0,
                    Some(&coef),
                    found_inf,
                )
            })?,
        }
        if let Some(s) = &mut self.scaler {
            s.update()?;
        }
        Ok(norm)
    }

    /// The offloaded update: the clip factor and the overflow flag read from the device,
    /// the optimizer taken to the host on the first step, then its pipeline.
    async fn offload_update(&mut self, lr: f32, coef: &Tensor<B>) -> Result<()> {
        let mut parts = vec![coef];
        if let Some(s) = &self.scaler {
            parts.push(s.found_inf());
        }
        let host = Tensor::cat(&parts, 0)?.to_host().await?.to_f64();
        let skip = host.get(1).is_some_and(|&f| f != 0.0);
        if self.offload.is_none() {
            let adamw = self.opt.config;
            let moments = self.restored_host_moments.take();
            let params = trainable(&mut self.model, &self.config);
            self.offload = Some(Offload::new(params, adamw, moments, self.opt.step).await?);
        }
        let params = trainable(&mut self.model, &self.config);
        let offload = self.offload.as_mut().expect("created above");
        offload.update(params, lr, host[0] as f32, skip).await
    }

    /// Executes the schedule's actions; returns the sum of the micro-batch mean losses,
    /// on the device.
    /// Every backward seeds the loss gradient with `loss_scale` (1 without scaling), the
    /// same for all micro-batches of the step.
    fn run_schedule(&mut self, tracer: &Tracer, loss_scale: f32) -> Result<Tensor<B>> {
        let n_tokens = (self.config.batch_size * self.config.seq_len) as f32;
        // Each backward scales by 1/(n·k): the gradient of the mean over all k·n tokens.
        let dloss = 1.0 / (n_tokens * self.config.grad_accum as f32);
        let dloss = if loss_scale == 1.0 {
            dloss
        } else {
            dloss * loss_scale
        };
        let mut loss_sum: Option<Tensor<B>> = None;
        for action in self.schedule.actions().to_vec() {
            match action {
                Action::Forward(mb) => {
                    let (ids, targets, mask) = tracer.in_span("data", || {
                        let batch = self.data.next_batch()?;
                        check_batch(&self.config, &batch)?;
                        let (ids, targets) = upload(&self.backend, &batch)?;
                        Ok::<_, Error>((ids, targets, upload_mask(&self.backend, &batch)?))
                    })?;
                    let mean = tracer.in_span("forward", || {
                        let mb = micro_batch(mb)?;
                        let losses = match (&mut self.recompute, &mask) {
                            (None, None) => self.model.forward_loss_mb(mb, &ids, &targets)?,
                            (None, Some((pos, seg))) => self
                                .model
                                .forward_loss_packed_mb(mb, &ids, &targets, pos, seg)?,
                            (Some(_), Some(_)) => {
                                return Err(Error::invalid(
                                    "Trainer::step",
                                    "document masks with activation recomputation are not \
                                     supported: train with --checkpoint none",
                                ));
                            }
                            (Some(r), None) => r.forward_loss_observed(
                                &mut self.model,
                                mb,
                                &ids,
                                &targets,
                                &mut |op| record_op(tracer, &self.backend, op),
                            )?,
                        };
                        losses.mean_all()
                    })?;
                    match &mut loss_sum {
                        None => loss_sum = Some(mean),
                        Some(sum) => sum.add_(&mean)?,
                    }
                }
                Action::Backward(mb) => {
                    tracer.in_span("backward", || {
                        let mb = micro_batch(mb)?;
                        match &mut self.recompute {
                            None => self.model.backward_mb(mb, dloss),
                            Some(r) => r.backward_observed(&mut self.model, mb, dloss, &mut |op| {
                                record_op(tracer, &self.backend, op)
                            }),
                        }
                    })?;
                }
            }
            record_memory(tracer, &self.backend);
        }
        loss_sum.ok_or_else(|| Error::invalid("Trainer::step", "the schedule has no forward"))
    }

    /// Mean loss over the fixed validation batches (0 if there are none). Reads one
    /// buffer back: every batch's mean, summed on the host in f64 in batch order.
    pub async fn evaluate(&mut self) -> Result<f32> {
        let tracer = self.tracer.clone();
        let _span = tracer.span("evaluate");
        let mut means = Vec::with_capacity(self.val.len());
        for batch in &self.val {
            let (ids, targets) = upload(&self.backend, batch)?;
            let losses = match upload_mask(&self.backend, batch)? {
                None => self.model.forward_loss(&ids, &targets)?,
                Some((pos, seg)) => self.model.forward_loss_packed_mb(
                    MicroBatch::default(),
                    &ids,
                    &targets,
                    &pos,
                    &seg,
                )?,
            };
            means.push(losses.mean_all()?);
            self.model.clear_saved();
        }
        if means.is_empty() {
            return Ok(0.0);
        }
        let refs: Vec<&Tensor<B>> = means.iter().collect();
        let values = Tensor::cat(&refs, 0)?.to_host().await?.to_f64();
        let sum = values.iter().fold(0.0f64, |acc, &x| acc + x);
        Ok((sum / values.len() as f64) as f32)
    }

    /// Steps until `stop_at` steps (at most `config.steps`) are done, evaluating and
    /// checkpointing as the config says, and reporting to `observer`: the one loop,
    /// [`crate::engine::run`].
    pub async fn run(&mut self, stop_at: u64, observer: &mut dyn Observer) -> Result<()> {
        crate::engine::run(self, stop_at, observer).await
    }

    /// The run's state, read back from the device.
    pub async fn state(&self) -> Result<TrainState> {
        let mut params = Vec::new();
        // The optimizer holds state for the trained parameters only, in their order.
        let mut trained = 0;
        for p in self.model.params() {
            // The f32 master under mixed precision: what the run's weights are.
            let mut value = None;
            let (moments, optim) = match self.config.trains(&p.name) {
                false => (None, None),
                true => {
                    trained += 1;
                    match (&self.offload, &self.restored_host_moments) {
                        (Some(off), _) => {
                            let (v, m, o) = off.saved(trained - 1).await?;
                            value = Some(v);
                            (m, o)
                        }
                        (None, Some(host)) => saved_moments(host.get(trained - 1)).await?,
                        (None, None) => saved_moments(self.opt.moments.get(trained - 1)).await?,
                    }
                }
            };
            let value: HostData = match value {
                Some(v) => v,
                None => p.master.as_ref().unwrap_or(&p.value).to_host().await?,
            };
            params.push(ParamState {
                name: p.name.clone(),
                shape: p.value.dims().to_vec(),
                value,
                moments,
                optim,
            });
        }
        let loss_scaler = match &self.scaler {
            Some(s) => {
                let (scale, tracker, _found_inf) = s.read_state().await?;
                Some(LossScalerState {
                    scale,
                    growth_tracker: tracker.first().copied().unwrap_or(0),
                    hysteresis_tracker: tracker.get(1).copied().unwrap_or(0),
                })
            }
            None => None,
        };
        Ok(TrainState {
            config: self.config.clone(),
            step: self.step,
            adamw_step: self
                .offload
                .as_ref()
                .map_or(self.opt.step, Offload::step_count),
            data_position: self.data.position(),
            data_fingerprint: self.data.fingerprint(),
            params,
            loss_scaler,
        })
    }

    /// Continues from `state`: weights, AdamW moments and step count, the batch
    /// source's position, the loss scaler's scale and trackers, and the step. The model's shape must match, and the data must
    /// be the same (by fingerprint).
    pub fn restore(&mut self, state: &TrainState) -> Result<()> {
        if state.config.model != self.config.model {
            return Err(Error::invalid(
                "Trainer::restore",
                format!(
                    "the saved model {:?} is not this trainer's {:?}",
                    state.config.model, self.config.model
                ),
            ));
        }
        if state.data_fingerprint != self.data.fingerprint() {
            return Err(Error::file(
                &self.config.corpus,
                "the corpus differs from the one this run was trained on",
            ));
        }
        state.check_finite()?;
        if self.offload.take().is_some() {
            // The device handed its f32 masters to the host: a 16-bit weight gets a
            // place for its loaded master again (the next step takes it back).
            for p in trainable(&mut self.model, &self.config) {
                if p.master.is_none() && p.value.dtype() != DType::F32 {
                    let shape = p.value.shape().clone();
                    p.master = Some(Tensor::zeros(&self.backend, shape, DType::F32)?);
                }
            }
        }
        load_params(&self.backend, &mut self.model, state)?;
        match self.config.offload {
            // The host optimizer takes them at the next step.
            true => {
                let host = load_moments(&CpuBackend::new(), &self.model, state, &self.config)?;
                self.restored_host_moments = Some(host);
            }
            false => {
                self.opt.moments = load_moments(&self.backend, &self.model, state, &self.config)?;
            }
        }
        self.opt.step = state.adamw_step;
        self.data.set_position(&state.data_position)?;
        // A checkpoint without the scaler's state (a run without one, or a file from
        // before checkpoints kept it) leaves this run's scaler at its initial scale.
        if let (Some(s), Some(ls)) = (&mut self.scaler, &state.loss_scaler) {
            s.restore_state(ls.scale, &[ls.growth_tracker, ls.hysteresis_tracker])?;
        }
        self.step = state.step;
        Ok(())
    }
}

impl<B: Backend> Trainer<B> {
    /// Starts a fine-tuning run ([`TrainConfig::finetune`]) from the base run's saved
    /// `state`: every weight of the base model is loaded, LoRA's adapters keep their
    /// initial values (`B = 0`: the run starts as the base model), and the optimizer,
    /// the step and the data position stay fresh. The base must have this run's model
    /// shape and tokenizer, and no adapters of its own (merge them first).
    pub fn load_base(&mut self, state: &TrainState) -> Result<()> {
        const OP: &str = "finetune";
        if self.step != 0 {
            return Err(Error::invalid(OP, "the run has already trained"));
        }
        let base = &state.config;
        if base.model != self.config.model {
            return Err(Error::invalid(
                OP,
                format!(
                    "the base run's model {:?} is not this run's {:?}",
                    base.model, self.config.model
                ),
            ));
        }
        if base.tokenizer != self.config.tokenizer {
            return Err(Error::invalid(
                OP,
                format!(
                    "the base run was trained with the {} tokenizer and this run's data uses \
                     {}: fine-tune on data the base run's tokenizer reads",
                    base.tokenizer, self.config.tokenizer
                ),
            ));
        }
        if let Some(p) = state
            .params
            .iter()
            .find(|p| brrr_nn::lora::is_adapter(&p.name))
        {
            return Err(Error::invalid(
                OP,
                format!(
                    "the base run holds LoRA adapters ({}): merge them into its weights first \
                     (`brrr ckpt merge-lora`)",
                    p.name
                ),
            ));
        }
        state.check_finite()?;
        load_params_where(&self.backend, &mut self.model, state, |name| {
            !brrr_nn::lora::is_adapter(name)
        })
    }
}

impl<B: Backend> Engine for Trainer<B> {
    fn config(&self) -> &TrainConfig {
        &self.config
    }

    fn steps_done(&self) -> u64 {
        self.step
    }

    async fn step(&mut self) -> Result<StepStats> {
        Trainer::step(self).await
    }

    async fn evaluate(&mut self) -> Result<f32> {
        Trainer::evaluate(self).await
    }

    /// `dir/checkpoint.safetensors` ([`TrainState::save`]: atomic and fsynced).
    async fn save_to(&mut self, dir: &std::path::Path) -> Result<()> {
        let state = self.state().await?;
        save_state(&state, dir)
    }

    async fn restore_from(&mut self, dir: &std::path::Path) -> Result<()> {
        let state = load_state(dir)?;
        Trainer::restore(self, &state)
    }

    fn describe(&self) -> String {
        let info = self.backend.info();
        format!("one device: {} ({})", info.name, info.device)
    }

    fn report(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let optimizer = self.config.optimizer;
        let all = self.model.params();
        let total: usize = all.iter().map(|p| p.value.elem_count()).sum();
        let params: Vec<_> = all
            .into_iter()
            .filter(|p| self.config.trains(&p.name))
            .collect();
        let numel: usize = params.iter().map(|p| p.value.elem_count()).sum();
        if let Some(lora) = self.config.lora() {
            lines.push(format!(
                "LoRA rank {} (alpha {}): {numel} adapter parameters trained, {:.2}% of the \
                 model's {total}; the rest frozen",
                lora.rank,
                lora.alpha,
                100.0 * numel as f64 / total.max(1) as f64,
            ));
        }
        lines.push(format!(
            "optimizer {optimizer}: {} of state{}, estimated {} ({}); AdamW's f32 moments {}",
            mib(self.optimizer_state_bytes()),
            if self.offload.is_some() {
                " on the host"
            } else {
                ""
            },
            mib(estimated_state_bytes(optimizer, &params)),
            match optimizer {
                brrr_nn::Optimizer::AdamW => "brrr-perf's 8 bytes per parameter",
                brrr_nn::Optimizer::AdamW8bit => {
                    "brrr-perf's 2 + 8/2048 bytes per parameter, 8 under 4096 elements"
                }
                brrr_nn::Optimizer::GaLore(_) => "GaLore's 4·r·(m + 2n) per projected matrix",
            },
            mib(8 * numel),
        ));
        if let Some(off) = &self.offload {
            lines.push(offload_line(off));
        }
        let (svds, secs) = match &self.offload {
            Some(off) => off.svd_time(),
            None => self.opt.svd_time(),
        };
        if svds > 0 {
            lines.push(format!("GaLore: {svds} SVDs took {secs:.2} s on the host"));
        }
        lines
    }
}

/// The optimizer state a model's parameters need by the memory models (not by what was
/// allocated): brrr-perf's bytes per parameter for 8-bit Adam (8 for a parameter under
/// 4096 elements), GaLore's formula for each projected matrix and 8 bytes per parameter
/// for the rest.
fn estimated_state_bytes<B: Backend>(
    optimizer: brrr_nn::Optimizer,
    params: &[&brrr_nn::Param<B>],
) -> usize {
    use brrr_perf::memory::Optimizer as Est;
    match optimizer {
        brrr_nn::Optimizer::AdamW8bit => params
            .iter()
            .map(|p| {
                let n = p.value.elem_count();
                let per = match n as u64 >= brrr_perf::memory::MIN_8BIT_ELEMS {
                    true => Est::Adam8bit.state_bytes_per_param(),
                    false => Est::Adam.state_bytes_per_param(),
                };
                per * n as f64
            })
            .sum::<f64>() as usize,
        _ => params
            .iter()
            .map(|p| match optimizer.projects(&p.name, p.value.dims()) {
                Some(c) => c.state_bytes(p.value.dims()[0], p.value.dims()[1]),
                None => Est::Adam.state_bytes_per_param() as usize * p.value.elem_count(),
            })
            .sum(),
    }
}

/// What `--offload` kept on the host and how its pipeline overlapped, per update.
fn offload_line(off: &Offload) -> String {
    let t = off.timing();
    let ms = |s: f64| format!("{:.1} ms", 1e3 * s / f64::from(t.steps.max(1)));
    format!(
        "offload: {} of f32 masters and the optimizer state on the host; per update: \
         gradients to the host {}, AdamW on the host {}, weights back {}: {} pipelined \
         against {} one after another and {} for the longest phase ({:.0}% of what overlap \
         could hide, hidden)",
        mib(off.master_bytes()),
        ms(t.to_host),
        ms(t.update),
        ms(t.to_device),
        ms(t.wall),
        ms(t.serial()),
        ms(t.longest()),
        100.0 * t.overlap()
    )
}

fn mib(bytes: usize) -> String {
    format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Writes `state` to the run directory `dir`'s [`crate::CHECKPOINT_FILE`].
#[cfg(not(target_arch = "wasm32"))]
pub fn save_state(state: &TrainState, dir: &std::path::Path) -> Result<()> {
    state.save(dir.join(crate::engine::CHECKPOINT_FILE))
}

/// Reads the run directory `dir`'s [`crate::CHECKPOINT_FILE`].
#[cfg(not(target_arch = "wasm32"))]
pub fn load_state(dir: &std::path::Path) -> Result<TrainState> {
    TrainState::load(dir.join(crate::engine::CHECKPOINT_FILE))
}

/// In a browser there are no files: keep the [`Trainer::state`] instead.
#[cfg(target_arch = "wasm32")]
pub fn save_state(_state: &TrainState, dir: &std::path::Path) -> Result<()> {
    Err(Error::file(
        dir,
        "a browser has no files: keep Trainer::state instead",
    ))
}

/// In a browser there are no files: restore a [`TrainState`] with [`Trainer::restore`].
#[cfg(target_arch = "wasm32")]
pub fn load_state(dir: &std::path::Path) -> Result<TrainState> {
    Err(Error::file(
        dir,
        "a browser has no files: use Trainer::restore",
    ))
}

#[cfg(not(target_arch = "wasm32"))]
impl<B: Backend> Trainer<B> {
    /// [`Trainer::step`], blocking (native only).
    pub fn step_blocking(&mut self) -> Result<StepStats> {
        brrr_backend::block_on(self.step())
    }

    /// [`Trainer::evaluate`], blocking (native only).
    pub fn evaluate_blocking(&mut self) -> Result<f32> {
        brrr_backend::block_on(self.evaluate())
    }

    /// [`Trainer::run`], blocking (native only).
    pub fn run_blocking(&mut self, stop_at: u64, observer: &mut dyn Observer) -> Result<()> {
        brrr_backend::block_on(self.run(stop_at, observer))
    }

    /// [`Trainer::state`], blocking (native only).
    pub fn state_blocking(&self) -> Result<TrainState> {
        brrr_backend::block_on(self.state())
    }
}

/// Errors unless `batch` has the config's shape and holds that many tokens.
fn check_batch(config: &TrainConfig, batch: &Batch) -> Result<()> {
    let want = (config.batch_size, config.seq_len);
    let n = want.0 * want.1;
    if (batch.batch, batch.seq) != want || batch.inputs.len() != n || batch.targets.len() != n {
        return Err(Error::shape(
            "Trainer::step",
            format!(
                "the batch source gave a {}×{} batch of {} tokens, the config says {}×{}",
                batch.batch,
                batch.seq,
                batch.inputs.len(),
                want.0,
                want.1
            ),
        ));
    }
    Ok(())
}

/// Uploads a batch's [`crate::DocumentMask`], if it has one: `u32` positions and
/// segment ids, both `[batch, seq]`.
pub fn upload_mask<B: Backend>(
    backend: &B,
    batch: &Batch,
) -> Result<Option<(Tensor<B>, Tensor<B>)>> {
    let Some(m) = &batch.mask else {
        return Ok(None);
    };
    let n = batch.batch * batch.seq;
    if m.positions.len() != n || m.segments.len() != n {
        return Err(Error::shape(
            "Trainer::step",
            format!(
                "the document mask has {} positions and {} segment ids for {n} tokens",
                m.positions.len(),
                m.segments.len()
            ),
        ));
    }
    let dims = [batch.batch, batch.seq];
    Ok(Some((
        Tensor::from_u32(backend, &m.positions, dims)?,
        Tensor::from_u32(backend, &m.segments, dims)?,
    )))
}

/// Uploads a batch: `u32` token ids and `i32` targets, both `[batch, seq]`.
pub fn upload<B: Backend>(backend: &B, batch: &Batch) -> Result<(Tensor<B>, Tensor<B>)> {
    let ids = Tensor::from_u32(backend, &batch.inputs, [batch.batch, batch.seq])?;
    let targets: Vec<i32> = batch.targets.iter().map(|&t| t as i32).collect();
    let targets = Tensor::from_i32(backend, &targets, [batch.batch, batch.seq])?;
    Ok((ids, targets))
}

/// Adds the backend's memory in use and its peak since the step began to the trace's
/// counter track (Perfetto draws it under the spans).
fn record_memory<B: Backend>(tracer: &Tracer, backend: &B) {
    let m = backend.memory_stats();
    tracer.counters(
        "memory (bytes)",
        &[
            ("in use", m.bytes_in_use as f64),
            ("peak", m.peak_bytes as f64),
        ],
    );
}

/// Marks an op of the recomputation schedule (`Fck0`, `B3`) and the memory after it.
fn record_op<B: Backend>(tracer: &Tracer, backend: &B, op: &Op) {
    if tracer.is_enabled() {
        tracer.instant(op.to_string());
        record_memory(tracer, backend);
    }
}

/// The layers' name for the schedule's micro-batch `mb`.
fn micro_batch(mb: usize) -> Result<MicroBatch> {
    u32::try_from(mb).map(MicroBatch).map_err(|_| {
        Error::invalid(
            "Trainer::step",
            format!("micro-batch index {mb} does not fit in u32"),
        )
    })
}

/// Replaces every parameter's value with the saved one (same name, shape and dtype):
/// loads trained weights into a model for sampling.
pub fn load_params<B: Backend>(backend: &B, model: &mut Gpt<B>, state: &TrainState) -> Result<()> {
    load_params_where(backend, model, state, |_| true)
}

/// [`load_params`] for the parameters whose name `keep` accepts.
fn load_params_where<B: Backend>(
    backend: &B,
    model: &mut Gpt<B>,
    state: &TrainState,
    keep: impl Fn(&str) -> bool,
) -> Result<()> {
    for p in model.params_mut().into_iter().filter(|p| keep(&p.name)) {
        let saved = saved_param(state, &p.name, p.value.dims())?;
        let t = Tensor::from_host(backend, &saved.value, saved.shape.clone())?;
        let expected = p.master.as_ref().unwrap_or(&p.value).dtype();
        if t.dtype() != expected {
            return Err(Error::DType {
                op: "load checkpoint",
                expected,
                got: t.dtype(),
            });
        }
        match &mut p.master {
            // Mixed precision: the saved f32 weights become the master, and the compute
            // copy is rounded from them as the optimizer writes it.
            Some(master) => {
                p.value = t.to_dtype(p.value.dtype())?;
                *master = t;
            }
            None => p.value = t,
        }
    }
    Ok(())
}

/// One parameter's optimizer state as a checkpoint keeps it: f32 moments, or another
/// optimizer's own state (none before the first step).
pub(crate) async fn saved_moments<D: Backend>(
    state: Option<&MomentState<D>>,
) -> Result<(Option<(HostData, HostData)>, Option<OptimState>)> {
    Ok(match state {
        Some(MomentState::F32(m, v)) => (Some((m.to_host().await?, v.to_host().await?)), None),
        Some(MomentState::Bits8 { codes, absmax }) => (
            None,
            Some(OptimState::Bits8 {
                codes: codes.to_host().await?,
                absmax: absmax.to_host().await?,
            }),
        ),
        Some(MomentState::Projected(proj)) => (None, Some(OptimState::GaLore(proj.to_host()?))),
        None => (None, None),
    })
}

/// The parameters the optimizer updates, in the model's order: every one, or with LoRA
/// the adapters.
fn trainable<'a, B: Backend>(
    model: &'a mut Gpt<B>,
    config: &TrainConfig,
) -> Vec<&'a mut brrr_nn::Param<B>> {
    model
        .params_mut()
        .into_iter()
        .filter(|p| config.trains(&p.name))
        .collect()
}

/// AdamW's state for every trained parameter, in the model's order (f32 or 8-bit moments, as
/// saved; `AdamW::step` checks they fit); none if the saved optimizer never stepped.
fn load_moments<B: Backend, D: Backend>(
    backend: &D,
    model: &Gpt<B>,
    state: &TrainState,
    config: &TrainConfig,
) -> Result<Vec<MomentState<D>>> {
    if state.adamw_step == 0 {
        return Ok(Vec::new());
    }
    let optimizer = config.optimizer;
    let mut out = Vec::new();
    for p in model
        .params()
        .into_iter()
        .filter(|p| config.trains(&p.name))
    {
        let saved = saved_param(state, &p.name, p.value.dims())?;
        check_state_kind(optimizer, saved)?;
        let loaded = match (&saved.moments, &saved.optim) {
            (Some((m, v)), _) => MomentState::F32(
                Tensor::from_host(backend, m, saved.shape.clone())?,
                Tensor::from_host(backend, v, saved.shape.clone())?,
            ),
            (None, Some(OptimState::Bits8 { codes, absmax })) => MomentState::Bits8 {
                codes: Tensor::from_host(backend, codes, [codes.len()])?,
                absmax: Tensor::from_host(backend, absmax, [absmax.len()])?,
            },
            (None, Some(OptimState::GaLore(g))) => {
                let Optimizer::GaLore(c) = optimizer else {
                    return Err(Error::invalid(
                        "resume",
                        format!(
                            "{}: GaLore state in the checkpoint, but this run's optimizer is {optimizer}",
                            p.name
                        ),
                    ));
                };
                let [rows, cols] = saved.shape[..] else {
                    return Err(Error::Parse(format!(
                        "{}: GaLore state for a non-matrix",
                        p.name
                    )));
                };
                MomentState::Projected(Box::new(Projector::from_host(
                    c,
                    rows,
                    cols,
                    g.clone(),
                    backend,
                )?))
            }
            (None, None) => {
                return Err(Error::Parse(format!(
                    "checkpoint has no tensor \"adamw.m.{}\"",
                    p.name
                )));
            }
        };
        out.push(loaded);
    }
    Ok(out)
}

/// Refuses a parameter's saved optimizer state of another kind than `optimizer` gives
/// it (f32, 8-bit or GaLore's): a run resumes with the optimizer it was saved with.
fn check_state_kind(optimizer: Optimizer, saved: &ParamState) -> Result<()> {
    let numel = saved.shape.iter().product();
    let want = match () {
        _ if optimizer.projects(&saved.name, &saved.shape).is_some() => "GaLore",
        _ if optimizer.quantizes(numel) => "8-bit",
        _ => "f32",
    };
    let have = match &saved.optim {
        Some(OptimState::GaLore(_)) => "GaLore",
        Some(OptimState::Bits8 { .. }) => "8-bit",
        None => "f32",
    };
    if want != have {
        return Err(Error::invalid(
            "resume",
            format!(
                "{}: the checkpoint holds {have} optimizer state, and this run's optimizer \
                 ({optimizer}) keeps {want} state for it; resume with the optimizer the run \
                 was saved with",
                saved.name
            ),
        ));
    }
    Ok(())
}

fn saved_param<'a>(state: &'a TrainState, name: &str, dims: &[usize]) -> Result<&'a ParamState> {
    let saved = state
        .param(name)
        .ok_or_else(|| Error::Parse(format!("checkpoint has no tensor \"model.{name}\"")))?;
    if saved.shape.as_slice() != dims {
        return Err(Error::shape(
            "load checkpoint",
            format!(
                "{name}: checkpoint has {:?}, model expects {dims:?}",
                saved.shape
            ),
        ));
    }
    Ok(saved)
}
