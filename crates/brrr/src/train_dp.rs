//! `brrr train --dp N --zero S [--bucket-mb X]`: data-parallel training with `brrr-dp`,
//! on a text corpus or `--data` shards (with `--doc-mask`), in f32 or with `--amp`.
//!
//! By default the `N` ranks are threads of this process, each with its own CPU backend
//! instance. Under a launcher (`brrr launch`, `mpirun`, `srun`, `torchrun`) each process
//! is one rank and the world comes from the environment
//! ([`brrr_collectives::from_env`]). Rank 0 writes the run directory's `config.toml`,
//! `metrics.csv` and `loss.svg`, like a one-device run; every rank writes its shard of
//! the checkpoint into `dp/` (see [`brrr_dp::DataParallel::save_shard`]), and `--resume
//! DIR` continues from them with the same `--dp`, `--zero` and `--bucket-mb`.

use crate::data::{Corpus, SYNTHETIC, synthetic_corpus, unigram_entropy_nats};
use crate::metrics::{self, MetricsWriter, Row};
use crate::train::{
    BackendKind, CONFIG_FILE, METRICS_FILE, PLOT_FILE, Summary, TrainArgs, config_from_args,
    read_config,
};
use brrr_backend::{Error, Result};
use brrr_collectives::env::{LaunchEnv, Launcher};
use brrr_collectives::{Communicator, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_dp::{DataParallel, DpConfig, StepReport};
use brrr_perf::trace::Tracer;
use brrr_train::{Batch, BatchSource, Batcher, StepStats, TrainConfig, val_batches};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The checkpoint shards' directory inside a run directory.
pub const SHARD_DIR: &str = "dp";

/// Whether the flags ask for data parallelism, or a launcher started several processes
/// (`mpirun -np 4 brrr train` is four data-parallel ranks, as `torchrun` users expect,
/// rather than four single-device runs writing the same directory).
pub fn wants_dp(args: &TrainArgs) -> bool {
    args.dp.is_some()
        || args.zero.is_some()
        || args.bucket_mb.is_some()
        || LaunchEnv::from_env().is_ok_and(|e| e.launcher != Launcher::Single && e.world_size > 1)
}

/// The data-parallel layout the flags describe (`world` ranks).
fn dp_config(args: &TrainArgs, world: usize) -> Result<DpConfig> {
    let mut dp = DpConfig::new(world, args.zero.unwrap_or(0));
    if let Some(mb) = args.bucket_mb {
        if !(mb.is_finite() && mb > 0.0) {
            return Err(Error::invalid(
                "train",
                format!("--bucket-mb must be positive, got {mb}"),
            ));
        }
        dp.bucket_bytes = (mb * (1u64 << 20) as f64) as usize;
        dp.first_bucket_bytes = dp.first_bucket_bytes.min(dp.bucket_bytes).max(1);
    }
    dp.validate()?;
    Ok(dp)
}

/// What every rank needs to run.
struct Job {
    cfg: TrainConfig,
    dp: DpConfig,
    /// The text corpus, or (`--data`) the shards.
    source: Source,
    out_dir: PathBuf,
    resume: Option<PathBuf>,
    stop_at: u64,
    trace: Option<PathBuf>,
    quiet: bool,
}

/// Where the batches come from.
enum Source {
    Corpus(Corpus),
    Shards(brrr_data::prepare::DataDir),
}

/// What rank 0 reports at the end.
struct RankResult {
    steps_done: u64,
    final_loss: Option<f32>,
    final_val: Option<f32>,
    tokens_per_s: f64,
    report: StepReport,
    mean_hidden: f64,
}

/// Runs `brrr train` with `--dp`/`--zero`.
pub fn run(args: &TrainArgs) -> Result<Summary> {
    if args.backend != BackendKind::Cpu {
        return Err(Error::invalid(
            "train",
            "--dp runs on the CPU backend (one instance per rank) for now",
        ));
    }
    let env = LaunchEnv::from_env()?;
    let launched = env.launcher != Launcher::Single && env.world_size > 1;
    let world = match (launched, args.dp) {
        (true, Some(n)) if n != env.world_size => {
            return Err(Error::invalid(
                "train",
                format!(
                    "--dp {n} but the launcher started {} processes",
                    env.world_size
                ),
            ));
        }
        (true, _) => env.world_size,
        (false, n) => n.unwrap_or(1),
    };
    let job = job(args, dp_config(args, world)?)?;
    let result = if launched {
        let comm = brrr_collectives::from_env()?;
        if comm.rank() == 0 {
            prepare_out_dir(&job, args.force)?;
        }
        comm.barrier()?;
        rank_main(&comm, &job)?
    } else {
        prepare_out_dir(&job, args.force)?;
        let all = run_in_process(world, |comm| Ok(rank_main(comm, &job)?));
        // Rank 0's result, or the first rank's error (the others then fail as well).
        let mut results = Vec::with_capacity(all.len());
        for r in all {
            results.push(r?);
        }
        results.swap_remove(0)
    };
    Ok(summary(&job, result))
}

fn job(args: &TrainArgs, dp: DpConfig) -> Result<Job> {
    let cfg = match &args.resume {
        Some(dir) => {
            let mut c = read_config(dir)?;
            if let Some(s) = args.steps {
                c.steps = s;
            }
            // As on one device: given on --resume, --attention changes from there.
            crate::train::resume_attention_saying(args, &mut c);
            c
        }
        None => config_from_args(args)?,
    };
    dp.validate_for(&cfg)?;
    let source = if !cfg.data.is_empty() {
        Source::Shards(brrr_data::prepare::open_data_dir(Path::new(&cfg.data))?)
    } else if cfg.corpus == SYNTHETIC {
        Source::Corpus(synthetic_corpus(cfg.seed)?)
    } else {
        Source::Corpus(Corpus::load(&cfg.corpus)?)
    };
    let out_dir = args
        .out
        .clone()
        .or_else(|| args.resume.clone())
        .unwrap_or_else(|| PathBuf::from("runs/train"));
    Ok(Job {
        stop_at: args.stop_after.unwrap_or(cfg.steps).min(cfg.steps),
        cfg,
        dp,
        source,
        out_dir,
        resume: args.resume.clone(),
        trace: args.trace.clone(),
        quiet: args.quiet,
    })
}

/// Rank 0's side: the directory, `config.toml` and a fresh `metrics.csv`.
fn prepare_out_dir(job: &Job, force: bool) -> Result<()> {
    let out = &job.out_dir;
    if job.resume.is_none() && !force && out.join(CONFIG_FILE).exists() {
        return Err(Error::file(
            out,
            "already holds a run: pass --resume to continue it, --force to replace it, or \
             another --out",
        ));
    }
    std::fs::create_dir_all(out.join(SHARD_DIR))
        .map_err(|e| Error::io(format!("{}: creating the run directory", out.display()), e))?;
    let text = toml::to_string_pretty(&job.cfg)
        .map_err(|e| Error::invalid("train", format!("serialising config: {e}")))?;
    crate::atomic::write_atomic(out.join(CONFIG_FILE), text.as_bytes())?;
    if job.resume.is_none() {
        MetricsWriter::create(out.join(METRICS_FILE))?;
    }
    Ok(())
}

/// One rank: build, maybe resume, step, evaluate, checkpoint.
fn rank_main(comm: &Communicator, job: &Job) -> Result<RankResult> {
    let lead = comm.rank() == 0;
    let (mut e, val, tracer) = build_rank(comm, job, lead)?;
    let start = e.steps_done();
    let mut metrics = match lead {
        true => Some(MetricsWriter::resume(
            job.out_dir.join(METRICS_FILE),
            start,
        )?),
        false => None,
    };
    if lead && !job.quiet {
        print_banner(&e, job, comm);
    }
    let mut out = RankResult {
        steps_done: start,
        final_loss: None,
        final_val: None,
        tokens_per_s: 0.0,
        report: StepReport::default(),
        mean_hidden: 0.0,
    };
    let mut timing = Timing::default();
    while e.steps_done() < job.stop_at {
        let s = e.step()?;
        let val_loss = match job.cfg.evaluates_at(s.step) {
            true => Some(evaluate(&mut e, &val)?),
            false => None,
        };
        // The first step of a run (or of a resumption) warms up: not timed.
        if s.step > start + 1 {
            timing.add(&s, e.report().hidden_fraction);
        }
        if let Some(m) = &mut metrics {
            log_step(m, &s, val_loss, job.quiet)?;
        }
        if val_loss.is_some() || s.step == job.stop_at {
            e.save_shard(&job.out_dir.join(SHARD_DIR))?;
            if let Some(m) = &metrics {
                metrics::plot_csv_svg(m.path(), job.out_dir.join(PLOT_FILE))?;
            }
        }
        out.final_loss = Some(s.loss);
        out.final_val = val_loss.or(out.final_val);
    }
    if let (Some(path), true) = (&job.trace, lead) {
        tracer
            .write_chrome_trace(path)
            .map_err(|err| Error::file(path, err.to_string()))?;
    }
    out.steps_done = e.steps_done();
    out.tokens_per_s = timing.tokens_per_s();
    out.report = e.report().clone();
    out.mean_hidden = timing.mean_hidden();
    Ok(out)
}

/// The rank's engine (resumed from the shards with `--resume`), the validation batches,
/// and the tracer (recording on rank 0 with `--trace`).
fn build_rank(
    comm: &Communicator,
    job: &Job,
    lead: bool,
) -> Result<(DataParallel<CpuBackend>, Vec<Batch>, Arc<Tracer>)> {
    let cfg = &job.cfg;
    let backend = CpuBackend::new();
    let (data, val): (Box<dyn BatchSource>, _) = match &job.source {
        // Every rank's batcher starts at the same seed and stream; each copies only its
        // own rows out of the corpus (`DataParallel` asks by `BatchSource::next_rows`).
        Source::Corpus(corpus) => (
            Box::new(Batcher::for_corpus(
                corpus,
                cfg.batch_size,
                cfg.seq_len,
                cfg.seed,
            )?),
            val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches)?,
        ),
        // One device's loader (rank 0 of 1) on every rank, so the global batches are
        // one device's; it reads whole batches and each rank keeps its rows (the
        // default `next_rows`), with their document mask under `--doc-mask`.
        Source::Shards(dir) => {
            let (loader, val) = crate::train::shard_source(cfg, dir)?;
            (loader, val)
        }
    };
    let mut e = DataParallel::new(&backend, cfg.clone(), job.dp.clone(), comm, data)?;
    let tracer = Arc::new(match (&job.trace, lead) {
        (Some(_), true) => Tracer::new(),
        _ => Tracer::disabled(),
    });
    e.set_tracer(tracer.clone());
    if let Some(dir) = &job.resume {
        e.load_shard(&dir.join(SHARD_DIR))?;
    }
    Ok((e, val, tracer))
}

/// Rank 0's first line on stderr.
fn print_banner(e: &DataParallel<CpuBackend>, job: &Job, comm: &Communicator) {
    let cfg = &job.cfg;
    eprintln!(
        "brrr train: {} parameters, --dp {} --zero {} --amp {} ({} ranks {}), {} buckets, \
         {} steps of {} tokens",
        e.layout().total,
        job.dp.world,
        job.dp.zero,
        cfg.amp.mode.name(),
        job.dp.world,
        comm.transport(),
        e.buckets().len(),
        cfg.steps,
        cfg.tokens_per_step()
    );
}

/// Appends step `s` to `metrics.csv` (rank 0) and prints evaluated steps.
fn log_step(
    m: &mut MetricsWriter,
    s: &StepStats,
    val_loss: Option<f32>,
    quiet: bool,
) -> Result<()> {
    m.append(&Row {
        step: s.step,
        loss: s.loss,
        val_loss,
        lr: s.lr as f32,
        grad_norm: s.grad_norm as f32,
        tokens_per_s: s.tokens as f64 / s.seconds.unwrap_or(f64::NAN),
        loss_scale: s.loss_scale,
        skipped: s.skipped,
        peak_bytes: Some(s.peak_bytes),
        activation_bytes: Some(s.activation_peak_bytes),
    })?;
    if let (false, Some(v)) = (quiet, val_loss) {
        eprintln!(
            "step {:>6}  loss {:.4}  val {:.4}  |g| {:.3}  scale {}{}",
            s.step,
            s.loss,
            v,
            s.grad_norm,
            s.loss_scale,
            if s.skipped { "  (skipped)" } else { "" }
        );
    }
    Ok(())
}

/// Throughput and overlap summed over the timed steps.
#[derive(Default)]
struct Timing {
    tokens: usize,
    secs: f64,
    hidden: f64,
    steps: u32,
}

impl Timing {
    fn add(&mut self, s: &StepStats, hidden_fraction: f64) {
        self.tokens += s.tokens;
        self.secs += s.seconds.unwrap_or(f64::NAN);
        self.hidden += hidden_fraction;
        self.steps += 1;
    }

    fn tokens_per_s(&self) -> f64 {
        match self.secs > 0.0 {
            true => self.tokens as f64 / self.secs,
            false => 0.0,
        }
    }

    fn mean_hidden(&self) -> f64 {
        match self.steps {
            0 => 0.0,
            n => self.hidden / f64::from(n),
        }
    }
}

fn evaluate(e: &mut DataParallel<CpuBackend>, val: &[Batch]) -> Result<f32> {
    e.evaluate(val)
}

/// The summary `brrr train` prints, plus the data-parallel measurements on stderr.
fn summary(job: &Job, r: RankResult) -> Summary {
    if !job.quiet {
        let sent = r.report.comm.bytes_sent();
        eprintln!(
            "data parallel (rank 0, last step): {sent} bytes sent, model states {} bytes \
             on the device (peak {}), {:.0}% of the bucket collectives hidden behind the \
             backward (mean over timed steps)",
            r.report.model_state_bytes,
            r.report.peak_bytes,
            100.0 * r.mean_hidden
        );
        if job.dp.zero == 3 {
            eprintln!(
                "ZeRO-3 all-gathers (rank 0, last step): {:.0}% of their time hidden behind \
                 compute by prefetching the next block",
                100.0 * r.report.gather_hidden_fraction()
            );
        }
    }
    Summary {
        out_dir: job.out_dir.clone(),
        steps_done: r.steps_done,
        already_finished: false,
        final_loss: r.final_loss,
        final_val_loss: r.final_val,
        unigram_entropy: match &job.source {
            Source::Corpus(c) => unigram_entropy_nats(c.tokens()),
            Source::Shards(_) => f64::NAN,
        },
        tokens_per_s: r.tokens_per_s,
        mfu: None,
        peak: Err("not measured for data-parallel runs".into()),
        amp: job.cfg.amp.mode,
        checkpoint: format!("{SHARD_DIR}/dp-rank*-of{}.bin", job.dp.world),
    }
}

/// The shard directory of a run directory.
pub fn shard_dir(run: &Path) -> PathBuf {
    run.join(SHARD_DIR)
}
