//! [`PipelineEngine`]: one rank of a `dp × tp × pp` pipeline run as a
//! [`brrr_train::Engine`], so the one training loop (`brrr_train::run`) drives a
//! pipeline as it drives one device: the same evaluation cadence, checkpoints at every
//! evaluation, `--stop-after`, and resume.
//!
//! A step draws `m = config.grad_accum` global micro-batches of `config.batch_size`
//! rows, the same batches `brrr train --grad-accum m` draws on one device; replica `d`
//! of `dp` trains rows `d·B/D .. (d+1)·B/D` of each. The stage runs its schedule, the
//! tied gradients are exchanged and the replicas averaged, and AdamW steps on the
//! global norm.

use crate::config::PpConfig;
use crate::executor::{MicroBatchData, PipelineStage, gather_timeline, step_loss};
use crate::generate::generate;
use crate::schedule::{Schedule, ScheduleKind};
use crate::simulate::{Costs, Timeline, simulate};
use brrr_amp::DynamicLossScaler;
use brrr_backend::{Backend, DType, Error, Result};
use brrr_collectives::{Communicator, ParallelGroups, ParallelLayout, ReduceOp};
use brrr_nn::{AdamWConfig, Gpt};
use brrr_perf::trace::Tracer;
use brrr_train::run_dir::PP_DIR;
use brrr_train::{Batch, BatchSource, Engine, ScalerHeader, StepStats, TrainConfig};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The last step's measured timeline, drawn at every checkpoint.
pub const PIPELINE_TIMELINE_FILE: &str = "pipeline.svg";
/// The schedule's simulated timeline (unit costs) beside it.
pub const PIPELINE_PLAN_FILE: &str = "pipeline-plan.svg";

/// One rank of a pipeline run.
pub struct PipelineEngine<B: Backend> {
    backend: B,
    config: TrainConfig,
    stage: PipelineStage<B>,
    schedule: Schedule,
    kind: ScheduleKind,
    /// The ranks of the other stages of this pipeline (same tensor rank).
    pp: Communicator,
    /// The same stage of the other data-parallel replicas.
    dp: Communicator,
    /// This replica's rows of each global micro-batch.
    rows: Range<usize>,
    /// The data-parallel replica (0 writes the stage files).
    replica: usize,
    data: Box<dyn BatchSource>,
    /// The validation batches, uploaded (stage 0 reads the ids, the last the targets).
    val: Vec<MicroBatchData<B>>,
    step: u64,
    /// Steps the run had done when this process started (the first one is not timed).
    start: Option<u64>,
    measured: Measured,
    /// Records each step's phases (`--trace`); disabled by default.
    tracer: Arc<Tracer>,
    /// The dynamic loss scaler with `--amp fp16`: every rank scales by the same value
    /// and skips the same steps (the overflow flag is agreed over the whole world).
    scaler: Option<DynamicLossScaler<B>>,
}

/// What the timed steps measured, on the rank that gathers the timelines.
#[derive(Default)]
struct Measured {
    last: Option<Timeline>,
    makespan: f64,
    busy: Vec<f64>,
    steps: u32,
}

impl<B: Backend> PipelineEngine<B> {
    /// This rank's engine: the model of `config.seed` (the one-device trainer's
    /// initial weights) cut into `layout.pp` stages (sliced over the tensor-parallel
    /// group when `layout.tp > 1`), scheduled by `layout.schedule`. `data` yields global
    /// batches (the same on every rank), `val` global validation batches.
    pub fn new(
        backend: &B,
        config: TrainConfig,
        world: &Communicator,
        data: Box<dyn BatchSource>,
        val: Vec<Batch>,
    ) -> Result<Self> {
        config.validate()?;
        let l = &config.layout;
        let layout = ParallelLayout {
            dp: l.dp,
            tp: l.tp,
            pp: l.pp,
        };
        let pp_config = PpConfig {
            pp: l.pp,
            schedule: l.schedule.clone(),
            micro_batches: config.grad_accum,
        };
        let kind = pp_config
            .kind()
            .map_err(|e| Error::invalid("train --pp", e))?;
        pp_config
            .validate(config.model.n_layer, config.grad_accum)
            .map_err(|e| Error::invalid("train --pp", e))?;
        let schedule = generate(kind, l.pp, config.grad_accum)
            .map_err(|e| Error::invalid("train --pp", e.to_string()))?;
        if world.world_size() != layout.dp * layout.tp * layout.pp {
            return Err(Error::invalid(
                "train --pp",
                format!(
                    "{} ranks for --dp {} × --tp {} × --pp {}: start exactly {}",
                    world.world_size(),
                    l.dp,
                    l.tp,
                    l.pp,
                    layout.dp * layout.tp * layout.pp
                ),
            ));
        }
        let groups = ParallelGroups::new(world, layout)?;
        let (replica, _, stage_idx) = layout.coords(world.rank());
        let rows = replica_rows(config.batch_size, l.dp, replica);
        let tp = (l.tp > 1).then(|| (Arc::new(groups.tp), l.sp));
        let stage = build_stage(backend, &config, (replica, stage_idx), &schedule, tp)?;
        let scaler = match config.amp.scales_loss() {
            true => Some(DynamicLossScaler::new(backend, config.amp.scaler.clone())?),
            false => None,
        };
        let val = val
            .iter()
            .map(|b| MicroBatchData::upload(backend, b))
            .collect::<Result<Vec<_>>>()?;
        Ok(PipelineEngine {
            backend: backend.clone(),
            config,
            stage,
            schedule,
            kind,
            pp: groups.pp,
            dp: groups.dp,
            rows,
            replica,
            data,
            val,
            step: 0,
            start: None,
            measured: Measured::default(),
            tracer: Arc::new(Tracer::disabled()),
            scaler,
        })
    }

    /// Records each step's phases (`step`, `data`, `schedule`, `reduce grads`, `adamw`,
    /// `evaluate`, `checkpoint`) into `tracer`.
    pub fn set_tracer(&mut self, tracer: Arc<Tracer>) {
        self.tracer = tracer;
    }

    /// This rank's stage.
    pub fn stage(&self) -> &PipelineStage<B> {
        &self.stage
    }

    /// The schedule every stage runs.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The last step's measured timeline (seconds), on the rank that gathers them
    /// (stage 0 of replica 0, tensor rank 0); `None` elsewhere.
    pub fn last_timeline(&self) -> Option<&Timeline> {
        self.measured.last.as_ref()
    }

    /// Idle fraction per stage over the timed steps (all but a process's first):
    /// `1 − busy / makespan`; and all stages together, `1 − Σ busy / (p · Σ makespan)`.
    /// `None` where the timelines are not gathered.
    pub fn measured_bubble(&self) -> Option<(Vec<f64>, f64)> {
        let m = &self.measured;
        let (busy, makespan) = match (m.steps, &m.last) {
            (0, Some(t)) => (t.busy.clone(), t.makespan),
            (_, Some(_)) => (m.busy.clone(), m.makespan),
            _ => return None,
        };
        let idle = busy.iter().map(|b| 1.0 - b / makespan).collect();
        let all = 1.0 - busy.iter().sum::<f64>() / (busy.len() as f64 * makespan);
        Some((idle, all))
    }

    /// fp16: unscales this rank's gradients, then agrees on the overflow flag with
    /// MAX over the pipeline and the replicas, so one stage's inf skips the step on
    /// every rank and every scaler moves the same way (as brrr-dp's ZeRO shards do).
    fn unscale(&mut self) -> Result<()> {
        let Some(scaler) = &mut self.scaler else {
            return Ok(());
        };
        scaler.unscale(self.stage.params_mut())?;
        let mut flag = [scaler.found_inf().to_vec_f32()?[0]];
        self.pp.all_reduce(&mut flag, ReduceOp::Max)?;
        self.dp.all_reduce(&mut flag, ReduceOp::Max)?;
        scaler.set_found_inf(flag[0])
    }

    /// fp16: the scale update after the step; (the scale after it, whether the step
    /// was skipped). A skipped step is no AdamW step: its bias-correction count stays,
    /// as on one device.
    fn update_scale(&mut self) -> Result<(f32, bool)> {
        let Some(s) = &mut self.scaler else {
            return Ok((1.0, false));
        };
        let r = s.update_and_observe()?;
        if r.skipped {
            self.stage.opt.step -= 1;
        }
        Ok((r.scale, r.skipped))
    }

    fn micro_batches(&mut self) -> Result<Vec<MicroBatchData<B>>> {
        (0..self.schedule.m)
            .map(|_| {
                let batch = self.data.next_rows(self.rows.clone())?;
                MicroBatchData::upload(&self.backend, &batch)
            })
            .collect()
    }

    fn record(&mut self, timeline: Option<Timeline>, timed: bool) {
        let Some(t) = timeline else { return };
        let m = &mut self.measured;
        if timed {
            m.busy.resize(t.busy.len(), 0.0);
            for (sum, b) in m.busy.iter_mut().zip(&t.busy) {
                *sum += b;
            }
            m.makespan += t.makespan;
            m.steps += 1;
        }
        m.last = Some(t);
    }

    /// Whether this rank writes the run's shared pictures.
    fn gathers(&self) -> bool {
        self.measured.last.is_some()
    }

    fn write_timelines(&self, dir: &Path) -> Result<()> {
        let Some(t) = &self.measured.last else {
            return Ok(());
        };
        let (p, m) = (self.schedule.p, self.schedule.m);
        let mut ms = t.clone();
        for s in &mut ms.spans {
            s.start *= 1e3;
            s.end *= 1e3;
        }
        ms.makespan *= 1e3;
        let title = format!("{}, p = {p}, m = {m}: last step measured (ms)", self.kind);
        let svg = crate::svg::timeline_svg(&ms, &title, "ms");
        brrr_train::atomic::write_atomic(dir.join(PIPELINE_TIMELINE_FILE), svg.as_bytes())?;
        let plan = planned(self.kind, p, m, Costs::unit())?;
        let title = format!("{}, p = {p}, m = {m}: planned, F = B = W = 1", self.kind);
        let svg = crate::svg::timeline_svg(&plan, &title, "unit costs");
        brrr_train::atomic::write_atomic(dir.join(PIPELINE_PLAN_FILE), svg.as_bytes())
    }
}

/// Rows `d·B/D .. (d+1)·B/D` of a micro-batch of `batch` rows: replica `d` of `dp`
/// (the layout's validation has checked that `dp` divides `batch`).
impl<B: Backend> PipelineEngine<B> {
    /// Restores from one whole checkpoint: the stage's slice of it, the loss scale,
    /// the steps and the data's position.
    fn restore_whole(&mut self, state: &brrr_train::TrainState) -> Result<()> {
        if state.data_fingerprint != self.data.fingerprint() {
            return Err(Error::invalid(
                "PipelineEngine::restore",
                "the data differs from the one this run was trained on",
            ));
        }
        self.stage.restore_state(state)?;
        if let (Some(s), Some(ls)) = (&mut self.scaler, &state.loss_scaler) {
            s.restore_state(ls.scale, &[ls.growth_tracker, ls.hysteresis_tracker])?;
        }
        self.data.set_position(&state.data_position)?;
        self.step = state.step;
        Ok(())
    }
}

fn replica_rows(batch: usize, dp: usize, d: usize) -> Range<usize> {
    let rows = batch / dp.max(1);
    d * rows..(d + 1) * rows
}

/// Stage `stage_idx` of the model every rank builds from the seed, sliced per tensor
/// rank when `tp` gives the tensor-parallel group and whether sequence parallelism is on.
fn build_stage<B: Backend>(
    backend: &B,
    cfg: &TrainConfig,
    (replica, stage_idx): (usize, usize),
    schedule: &Schedule,
    tp: Option<(Arc<Communicator>, bool)>,
) -> Result<PipelineStage<B>> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut model = Gpt::new(backend, cfg.model.clone(), DType::F32, &mut rng)?;
    // The stages keep these blocks (sliced per tensor rank): the switch carries over.
    model.set_fused_attention(cfg.fused_attention);

    let opt = AdamWConfig {
        weight_decay: cfg.weight_decay,
        ..AdamWConfig::default()
    };
    let (p, v) = (schedule.p, schedule.v);
    let mut stage = match tp {
        Some((tp, sp)) => PipelineStage::new_tensor_parallel(model, stage_idx, p, v, opt, tp, sp)?,
        None => PipelineStage::new(model, stage_idx, p, v, opt)?,
    };
    // `--amp`: the one-device trainer's 16-bit compute copies beside f32 masters, made
    // from the stage's f32 pieces (whole, or this tensor rank's slices).
    if let Some(policy) = cfg.amp.policy() {
        stage.apply_policy(&policy)?;
    }
    // `--checkpoint`: one device's plan, run on each chunk's blocks.
    stage.set_recompute(|| cfg.recompute())?;
    // The data-parallel dimension: the gradient bucket, and `--zero 1`'s owners.
    let zero1 = (cfg.layout.zero > 0).then_some((replica, cfg.layout.dp));
    stage.set_data_parallel(brrr_dp::bucket_bytes(cfg), zero1)?;
    Ok(stage)
}

/// The simulated timeline of `kind` on `p` stages and `m` micro-batches (per-stage
/// costs, split over the chunks).
pub fn planned(kind: ScheduleKind, p: usize, m: usize, costs: Costs) -> Result<Timeline> {
    let s = generate(kind, p, m).map_err(|e| Error::invalid("pipeline", e.to_string()))?;
    simulate(&s, costs.per_chunk(kind.chunks())).map_err(|d| {
        Error::invalid(
            "pipeline",
            format!("the generated schedule deadlocks at {:?}", d.stuck),
        )
    })
}

impl<B: Backend> Engine for PipelineEngine<B> {
    fn config(&self) -> &TrainConfig {
        &self.config
    }

    fn steps_done(&self) -> u64 {
        self.step
    }

    async fn step(&mut self) -> Result<StepStats> {
        let start = *self.start.get_or_insert(self.step);
        let t0 = Instant::now();
        let lr = self.config.schedule().lr(self.step);
        let m = self.schedule.m;
        let tracer = self.tracer.clone();
        let _span = tracer.span("step");
        let data = tracer.in_span("data", || self.micro_batches())?;
        // Each pipeline's mean over its rows; the data-parallel average of the
        // gradients makes it the mean over the global batch.
        let dloss = 1.0 / (self.rows.len() * self.config.seq_len * m) as f32;
        // fp16: every backward seeds the scaled loss gradient (a power of two, exact).
        let dloss = dloss * self.scaler.as_ref().map_or(1.0, |s| s.scale());
        let run = tracer.in_span("schedule", || {
            self.stage.run(&self.pp, &self.schedule, &data, dloss)
        })?;
        tracer.in_span("reduce grads", || {
            self.stage.reduce_grads(&self.pp, Some(&self.dp))
        })?;
        tracer.in_span("unscale", || self.unscale())?;
        let loss = step_loss(&run, m, &self.pp, Some(&self.dp))? as f32;
        let found_inf = self.scaler.as_ref().map(|s| s.found_inf());
        let norm = tracer.in_span("adamw", || {
            self.stage.update_scaled(
                &self.pp,
                Some(&self.dp),
                lr as f32,
                self.config.grad_clip,
                found_inf,
            )
        })?;
        let (loss_scale, skipped) = self.update_scale()?;
        let timeline = match self.replica == 0 && self.stage.tp_rank() == 0 {
            true => gather_timeline(&self.pp, &run.spans)?,
            false => None,
        };
        let done = self.step + 1;
        self.record(timeline, done > start + 1);
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
            grad_norm: norm,
            lr,
            tokens: self.config.tokens_per_step(),
            loss_scale,
            skipped,
            seconds: Some(t0.elapsed().as_secs_f64()),
            peak_bytes: run.peak_bytes,
            activation_peak_bytes: run.peak_bytes.saturating_sub(run.start_bytes),
        })
    }

    async fn evaluate(&mut self) -> Result<f32> {
        if self.val.is_empty() {
            return Ok(0.0);
        }
        let tracer = self.tracer.clone();
        let _span = tracer.span("evaluate");
        let val = std::mem::take(&mut self.val);
        let loss = self.stage.eval_loss(&self.pp, &val);
        self.val = val;
        Ok(loss? as f32)
    }

    /// Replica 0's ranks write `dir/pp/pp-stage{s}-of{n}[-tp{r}-of{t}].bin` (atomic,
    /// fsynced), with the data's position; the rank that gathers the timelines draws
    /// the last step's into `pipeline.svg` beside the planned one.
    async fn save_to(&mut self, dir: &Path) -> Result<()> {
        let tracer = self.tracer.clone();
        let _span = tracer.span("checkpoint");
        // Collective over the replicas under `--zero 1` (each keeps a part); otherwise
        // only the writing replica reads its own.
        let moments = match (self.stage.owners().is_some(), self.replica == 0) {
            (false, false) => Vec::new(),
            _ => self.stage.gather_moments(&self.dp)?,
        };
        if self.replica == 0 {
            let position = self.data.position();
            let scaler = match &self.scaler {
                Some(s) => {
                    let (scale, trackers, _) = s.read_state().await?;
                    Some(ScalerHeader::new(scale, &trackers))
                }
                None => None,
            };
            self.stage.save_checkpoint_with(
                &dir.join(PP_DIR),
                self.step,
                &position,
                scaler,
                &moments,
            )?;
        }
        if self.gathers() {
            self.write_timelines(dir)?;
        }
        Ok(())
    }

    /// This layout's stage files when `dir` has them, else one whole checkpoint (a run
    /// of another layout, consolidated), sliced into this rank's stage.
    async fn restore_from(&mut self, dir: &Path) -> Result<()> {
        let whole = dir.join(brrr_train::CHECKPOINT_FILE);
        if !self.stage.checkpoint_path(&dir.join(PP_DIR)).exists() && whole.exists() {
            return self.restore_whole(&brrr_train::load_state(dir)?);
        }
        let header = self.stage.load_checkpoint(&dir.join(PP_DIR))?;
        // A file without the scaler's state leaves the scale at its initial value.
        if let (Some(s), Some(saved)) = (&mut self.scaler, header.loss_scaler) {
            s.restore_state(saved.scale(), &saved.trackers())?;
        }
        if header.data_position.is_empty() {
            // Files from before the position was saved: the batch stream is a
            // function of the seed, so skip the batches the saved steps drew.
            for _ in 0..header.step as usize * self.schedule.m {
                self.data.next_rows(self.rows.clone())?;
            }
        } else {
            self.data.set_position(&header.data_position)?;
        }
        self.step = header.step;
        Ok(())
    }

    fn describe(&self) -> String {
        let l = &self.config.layout;
        format!(
            "pipeline: --pp {} --schedule {} ({} chunk{} a stage), {} micro-batches of {} \
             rows, --dp {} --tp {}{}",
            l.pp,
            self.kind,
            self.kind.chunks(),
            if self.kind.chunks() == 1 { "" } else { "s" },
            self.schedule.m,
            self.config.batch_size,
            l.dp,
            l.tp,
            if l.sp { " --sp" } else { "" }
        )
    }

    fn report(&self) -> Vec<String> {
        let Some((idle, bubble)) = self.measured_bubble() else {
            return Vec::new();
        };
        let (p, m) = (self.schedule.p, self.schedule.m);
        let sim = planned(self.kind, p, m, Costs::unit()).map_or(f64::NAN, |t| t.bubble_fraction());
        let th = crate::theory::bubble_fraction(self.kind, p, m, Costs::unit()).unwrap_or(f64::NAN);
        let mut lines = vec![format!(
            "bubble: measured {:.1}%, simulated {:.1}% (F = B = W), theory {:.1}%",
            100.0 * bubble,
            100.0 * sim,
            100.0 * th
        )];
        let in_flight = self
            .measured
            .last
            .as_ref()
            .map(|t| t.peak_in_flight.clone());
        for (s, idle) in idle.iter().enumerate() {
            let flight = in_flight
                .as_ref()
                .and_then(|f| f.get(s))
                .map_or(String::new(), |f| {
                    format!(", {f} micro-batches in flight at most")
                });
            lines.push(format!("stage {s}: idle {:.1}%{flight}", 100.0 * idle));
        }
        lines
    }
}
