//! One training loop for every layout: the [`Engine`] trait, which the one-device
//! [`crate::Trainer`], brrr-dp's `DataParallel`, brrr-tp's `TpTrainer` and brrr-pp's
//! `PipelineEngine` implement, and [`run`], the loop that drives any of them and reports
//! to an [`Observer`].
//!
//! This is llm.c's "one loop for one or many GPUs" and picotron's "each parallelism a
//! wrapper around one loop": a layout decides how a step is computed and how its state
//! is saved; when to evaluate, when to checkpoint and what to tell the user is decided
//! here, once. A feature of the loop (evaluation cadence, `--stop-after`, checkpoints at
//! every evaluation) therefore works in every layout.
//!
//! Every method of [`Engine`] that talks to other ranks is *collective*: every rank of
//! the world calls it, in the same order. [`run`] calls them in an order that depends
//! only on the configuration and the step, so all ranks agree.

use crate::config::TrainConfig;
use brrr_backend::Result;
use std::path::Path;

/// The single-device checkpoint's file name inside a run directory (one device, and
/// tensor-parallel runs, whose shards are gathered into it).
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";

/// What one optimizer step did.
#[derive(Clone, Debug, PartialEq)]
pub struct StepStats {
    /// The step's number, counting from 1 (= steps completed after it).
    pub step: u64,
    /// Mean training loss over the step's micro-batches, nats per token.
    pub loss: f32,
    /// Global gradient L2 norm before clipping, as the device computed it (f32).
    pub grad_norm: f64,
    /// The learning rate the update used.
    pub lr: f64,
    /// Tokens the step trained on.
    pub tokens: usize,
    /// The loss scale after the step's update (1 without loss scaling).
    pub loss_scale: f32,
    /// Whether the step found an inf/NaN gradient and left the weights unchanged.
    pub skipped: bool,
    /// Wall-clock seconds of the step, read back included; `None` on wasm32, where
    /// `std::time::Instant` is not available.
    pub seconds: Option<f64>,
    /// The device's peak bytes in use during the step (`Backend::memory_stats`; 0 on a
    /// backend that does not count).
    pub peak_bytes: u64,
    /// The most bytes the forwards and backwards added to what was in use when the
    /// step began: the activations' peak, what `--checkpoint` trades against compute.
    pub activation_peak_bytes: u64,
}

/// A validation result: the mean loss over the fixed validation batches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    /// Steps completed when it was measured.
    pub step: u64,
    /// Mean validation loss, nats per token.
    pub loss: f32,
}

/// What a run is about to do, told to [`Observer::on_start`] once the engine is built
/// (and restored), before the first step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunStart {
    /// Steps already done (0 unless resumed).
    pub step: u64,
    /// [`Engine::describe`] of this rank's engine.
    pub engine: String,
    /// The device, e.g. `cpu (x86_64, 2 threads)`.
    pub device: String,
    /// The model's parameters.
    pub params: usize,
}

/// A way of training: one device, or one rank of a data-, tensor- or pipeline-parallel
/// world. [`run`] drives it.
///
/// `async` so that the one-device trainer runs on a browser's main thread; the parallel
/// engines, native only, do their work inside the future and never yield.
#[allow(async_fn_in_trait)]
pub trait Engine {
    /// The run's configuration (the same on every rank).
    fn config(&self) -> &TrainConfig;

    /// Optimizer steps completed.
    fn steps_done(&self) -> u64;

    /// One optimizer step, drawing its batches from the engine's own source.
    /// Collective. Every rank returns the same loss and gradient norm.
    async fn step(&mut self) -> Result<StepStats>;

    /// The mean loss over the fixed validation batches; the same number on every rank.
    /// Collective.
    async fn evaluate(&mut self) -> Result<f32>;

    /// Writes this rank's part of the run's state into the run directory `dir` (one
    /// file on one device; a shard per rank, or a gathered file from rank 0, in
    /// parallel layouts), atomically. Collective.
    async fn save_to(&mut self, dir: &Path) -> Result<()>;

    /// Continues from the state [`Engine::save_to`] wrote into `dir` by a run of the
    /// same layout: weights, optimizer, the data's position and the step. Collective.
    async fn restore_from(&mut self, dir: &Path) -> Result<()>;

    /// One line naming the layout, e.g. `"dp 2 × ZeRO-1 (2 in-process ranks)"`.
    fn describe(&self) -> String;

    /// What the layout measured beyond the step's numbers (bytes sent, overlap, the
    /// pipeline's bubble), a line each, for the run's summary; after the last step.
    fn report(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Receives what [`run`] produces. For each step, in this order: `on_eval` (when the
/// step evaluates, see [`TrainConfig::evaluates_at`]), `on_step`, then, after evaluating
/// steps and after the last step of the run, the engine saves into
/// [`Observer::checkpoint_dir`] (if any) and `on_checkpoint` follows. An error from a
/// callback stops the run and is returned by [`run`].
pub trait Observer {
    /// The run is about to start (called by whoever starts the run, e.g. brrr-launch,
    /// not by [`run`]).
    fn on_start(&mut self, _start: &RunStart) -> Result<()> {
        Ok(())
    }
    /// A step finished.
    fn on_step(&mut self, _stats: &StepStats) -> Result<()> {
        Ok(())
    }
    /// The model was evaluated on the validation batches.
    fn on_eval(&mut self, _eval: &Evaluation) -> Result<()> {
        Ok(())
    }
    /// The run directory the engine saves its checkpoints into; `None`: no files.
    /// Every rank's observer must give the same answer (saving is collective).
    fn checkpoint_dir(&self) -> Option<&Path> {
        None
    }
    /// The engine saved its state after step `step` (or, without a checkpoint
    /// directory, would have).
    fn on_checkpoint(&mut self, _step: u64) -> Result<()> {
        Ok(())
    }
}

/// An observer that ignores everything.
impl Observer for () {}

/// Two observers, told everything in turn (the first first); the checkpoint directory
/// is the first one's, else the second's.
impl<A: Observer, B: Observer> Observer for (A, B) {
    fn on_start(&mut self, s: &RunStart) -> Result<()> {
        self.0.on_start(s)?;
        self.1.on_start(s)
    }
    fn on_step(&mut self, s: &StepStats) -> Result<()> {
        self.0.on_step(s)?;
        self.1.on_step(s)
    }
    fn on_eval(&mut self, e: &Evaluation) -> Result<()> {
        self.0.on_eval(e)?;
        self.1.on_eval(e)
    }
    fn checkpoint_dir(&self) -> Option<&Path> {
        self.0.checkpoint_dir().or_else(|| self.1.checkpoint_dir())
    }
    fn on_checkpoint(&mut self, step: u64) -> Result<()> {
        self.0.on_checkpoint(step)?;
        self.1.on_checkpoint(step)
    }
}

impl<O: Observer + ?Sized> Observer for &mut O {
    fn on_start(&mut self, s: &RunStart) -> Result<()> {
        (**self).on_start(s)
    }
    fn on_step(&mut self, s: &StepStats) -> Result<()> {
        (**self).on_step(s)
    }
    fn on_eval(&mut self, e: &Evaluation) -> Result<()> {
        (**self).on_eval(e)
    }
    fn checkpoint_dir(&self) -> Option<&Path> {
        (**self).checkpoint_dir()
    }
    fn on_checkpoint(&mut self, step: u64) -> Result<()> {
        (**self).on_checkpoint(step)
    }
}

/// The training loop: steps `engine` until `stop_at` steps (at most `config.steps`)
/// are done, evaluating where [`TrainConfig::evaluates_at`] says, and saving into the
/// observer's checkpoint directory after every evaluation and after the last step.
///
/// Whether a step evaluates depends only on its number, so an interrupted and resumed
/// run evaluates (and checkpoints) where an uninterrupted one does, in every layout.
pub async fn run<E: Engine + ?Sized>(
    engine: &mut E,
    stop_at: u64,
    observer: &mut dyn Observer,
) -> Result<()> {
    let stop_at = stop_at.min(engine.config().steps);
    while engine.steps_done() < stop_at {
        let stats = engine.step().await?;
        let done = stats.step;
        let eval_now = engine.config().evaluates_at(done);
        if eval_now {
            let loss = engine.evaluate().await?;
            observer.on_eval(&Evaluation { step: done, loss })?;
        }
        observer.on_step(&stats)?;
        if eval_now || done == stop_at {
            if let Some(dir) = observer.checkpoint_dir() {
                let dir = dir.to_path_buf();
                engine.save_to(&dir).await?;
            }
            observer.on_checkpoint(done)?;
        }
    }
    Ok(())
}

/// [`run`], blocking (native only).
#[cfg(not(target_arch = "wasm32"))]
pub fn run_blocking<E: Engine + ?Sized>(
    engine: &mut E,
    stop_at: u64,
    observer: &mut dyn Observer,
) -> Result<()> {
    brrr_backend::block_on(run(engine, stop_at, observer))
}

/// Collects the training loss of every step: the smallest useful observer.
impl Observer for Vec<f32> {
    fn on_step(&mut self, s: &StepStats) -> Result<()> {
        self.push(s.loss);
        Ok(())
    }
}
