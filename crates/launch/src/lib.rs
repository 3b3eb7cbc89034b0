//! # brrr-launch
//!
//! Starts a training run described by a [`brrr_train::TrainConfig`], on one device or on
//! a world of ranks, and drives it with the one training loop, [`brrr_train::run`]:
//!
//! - **the world**: `layout.dp × layout.tp × layout.pp` threads of this process by
//!   default ([`brrr_collectives::run_in_process`]), or, under a launcher (`brrr
//!   launch`, torchrun, srun, mpirun), this process as one rank of the world its
//!   environment describes ([`brrr_collectives::from_env`]);
//! - **each rank** builds its own backend ([`BackendKind`]: the CPU, wgpu, or CUDA with
//!   the device = the local rank), opens the data ([`brrr_data::DataSpec`]: the same
//!   global batches on every rank), and builds the engine its layout needs
//!   ([`brrr_train::EngineKind`]): `brrr_train::Trainer`, `brrr_dp::DataParallel`,
//!   `brrr_tp::TpTrainer` or `brrr_pp::PipelineEngine`;
//! - **the run directory** ([`brrr_train::RunDir`]) is written by world rank 0, and
//!   every rank saves its part of each checkpoint into it.
//!
//! Collectives between ranks go through the host (`brrr_collectives::Communicator`)
//! on every backend.
//!
//! Data, tensor and pipeline parallelism from a program of your own, on two threads:
//!
//! ```
//! use brrr_launch::{Job, launch};
//! use brrr_train::{SYNTHETIC, TrainConfig};
//!
//! # fn main() -> brrr_backend::Result<()> {
//! let mut config = TrainConfig::default();
//! (config.model.n_layer, config.model.n_head, config.model.n_embd) = (2, 2, 32);
//! (config.batch_size, config.seq_len, config.steps) = (4, 16, 3);
//! (config.eval_every, config.eval_batches) = (3, 1);
//! config.corpus = SYNTHETIC.into();
//! config.layout.pp = 2; // two pipeline stages; try layout.dp or layout.tp too
//! let mut losses = Vec::new();
//! let outcome = launch(&Job::new(config), &mut losses)?;
//! assert_eq!(outcome.steps_done, 3);
//! assert_eq!(losses.len(), 3);
//! # Ok(())
//! # }
//! ```
//!
//! (`Vec<f32>` is an [`Observer`] collecting the training losses; the `brrr` command
//! line passes its progress bar.)

#![warn(missing_docs)]

use brrr_backend::{Backend, Error, Result};
use brrr_collectives::env::{LaunchEnv, Launcher};
use brrr_collectives::{Communicator, ParallelGroups, ParallelLayout, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_data::DataSpec;
use brrr_dp::{DataParallel, DpConfig};
use brrr_perf::trace::Tracer;
use brrr_pp::PipelineEngine;
use brrr_tp::{TpConfig, TpTrainer};
use brrr_train::{
    Engine, EngineKind, Observer, RunDir, RunStart, TrainConfig, Trainer, run_blocking,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

mod backend;

pub use backend::{BackendKind, not_built};

/// A run to start: what to train, where, and what to write.
#[derive(Clone, Debug)]
pub struct Job {
    /// The run; its `layout` says how it is spread over ranks.
    pub config: TrainConfig,
    /// The backend every rank builds.
    pub backend: BackendKind,
    /// The run directory; `None` writes nothing (the observer still hears everything).
    pub out: Option<PathBuf>,
    /// Continue the run saved in this directory (its checkpoint, in this layout). With
    /// `out` the same directory, the run goes on in place.
    pub resume: Option<PathBuf>,
    /// Stop after this many steps in total, as if interrupted (a checkpoint is saved).
    pub stop_at: u64,
    /// Batches a thread prepares ahead of each rank's step (0: none).
    pub prefetch: usize,
    /// Write a Chrome trace of the lead rank's phases here.
    pub trace: Option<PathBuf>,
}

/// What world rank 0 reports after its last step.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Steps completed.
    pub steps_done: u64,
    /// Steps done when the run started (0 unless resumed).
    pub start_step: u64,
    /// [`Engine::describe`].
    pub engine: String,
    /// [`Engine::report`].
    pub report: Vec<String>,
    /// Rank 0's device.
    pub device: brrr_backend::BackendInfo,
    /// Ranks in the world.
    pub world: usize,
}

/// Batches prepared ahead when nothing says otherwise.
pub const DEFAULT_PREFETCH: usize = 2;

impl Job {
    /// `config` on the CPU, writing nothing, to its last step.
    pub fn new(config: TrainConfig) -> Self {
        Job {
            stop_at: config.steps,
            config,
            backend: BackendKind::Cpu,
            out: None,
            resume: None,
            prefetch: DEFAULT_PREFETCH,
            trace: None,
        }
    }

    /// Checks the job as a whole: the config (its layout's feature matrix included),
    /// the pipeline schedule, and the options that only some layouts have.
    pub fn validate(&self) -> Result<()> {
        let cfg = &self.config;
        cfg.validate()?;
        let l = &cfg.layout;
        if l.pp > 1 {
            let pp = brrr_pp::PpConfig {
                pp: l.pp,
                schedule: l.schedule.clone(),
                micro_batches: cfg.grad_accum,
            };
            pp.validate(cfg.model.n_layer, cfg.grad_accum)
                .map_err(|e| Error::invalid("train --pp", e))?;
        }
        if self.prefetch > brrr_data::spec::MAX_PREFETCH {
            return Err(Error::invalid(
                "train",
                format!(
                    "--prefetch {} is more than {} batches ahead",
                    self.prefetch,
                    brrr_data::spec::MAX_PREFETCH
                ),
            ));
        }
        Ok(())
    }
}

/// Starts `job`'s world and trains it to `job.stop_at`; `lead` (world rank 0's
/// observer: a progress bar, a test's log) hears every step. Returns rank 0's outcome
/// (under a launcher, this process's).
pub fn launch(job: &Job, lead: &mut (dyn Observer + Send)) -> Result<Outcome> {
    launch_with(job, &DataSpec::open(&job.config.data_options())?, lead)
}

/// [`launch`] on data the caller has opened already (`DataSpec::open(&job.config.data_options())`),
/// so that a corpus is read once.
pub fn launch_with(
    job: &Job,
    data: &DataSpec,
    lead: &mut (dyn Observer + Send),
) -> Result<Outcome> {
    run_world(job, lead, &|rank: Rank, lead| {
        rank_on(job.backend, rank.device, rank.comm, job, data, lead)
    })
}

/// Where one rank runs: its device index (the local rank under a launcher, the rank
/// in-process), its world's communicator, and whether it is the one this process
/// observes (in-process, world rank 0; under a launcher, this process's rank).
#[derive(Clone, Copy)]
pub struct Rank<'a> {
    /// The device index for the rank's backend.
    pub device: usize,
    /// The world (`None`: one device, no world).
    pub comm: Option<&'a Communicator>,
    /// Whether this is the rank a profiler or tracer of this process follows.
    pub observed: bool,
}

/// [`launch_with`] on backends you build: `make(rank)` gives each rank its backend (a
/// profiling wrapper of its device, a GPU of your choice); `tracer`, shared with the
/// observed rank's backend, say, records that rank's phases and is written to
/// `job.trace`. Every layout; one device too.
pub fn launch_on<B: Backend>(
    job: &Job,
    data: &DataSpec,
    lead: &mut (dyn Observer + Send),
    make: &(dyn Fn(Rank) -> Result<B> + Sync),
    tracer: Option<Arc<Tracer>>,
) -> Result<Outcome> {
    run_world(job, lead, &|rank: Rank, lead| {
        let tracer = tracer.clone().filter(|_| rank.observed);
        train_rank(make(rank)?, rank.comm, job, data, lead, tracer)
    })
}

/// One rank's run: its place in the world, and world rank 0's observer (`None` on
/// the others).
type RankFn<'a> = dyn Fn(Rank, Option<&mut dyn Observer>) -> Result<Outcome> + Sync + 'a;

/// Starts `job`'s world (one device, threads of this process, or this process under a
/// launcher) and runs `rank` on each of its ranks; rank 0's outcome.
fn run_world(job: &Job, lead: &mut (dyn Observer + Send), rank: &RankFn) -> Result<Outcome> {
    job.validate()?;
    let env = LaunchEnv::from_env()?;
    let want = job.config.layout.world();
    if env.launcher != Launcher::Single && env.world_size > 1 {
        if env.world_size != want {
            return Err(Error::invalid(
                "train",
                format!(
                    "the launcher started {} processes, the layout ({}) needs {want}",
                    env.world_size,
                    job.config.layout.flags()
                ),
            ));
        }
        let comm = brrr_collectives::from_env()?;
        let lead = (comm.rank() == 0).then_some(lead as &mut dyn Observer);
        let me = Rank {
            device: env.local_rank,
            comm: Some(&comm),
            observed: true,
        };
        return rank(me, lead);
    }
    if want == 1 && job.config.layout.engine() == EngineKind::OneDevice {
        let me = Rank {
            device: 0,
            comm: None,
            observed: true,
        };
        return rank(me, Some(lead));
    }
    let lead = Mutex::new(Some(lead));
    let results = run_in_process(want, |comm| {
        let mine = match comm.rank() {
            0 => lead.lock().ok().and_then(|mut l| l.take()),
            _ => None,
        };
        let mine = mine.map(|l| l as &mut dyn Observer);
        let me = Rank {
            device: comm.rank(),
            comm: Some(comm),
            observed: comm.rank() == 0,
        };
        Ok(rank(me, mine)?)
    });
    first_error_or_rank0(
        results
            .into_iter()
            .map(|r| r.map_err(Error::from))
            .collect(),
    )
}

/// The step the checkpoint of the run saved in `dir` reached, read from the files
/// `config`'s layout writes (rank 0's shard, stage 0's file, or the one checkpoint);
/// an error that names the layout when they are missing.
pub fn saved_step(dir: &std::path::Path, config: &TrainConfig) -> Result<u64> {
    use brrr_train::run_dir::{DP_DIR, PP_DIR};
    let l = &config.layout;
    let whole = dir.join(brrr_train::CHECKPOINT_FILE);
    let own = match l.engine() {
        EngineKind::OneDevice | EngineKind::TensorParallel => whole.clone(),
        EngineKind::DataParallel => brrr_dp::shard_path(&dir.join(DP_DIR), 0, l.dp),
        EngineKind::Pipeline => brrr_pp::stage_shard_path(&dir.join(PP_DIR), 0, l.pp, 0, l.tp),
    };
    // A layout's own files first, else one whole checkpoint (the engines restore in
    // the same order).
    let path = match own.exists() || !whole.exists() {
        true => own,
        false => whole.clone(),
    };
    if !path.exists() {
        return Err(Error::file(
            &path,
            format!(
                "not found: the run in {} has no checkpoint for its layout ({}); a run \
                 resumes in the layout it was saved in, or in any layout from one whole \
                 checkpoint (`brrr ckpt consolidate` writes it from a parallel run's files)",
                dir.display(),
                l.flags()
            ),
        ));
    }
    match l.engine() {
        _ if path == whole => Ok(brrr_train::TrainState::load(&path)?.step),
        EngineKind::DataParallel => Ok(brrr_dp::read_shard_header(&path)?.step),
        EngineKind::Pipeline => Ok(brrr_pp::read_stage_header(&path)?.step),
        EngineKind::OneDevice | EngineKind::TensorParallel => {
            Ok(brrr_train::TrainState::load(&path)?.step)
        }
    }
}

/// Rank 0's outcome; else the error of the rank that failed first (the others then
/// see its link close, and say so: not the cause).
fn first_error_or_rank0(results: Vec<Result<Outcome>>) -> Result<Outcome> {
    let mut outs = Vec::with_capacity(results.len());
    let mut errors = Vec::new();
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Ok(o) => outs.push(o),
            Err(e) => errors.push((rank, e)),
        }
    }
    // A lost link is the echo of another rank's failure: report a cause if there is one.
    let cause = errors
        .iter()
        .position(|(_, e)| !e.to_string().contains("lost its connection"))
        .unwrap_or(0);
    if !errors.is_empty() {
        let (rank, e) = errors.swap_remove(cause);
        return Err(match outs.len() + errors.len() {
            0 => e,
            _ => Error::invalid("train", format!("rank {rank}: {e}")),
        });
    }
    outs.into_iter()
        .next()
        .ok_or_else(|| Error::invalid("train", "no rank ran"))
}

/// One rank on a backend of `kind` (CUDA device `device`).
fn rank_on(
    kind: BackendKind,
    device: usize,
    comm: Option<&Communicator>,
    job: &Job,
    data: &DataSpec,
    lead: Option<&mut dyn Observer>,
) -> Result<Outcome> {
    let _ = device;
    match kind {
        BackendKind::Cpu => train_rank(CpuBackend::new(), comm, job, data, lead, None),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => train_rank(
            brrr_wgpu::WgpuBackend::new_blocking()?,
            comm,
            job,
            data,
            lead,
            None,
        ),
        // The local rank's GPU; ranks beyond the GPUs share them round robin (in-process
        // worlds on one GPU, for tests and teaching).
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => train_rank(
            brrr_cuda::CudaBackend::new(device % brrr_cuda::device_count()?.max(1))?,
            comm,
            job,
            data,
            lead,
            None,
        ),
        #[allow(unreachable_patterns)]
        other => Err(not_built(other)),
    }
}

/// `job` on one device of a backend you built (a profiling wrapper, a GPU of your
/// choice), in this thread; `tracer` records the phases when given (shared with the
/// backend, say), and is written to `job.trace`.
pub fn train_on<B: Backend>(
    backend: B,
    job: &Job,
    lead: &mut dyn Observer,
    tracer: Option<Arc<Tracer>>,
) -> Result<Outcome> {
    train_on_with(
        backend,
        job,
        &DataSpec::open(&job.config.data_options())?,
        lead,
        tracer,
    )
}

/// [`train_on`] on data the caller has opened already.
pub fn train_on_with<B: Backend>(
    backend: B,
    job: &Job,
    data: &DataSpec,
    lead: &mut dyn Observer,
    tracer: Option<Arc<Tracer>>,
) -> Result<Outcome> {
    job.validate()?;
    if job.config.layout.engine() != EngineKind::OneDevice {
        return Err(Error::invalid(
            "train",
            format!(
                "train_on runs one device; {} needs brrr_launch::launch",
                job.config.layout.flags()
            ),
        ));
    }
    train_rank(backend, None, job, data, Some(lead), tracer)
}

/// Builds this rank's engine for the layout and drives it.
fn train_rank<B: Backend>(
    backend: B,
    comm: Option<&Communicator>,
    job: &Job,
    data: &DataSpec,
    lead: Option<&mut dyn Observer>,
    tracer: Option<Arc<Tracer>>,
) -> Result<Outcome> {
    let cfg = job.config.clone();
    let (source, val) = data.source(&cfg.data_options(), job.prefetch)?;
    let world =
        || comm.ok_or_else(|| Error::invalid("train", "a parallel layout needs a communicator"));
    // A tracer given by the caller (a profiler's) records; else the lead records when a
    // trace is asked for.
    let tracer = match (tracer, &job.trace, lead.is_some()) {
        (Some(t), _, _) => Some(t),
        (None, Some(_), true) => Some(Arc::new(Tracer::new())),
        _ => None,
    };
    let l = &cfg.layout;
    match l.engine() {
        EngineKind::OneDevice => {
            let mut e = Trainer::new(&backend, cfg.clone(), source, val)?;
            if let Some(t) = &tracer {
                e.set_shared_tracer(t.clone());
            }
            // A fine-tuning run starts from its base run's weights; resumed, from its own.
            if let (Some(ft), None) = (&cfg.finetune, &job.resume) {
                e.load_base(&load_base_state(Path::new(&ft.base))?)?;
            }
            drive(&mut e, &backend, job, lead, tracer)
        }
        EngineKind::DataParallel => {
            let dp = DpConfig::of(&cfg);
            let mut e = DataParallel::new(&backend, cfg.clone(), dp, world()?, source)?;
            e.set_validation(val);
            if let Some(t) = &tracer {
                e.set_tracer(t.clone());
            }
            drive(&mut e, &backend, job, lead, tracer)
        }
        EngineKind::TensorParallel => {
            let layout = ParallelLayout {
                dp: l.dp,
                tp: l.tp,
                pp: 1,
            };
            let groups = ParallelGroups::new(world()?, layout)?;
            let tp = TpConfig { tp: l.tp, sp: l.sp };
            if l.zero >= 2 {
                // ZeRO-2/3 shard gradients and parameters: brrr-dp's engine over the shard.
                let mut e = brrr_tp::data_parallel(&backend, cfg.clone(), tp, groups, source)?;
                e.set_validation(val);
                if let Some(t) = &tracer {
                    e.set_tracer(t.clone());
                }
                return drive(&mut e, &backend, job, lead, tracer);
            }
            let mut e = TpTrainer::new(&backend, cfg.clone(), tp, groups)?;
            e.set_data(source, val);
            if let Some(t) = &tracer {
                e.set_tracer(t.clone());
            }
            drive(&mut e, &backend, job, lead, tracer)
        }
        EngineKind::Pipeline => {
            let mut e = PipelineEngine::new(&backend, cfg.clone(), world()?, source, val)?;
            if let Some(t) = &tracer {
                e.set_tracer(t.clone());
            }
            drive(&mut e, &backend, job, lead, tracer)
        }
    }
}

/// The saved state of a fine-tuning run's base: its one-device checkpoint.
fn load_base_state(dir: &Path) -> Result<brrr_train::TrainState> {
    if !dir.join(brrr_train::CHECKPOINT_FILE).is_file() {
        return Err(Error::file(
            dir,
            format!(
                "the base run has no one-device checkpoint ({}); a --dp or --pp \
                 run's shards become one with `brrr ckpt consolidate`",
                brrr_train::CHECKPOINT_FILE
            ),
        ));
    }
    brrr_train::load_state(dir)
}

/// Restores, opens the run directory, runs the loop, writes the trace.
fn drive<E: Engine, B: Backend>(
    engine: &mut E,
    backend: &B,
    job: &Job,
    lead: Option<&mut dyn Observer>,
    tracer: Option<Arc<Tracer>>,
) -> Result<Outcome> {
    if let Some(dir) = &job.resume {
        brrr_backend::block_on(engine.restore_from(dir))?;
    }
    let start_step = engine.steps_done();
    let info = backend.info();
    let is_lead = lead.is_some();
    let mut observer: Box<dyn Observer + '_> = match (lead, &job.out) {
        (Some(lead), Some(out)) => {
            let dir = match &job.resume {
                Some(from) => RunDir::resume(out, from, engine.config(), start_step)?,
                None => RunDir::create(out, engine.config())?,
            };
            Box::new((dir, lead))
        }
        (Some(lead), None) => Box::new(lead),
        (None, Some(out)) => Box::new(RunDir::follower(out)),
        (None, None) => Box::new(()),
    };
    observer.on_start(&RunStart {
        step: start_step,
        engine: engine.describe(),
        device: format!("{} ({})", info.name, info.device),
        params: engine.config().model.num_params(),
    })?;
    run_blocking(engine, job.stop_at, &mut *observer)?;
    if let (Some(path), Some(t), true) = (&job.trace, &tracer, is_lead) {
        t.write_chrome_trace(path)
            .map_err(|e| Error::file(path, e.to_string()))?;
    }
    Ok(Outcome {
        steps_done: engine.steps_done(),
        start_step,
        engine: engine.describe(),
        report: engine.report(),
        device: info,
        world: engine.config().layout.world(),
    })
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
