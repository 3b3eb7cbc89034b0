//! Pipeline parallelism from the command line: `brrr train --pp N --schedule S
//! --micro-batches M`, `brrr pipeline plan` (a schedule, its simulated timeline and
//! SVG) and `brrr pipeline compare` (every schedule run for real on in-process stages:
//! measured idle fraction and activations in flight beside the simulator and theory).
//!
//! A pipeline step runs `M` micro-batches of `--batch-size` rows each, so it sees the
//! same batches, in the same order, as `brrr train --grad-accum M`: the two runs'
//! losses agree to f32 rounding. With `--dp D`, as with `--dp` alone, `--batch-size` is
//! the global micro-batch: each of the `D` pipelines takes its `--batch-size / D` rows
//! of every micro-batch. Stages are threads of this process (one CPU backend
//! each, `brrr_collectives::run_in_process`).
//!
//! With `--tp T [--sp]` each stage is `T` ranks wide (brrr-pp's tensor-parallel
//! stages over brrr-tp's slices): `P · T · D` ranks in Megatron's order, every rank
//! reading the same micro-batch rows as its pipeline. The losses match `--pp P` alone
//! to f32 rounding.

use crate::data::{Batcher, Corpus, SYNTHETIC, synthetic_corpus};
use crate::metrics::{self, MetricsWriter, Row};
use crate::train::{self, CONFIG_FILE, METRICS_FILE, PLOT_FILE, TrainArgs};
use brrr_backend::{DType, Error, Result};
use brrr_collectives::{ParallelGroups, ParallelLayout, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamWConfig, Gpt};
use brrr_pp::{
    Action, Costs, PipelineStage, PpConfig, Schedule, ScheduleKind, Timeline, gather_timeline,
    generate, simulate, stage_shard_path, step_loss, svg, theory,
};
use brrr_tp::TpConfig;
use brrr_train::TrainConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The file a pipeline run writes its measured timeline to (the last step).
pub const TIMELINE_FILE: &str = "pipeline.svg";
/// The planned (simulated) timeline beside it.
pub const PLAN_FILE: &str = "pipeline-plan.svg";

/// One step of a pipeline run, as rank 0 saw it.
#[derive(Clone, Debug)]
pub struct StepRow {
    pub step: u64,
    pub loss: f64,
    pub lr: f64,
    pub grad_norm: f64,
    pub seconds: f64,
    /// Validation loss after this step (every `eval_every` steps and the last),
    /// forwards only, computed by the last stage.
    pub val_loss: Option<f64>,
}

/// What a pipeline run measured.
#[derive(Clone, Debug)]
pub struct PpRun {
    pub rows: Vec<StepRow>,
    /// The last step's measured timeline (seconds).
    pub timeline: Timeline,
    /// Idle fraction per stage over the timed steps (all but the first, when more than
    /// one): `1 − busy / step makespan`, summed over steps.
    pub idle: Vec<f64>,
    /// All stages together: `1 − Σ busy / (p · Σ makespan)`.
    pub bubble: f64,
    /// Most micro-batch chunks whose activations each stage held.
    pub peak_in_flight: Vec<usize>,
    /// Peak bytes above each stage's start of step (its activations), `Backend::memory_stats`.
    pub activation_bytes: Vec<u64>,
    /// Peak bytes of each stage's device.
    pub peak_bytes: Vec<u64>,
    /// Steps already done when this run started (0 unless resumed).
    pub start_step: u64,
}

/// Where a pipeline run's stages restore from and save to: directories holding
/// `pp-stage{s}-of{n}.bin` (a run's `pp/` folder).
#[derive(Clone, Debug, Default)]
pub struct StageCheckpoints {
    /// Restore every stage from here and go on from the step it was saved at.
    pub resume: Option<PathBuf>,
    /// Save every stage here after the last step.
    pub save: Option<PathBuf>,
}

/// The folder of a run directory holding its stages' checkpoints.
pub const STAGE_DIR: &str = "pp";

/// What one rank returns.
#[derive(Default)]
struct RankOut {
    stage: usize,
    rows: Vec<StepRow>,
    timelines: Vec<Timeline>,
    peak_in_flight: usize,
    activation_bytes: u64,
    peak_bytes: u64,
    start_step: u64,
}

/// Trains `cfg.steps` steps of `pp` on `dp` pipelines of in-process stages over
/// `corpus`, each micro-batch `cfg.batch_size` rows (dp replica `d` takes rows
/// `d·B/D .. (d+1)·B/D` of each of the `M` micro-batches drawn per step). `log`: print a line every
/// `cfg.eval_every` steps.
pub fn train_in_process(
    cfg: &TrainConfig,
    corpus: &Corpus,
    pp: &PpConfig,
    dp: usize,
    log: bool,
    ckpt: &StageCheckpoints,
) -> Result<PpRun> {
    train_in_process_tp(cfg, corpus, pp, dp, &TpConfig::default(), log, ckpt)
}

/// [`train_in_process`] with every stage split over `tp.tp` tensor-parallel ranks
/// (`P · T · D` in-process ranks).
pub fn train_in_process_tp(
    cfg: &TrainConfig,
    corpus: &Corpus,
    pp: &PpConfig,
    dp: usize,
    tp: &TpConfig,
    log: bool,
    ckpt: &StageCheckpoints,
) -> Result<PpRun> {
    let kind = pp.kind().map_err(|e| Error::invalid("train --pp", e))?;
    pp.validate(cfg.model.n_layer, pp.micro_batches)
        .map_err(|e| Error::invalid("train --pp", e))?;
    if dp == 0 {
        return Err(Error::invalid("train --pp", "--dp must be at least 1"));
    }
    check_tensor_parallel(cfg, tp)?;
    let (p, m) = (pp.pp, pp.micro_batches);
    let schedule = generate(kind, p, m).map_err(|e| Error::invalid("train --pp", e.to_string()))?;
    let layout = ParallelLayout {
        dp,
        tp: tp.tp,
        pp: p,
    };
    let outs = run_in_process(p * tp.tp * dp, |world| {
        Ok(rank_main(
            world, layout, tp.sp, cfg, corpus, &schedule, log, ckpt,
        )?)
    });
    let mut ranks = Vec::new();
    for (r, o) in outs.into_iter().enumerate() {
        ranks.push(o.map_err(|e| Error::invalid("train --pp", format!("rank {r}: {e}")))?);
    }
    summarise(ranks, p)
}

/// [`train_in_process`] as one process of a launched world (`brrr launch`, `mpirun`,
/// `srun`, `torchrun`: `brrr_collectives::from_env`). Returns the run on world rank 0,
/// `None` elsewhere; per-stage activation bytes are only known for rank 0's stage there
/// (the others are reported as 0).
pub fn train_from_env(
    cfg: &TrainConfig,
    corpus: &Corpus,
    pp: &PpConfig,
    dp: usize,
    log: bool,
    ckpt: &StageCheckpoints,
) -> Result<Option<PpRun>> {
    train_from_env_tp(cfg, corpus, pp, dp, &TpConfig::default(), log, ckpt)
}

/// [`train_from_env`] with every stage split over `tp.tp` tensor-parallel ranks: the
/// launcher starts `P · T · D` processes.
pub fn train_from_env_tp(
    cfg: &TrainConfig,
    corpus: &Corpus,
    pp: &PpConfig,
    dp: usize,
    tp: &TpConfig,
    log: bool,
    ckpt: &StageCheckpoints,
) -> Result<Option<PpRun>> {
    let kind = pp.kind().map_err(|e| Error::invalid("train --pp", e))?;
    pp.validate(cfg.model.n_layer, pp.micro_batches)
        .map_err(|e| Error::invalid("train --pp", e))?;
    check_tensor_parallel(cfg, tp)?;
    let (p, m) = (pp.pp, pp.micro_batches);
    let schedule = generate(kind, p, m).map_err(|e| Error::invalid("train --pp", e.to_string()))?;
    let world = brrr_collectives::from_env()?;
    let want = p * tp.tp * dp.max(1);
    if world.world_size() != want {
        return Err(Error::invalid(
            "train --pp",
            format!(
                "{} processes for --pp {p} × --tp {} × dp {dp}: start exactly {want}",
                world.world_size(),
                tp.tp
            ),
        ));
    }
    let layout = ParallelLayout {
        dp: dp.max(1),
        tp: tp.tp,
        pp: p,
    };
    let out = rank_main(&world, layout, tp.sp, cfg, corpus, &schedule, log, ckpt)?;
    if world.rank() != 0 {
        return Ok(None);
    }
    let mut run = summarise(vec![out], p)?;
    // The other stages' peaks, from the gathered timeline.
    run.peak_in_flight = run.timeline.peak_in_flight.clone();
    Ok(Some(run))
}

/// Rows `d·B/D .. (d+1)·B/D` of a micro-batch of `batch` rows: replica `d` of `dp`.
fn replica_rows(batch: usize, dp: usize, d: usize) -> Result<std::ops::Range<usize>> {
    if dp == 0 || !batch.is_multiple_of(dp) {
        return Err(Error::invalid(
            "train --pp",
            format!(
                "--batch-size {batch} (the global micro-batch) must be a multiple of --dp {dp}"
            ),
        ));
    }
    let rows = batch / dp;
    Ok(d * rows..(d + 1) * rows)
}

/// What a tensor-parallel pipeline needs of the model and batch: heads, width and
/// vocabulary divisible by `--tp`, and with `--sp` the sequence too. `--sp` without a
/// tensor-parallel group is refused rather than ignored.
fn check_tensor_parallel(cfg: &TrainConfig, tp: &TpConfig) -> Result<()> {
    let bad = |msg: String| Err(Error::invalid("train --pp --tp", msg));
    if tp.tp == 0 {
        return bad("--tp must be at least 1".into());
    }
    if tp.sp && tp.tp < 2 {
        return bad("--sp needs --tp 2 or more".into());
    }
    brrr_tp::check_model(&cfg.model, tp.tp)?;
    if !cfg.model.n_embd.is_multiple_of(tp.tp) {
        return bad(format!(
            "--tp {}: the width n_embd = {} does not divide by {} ranks",
            tp.tp, cfg.model.n_embd, tp.tp
        ));
    }
    if tp.sp && !cfg.seq_len.is_multiple_of(tp.tp) {
        return bad(format!(
            "--sp: the sequence length {} does not divide by --tp {}",
            cfg.seq_len, tp.tp
        ));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn rank_main(
    world: &brrr_collectives::Communicator,
    layout: ParallelLayout,
    sp: bool,
    cfg: &TrainConfig,
    corpus: &Corpus,
    schedule: &Schedule,
    log: bool,
    ckpt: &StageCheckpoints,
) -> Result<RankOut> {
    let g = ParallelGroups::new(world, layout)?;
    let (d, _, stage_idx) = layout.coords(world.rank());
    let ParallelGroups { dp, tp, pp, .. } = g;
    // This pipeline's rows of each micro-batch: `--batch-size` is the global batch.
    let rows = replica_rows(cfg.batch_size, layout.dp, d)?;
    let backend = CpuBackend::new();
    let tp = (layout.tp > 1).then(|| (Arc::new(tp), sp));
    let mut stage = build_stage(&backend, cfg, stage_idx, schedule, tp)?;
    let mut batcher = Batcher::for_corpus(corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
    // The single-device run's validation batches, on every stage (stage 0 reads the
    // ids, the last the targets).
    let val = brrr_train::val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches)?
        .iter()
        .map(|b| brrr_train::upload(&backend, b))
        .collect::<Result<Vec<_>>>()?;
    let m = schedule.m;
    // Each pipeline's mean over its rows; the data-parallel average of the gradients
    // then makes it the mean over the global batch.
    let dloss = 1.0 / (rows.len() * cfg.seq_len * m) as f32;
    let lrs = cfg.schedule();
    // Resume: the stage's parameters and AdamW state, and the batch stream advanced
    // past the batches the saved steps drew (it is a deterministic function of the
    // seed), so the run goes on bit for bit.
    let start = match &ckpt.resume {
        Some(dir) => stage.load_checkpoint(dir)?.step,
        None => 0,
    };
    for _ in 0..start as usize * m {
        batcher.next_batch();
    }
    let mut out = RankOut {
        stage: stage_idx,
        start_step: start,
        ..RankOut::default()
    };
    for step in start..cfg.steps {
        let t0 = Instant::now();
        let lr = lrs.lr(step);
        let data = (0..m)
            .map(|_| brrr_train::upload(&backend, &batcher.next_batch().rows(rows.clone())?))
            .collect::<Result<Vec<_>>>()?;
        let run = stage.run(&pp, schedule, &data, dloss)?;
        stage.reduce_grads(&pp, Some(&dp))?;
        let loss = step_loss(&run, m, &pp, Some(&dp))?;
        let norm = stage.update(&pp, lr as f32, cfg.grad_clip)?;
        let timeline = gather_timeline(&pp, &run.spans)?;
        let evaluate = (step + 1) % cfg.eval_every.max(1) == 0 || step + 1 == cfg.steps;
        let val_loss = if evaluate && !val.is_empty() {
            Some(stage.eval_loss(&pp, &val)?)
        } else {
            None
        };
        out.peak_in_flight = out.peak_in_flight.max(run.peak_in_flight);
        out.activation_bytes = out
            .activation_bytes
            .max(run.peak_bytes.saturating_sub(run.start_bytes));
        out.peak_bytes = out.peak_bytes.max(run.peak_bytes);
        if world.rank() == 0 {
            let row = StepRow {
                step: step + 1,
                loss,
                lr,
                grad_norm: norm,
                seconds: t0.elapsed().as_secs_f64(),
                val_loss,
            };
            if log && (step + 1) % cfg.eval_every == 0 {
                log_row(&row);
            }
            out.rows.push(row);
            out.timelines.extend(timeline);
        }
    }
    // One copy per stage (per tensor rank of it): the first data-parallel replica
    // writes it.
    if let (Some(dir), 0) = (&ckpt.save, d) {
        stage.save_checkpoint(dir, cfg.steps.max(start), "")?;
    }
    Ok(out)
}

/// Stage `stage_idx` of the model every rank builds from the seed (the same
/// initialisation as the one-device Trainer), sliced per tensor rank when `tp` gives the
/// tensor-parallel group and whether sequence parallelism is on.
fn build_stage(
    backend: &CpuBackend,
    cfg: &TrainConfig,
    stage_idx: usize,
    schedule: &Schedule,
    tp: Option<(Arc<brrr_collectives::Communicator>, bool)>,
) -> Result<PipelineStage<CpuBackend>> {
    let mut model = Gpt::new(
        backend,
        cfg.model.clone(),
        DType::F32,
        &mut ChaCha8Rng::seed_from_u64(cfg.seed),
    )?;
    // The stages keep these blocks (sliced per tensor rank under --tp): the switch
    // carries over.
    model.set_fused_attention(cfg.fused_attention);
    let opt = AdamWConfig {
        weight_decay: cfg.weight_decay,
        ..AdamWConfig::default()
    };
    let (p, v) = (schedule.p, schedule.v);
    match tp {
        Some((tp, sp)) => PipelineStage::new_tensor_parallel(model, stage_idx, p, v, opt, tp, sp),
        None => PipelineStage::new(model, stage_idx, p, v, opt),
    }
}

/// One step's line on stderr (`--pp` runs log from rank 0 at each evaluation).
fn log_row(row: &StepRow) {
    let val = row
        .val_loss
        .map_or(String::new(), |v| format!("  val {v:.4}"));
    eprintln!(
        "step {:>6}  loss {:.4}{val}  lr {:.2e}  |g| {:.3}  {:.3} s/step",
        row.step, row.loss, row.lr, row.grad_norm, row.seconds
    );
}

fn summarise(ranks: Vec<RankOut>, p: usize) -> Result<PpRun> {
    let mut peak_in_flight = vec![0; p];
    let mut activation_bytes = vec![0; p];
    let mut peak_bytes = vec![0; p];
    // With dp > 1 each stage index appears dp times: report the largest.
    for r in &ranks {
        peak_in_flight[r.stage] = peak_in_flight[r.stage].max(r.peak_in_flight);
        activation_bytes[r.stage] = activation_bytes[r.stage].max(r.activation_bytes);
        peak_bytes[r.stage] = peak_bytes[r.stage].max(r.peak_bytes);
    }
    let rank0 = ranks
        .into_iter()
        .next()
        .ok_or_else(|| Error::invalid("train --pp", "no ranks ran"))?;
    let timed = if rank0.timelines.len() > 1 {
        &rank0.timelines[1..]
    } else {
        &rank0.timelines[..]
    };
    let makespan: f64 = timed.iter().map(|t| t.makespan).sum();
    let busy: Vec<f64> = (0..p)
        .map(|s| timed.iter().map(|t| t.busy[s]).sum())
        .collect();
    let idle = busy.iter().map(|b| 1.0 - b / makespan).collect();
    let bubble = 1.0 - busy.iter().sum::<f64>() / (p as f64 * makespan);
    let timeline = rank0
        .timelines
        .last()
        .cloned()
        .ok_or_else(|| Error::invalid("train --pp", "no step ran"))?;
    Ok(PpRun {
        rows: rank0.rows,
        timeline,
        idle,
        bubble,
        peak_in_flight,
        activation_bytes,
        peak_bytes,
        start_step: rank0.start_step,
    })
}

/// The pipeline flags of `brrr train`, checked.
fn pp_config(args: &TrainArgs) -> Result<PpConfig> {
    Ok(PpConfig {
        pp: args.pp.unwrap_or(1),
        schedule: args.schedule.clone().unwrap_or_else(|| "1f1b".into()),
        micro_batches: args.micro_batches.unwrap_or(1),
    })
}

/// Refuses what a pipeline run does not support yet, with the reason.
fn check_supported(args: &TrainArgs) -> Result<()> {
    let no = |what: &str| {
        Err(Error::invalid(
            "train --pp",
            format!("{what} is not supported with --pp yet"),
        ))
    };
    if args.backend != train::BackendKind::Cpu {
        return no("a backend other than cpu");
    }
    if args.grad_accum.is_some() {
        return no("--grad-accum (use --micro-batches)");
    }
    if args.checkpoint.is_some() {
        return no("--checkpoint (activation recomputation)");
    }
    if args.amp.is_some_and(|a| a != train::AmpArg::Off) {
        return no("--amp");
    }
    if args.data.is_some() {
        return no("--data (token shards)");
    }
    if args.zero.is_some_and(|z| z > 0) || args.bucket_mb.is_some() {
        return no("--zero/--bucket-mb (pipeline stages average gradients over --dp plainly)");
    }
    Ok(())
}

/// `brrr train --pp N ...`: trains on in-process stages, writes `config.toml`,
/// `metrics.csv`, `loss.svg`, `pipeline.svg` (the last step measured) and
/// `pipeline-plan.svg` (simulated) into the run directory; returns the summary.
pub fn run(args: &TrainArgs, dp: usize) -> Result<String> {
    check_supported(args)?;
    let pp = pp_config(args)?;
    let tp = TpConfig {
        tp: args.tp.unwrap_or(1),
        sp: args.sp,
    };
    if let Some(dir) = &args.resume {
        check_same_pipeline(dir, &pp, tp.tp)?;
    }
    let mut cfg = match &args.resume {
        // The saved run's config; only --steps (the new total), --eval-every and
        // --attention change.
        Some(dir) => {
            let mut c = train::read_config(dir)?;
            c.steps = args.steps.unwrap_or(c.steps);
            c.eval_every = args.eval_every.unwrap_or(c.eval_every);
            // As on one device: given on --resume, --attention changes from there.
            train::resume_attention_saying(args, &mut c);
            c
        }
        None => train::config_from_args(args)?,
    };
    cfg.grad_accum = pp.micro_batches;
    cfg.validate()?;
    replica_rows(cfg.batch_size, dp, 0)?;
    check_tensor_parallel(&cfg, &tp)?;
    let out = args
        .out
        .clone()
        .or_else(|| args.resume.clone())
        .unwrap_or_else(|| PathBuf::from("runs/train"));
    let ckpt = StageCheckpoints {
        resume: args.resume.as_ref().map(|d| d.join(STAGE_DIR)),
        save: Some(out.join(STAGE_DIR)),
    };
    if out.join(METRICS_FILE).exists() && !args.force && args.resume.is_none() {
        return Err(Error::invalid(
            "train --pp",
            format!(
                "{} already holds a run; pass --force to replace it",
                out.display()
            ),
        ));
    }
    let corpus = if cfg.corpus == SYNTHETIC {
        synthetic_corpus(cfg.seed)?
    } else {
        Corpus::load(&cfg.corpus)?
    };
    // Launched (brrr launch, mpirun, srun, torchrun): one stage per process.
    let launch = brrr_collectives::env::LaunchEnv::from_env()?;
    if launch.rank == 0 {
        std::fs::create_dir_all(&out)
            .map_err(|e| Error::io(format!("{}: creating output directory", out.display()), e))?;
    }
    let run = if launch.world_size > 1 {
        match train_from_env_tp(&cfg, &corpus, &pp, dp, &tp, !args.quiet, &ckpt)? {
            Some(run) => run,
            None => return Ok(String::new()),
        }
    } else {
        train_in_process_tp(&cfg, &corpus, &pp, dp, &tp, !args.quiet, &ckpt)?
    };
    write_run_dir(&out, &cfg, &pp, &run)?;
    Ok(report(&out, &cfg, &pp, dp, &tp, &run))
}

/// A resumed pipeline run must keep the stages and micro-batches of the run it goes on
/// from (its stage files and its batch stream depend on them), and its `--tp` (the
/// stage files hold that many shards each, named by tensor rank); the schedule and
/// `--sp` may change.
fn check_same_pipeline(dir: &Path, pp: &PpConfig, tp: usize) -> Result<()> {
    let path = dir.join("pipeline.toml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(format!("{}: reading", path.display()), e))?;
    let saved: PpConfig = toml::from_str(&text)
        .map_err(|e| Error::invalid("train --resume", format!("{}: {e}", path.display())))?;
    if (saved.pp, saved.micro_batches) != (pp.pp, pp.micro_batches) {
        return Err(Error::invalid(
            "train --resume",
            format!(
                "{} ran --pp {} --micro-batches {}; pass the same (got --pp {} --micro-batches {})",
                dir.display(),
                saved.pp,
                saved.micro_batches,
                pp.pp,
                pp.micro_batches
            ),
        ));
    }
    let first = stage_shard_path(&dir.join(STAGE_DIR), 0, pp.pp, 0, tp);
    if !first.exists() {
        return Err(Error::invalid(
            "train --resume",
            format!(
                "{} has no {}: it was not saved with --pp {} --tp {tp} (a run resumes with \
                 the --tp it was saved with)",
                dir.display(),
                first.display(),
                pp.pp
            ),
        ));
    }
    Ok(())
}

fn write_run_dir(out: &Path, cfg: &TrainConfig, pp: &PpConfig, run: &PpRun) -> Result<()> {
    let text = toml::to_string_pretty(cfg)
        .map_err(|e| Error::invalid("train", format!("serialising config: {e}")))?;
    crate::atomic::write_atomic(out.join(CONFIG_FILE), text.as_bytes())?;
    let text = toml::to_string_pretty(pp)
        .map_err(|e| Error::invalid("train", format!("serialising the pipeline config: {e}")))?;
    crate::atomic::write_atomic(out.join("pipeline.toml"), text.as_bytes())?;
    let mut w = match run.start_step {
        0 => MetricsWriter::create(out.join(METRICS_FILE))?,
        s => MetricsWriter::resume(out.join(METRICS_FILE), s)?,
    };
    let tokens = cfg.tokens_per_step() as f64;
    for r in &run.rows {
        w.append(&Row {
            step: r.step,
            loss: r.loss as f32,
            val_loss: r.val_loss.map(|v| v as f32),
            lr: r.lr as f32,
            grad_norm: r.grad_norm as f32,
            tokens_per_s: tokens / r.seconds,
            loss_scale: 1.0,
            skipped: false,
            peak_bytes: run.peak_bytes.iter().copied().max(),
            activation_bytes: run.activation_bytes.iter().copied().max(),
        })?;
    }
    metrics::plot_csv_svg(w.path(), out.join(PLOT_FILE))?;
    let kind = pp.kind().map_err(|e| Error::invalid("train --pp", e))?;
    let title = format!(
        "{kind}, p = {}, m = {}: last step measured (ms)",
        pp.pp, pp.micro_batches
    );
    let mut ms = run.timeline.clone();
    for s in &mut ms.spans {
        s.start *= 1e3;
        s.end *= 1e3;
    }
    ms.makespan *= 1e3;
    write_file(
        &out.join(TIMELINE_FILE),
        &svg::timeline_svg(&ms, &title, "ms"),
    )?;
    let plan = planned(kind, pp.pp, pp.micro_batches, Costs::unit())?;
    let title = format!(
        "{kind}, p = {}, m = {}: planned, F = B = W = 1",
        pp.pp, pp.micro_batches
    );
    write_file(
        &out.join(PLAN_FILE),
        &svg::timeline_svg(&plan, &title, "unit costs"),
    )
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    crate::atomic::write_atomic(path, text.as_bytes())
}

/// The simulated timeline of `kind` (costs per stage; split over the chunks).
fn planned(kind: ScheduleKind, p: usize, m: usize, costs: Costs) -> Result<Timeline> {
    let s = generate(kind, p, m).map_err(|e| Error::invalid("pipeline", e.to_string()))?;
    simulate(&s, costs.per_chunk(kind.chunks())).map_err(|d| {
        Error::invalid(
            "pipeline",
            format!("the generated schedule deadlocks at {:?}", d.stuck),
        )
    })
}

fn report(
    out: &Path,
    cfg: &TrainConfig,
    pp: &PpConfig,
    dp: usize,
    tp: &TpConfig,
    run: &PpRun,
) -> String {
    let mut s = String::new();
    let kind = pp.kind().unwrap_or(ScheduleKind::Custom);
    let plan = planned(kind, pp.pp, pp.micro_batches, Costs::unit()).ok();
    let _ = writeln!(
        s,
        "pipeline: {} stages × {} chunks, {kind}, {} micro-batches of {} × {} tokens, dp = {dp}, tp = {}{}",
        pp.pp,
        kind.chunks(),
        pp.micro_batches,
        cfg.batch_size,
        cfg.seq_len,
        tp.tp,
        if tp.sp { " (sequence parallel)" } else { "" }
    );
    if let Some(last) = run.rows.last() {
        let _ = writeln!(s, "final loss {:.4} after {} steps", last.loss, last.step);
    }
    let _ = writeln!(
        s,
        "{:>6} {:>12} {:>10} {:>16}",
        "stage", "idle (meas)", "in flight", "activations MB"
    );
    for r in 0..pp.pp {
        let _ = writeln!(
            s,
            "{r:>6} {:>11.1}% {:>10} {:>16.2}",
            100.0 * run.idle[r],
            run.peak_in_flight[r],
            run.activation_bytes[r] as f64 / 1e6
        );
    }
    let sim = plan.as_ref().map_or(f64::NAN, Timeline::bubble_fraction);
    let th =
        theory::bubble_fraction(kind, pp.pp, pp.micro_batches, Costs::unit()).unwrap_or(f64::NAN);
    let _ = writeln!(
        s,
        "bubble: measured {:.1}%, simulated {:.1}% (F = B = W), theory {:.1}%",
        100.0 * run.bubble,
        100.0 * sim,
        100.0 * th
    );
    let _ = writeln!(
        s,
        "wrote {}/{{{CONFIG_FILE}, {METRICS_FILE}, {PLOT_FILE}, {TIMELINE_FILE}, {PLAN_FILE}, pipeline.toml, {STAGE_DIR}/pp-stage*-of{}{}.bin}} (go on with --resume {} and the same --pp/--micro-batches{})",
        out.display(),
        pp.pp,
        if tp.tp > 1 {
            format!("-tp*-of{}", tp.tp)
        } else {
            String::new()
        },
        out.display(),
        if tp.tp > 1 { "/--tp" } else { "" }
    );
    s
}

/// `brrr pipeline plan`.
#[derive(clap::Args, Debug, Clone)]
pub struct PlanArgs {
    /// Pipeline stages.
    #[arg(long, default_value_t = 4)]
    pub pp: usize,
    /// Micro-batches per step.
    #[arg(long, default_value_t = 8)]
    pub micro_batches: usize,
    /// gpipe, 1f1b, interleaved:V, zb-h1 or zb-h2.
    #[arg(long, default_value = "1f1b")]
    pub schedule: String,
    /// Time of a stage's forward of one micro-batch.
    #[arg(long, default_value_t = 1.0)]
    pub f: f64,
    /// Time of a stage's backward for the input gradient.
    #[arg(long, default_value_t = 1.0)]
    pub b: f64,
    /// Time of a stage's backward for the weight gradient.
    #[arg(long, default_value_t = 1.0)]
    pub w: f64,
    /// Latency of one message between stages.
    #[arg(long, default_value_t = 0.0)]
    pub comm: f64,
    /// Write the timeline as SVG here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

/// The schedule's per-stage order, its simulated bubble beside theory, and the
/// micro-batches in flight per stage.
pub fn run_plan(a: &PlanArgs) -> Result<String> {
    let kind = ScheduleKind::parse(&a.schedule).map_err(|e| Error::invalid("pipeline plan", e))?;
    let costs = Costs {
        f: a.f,
        b: a.b,
        w: a.w,
        comm: a.comm,
    };
    let positive = |x: f64| x > 0.0 && x.is_finite();
    if ![a.f, a.b, a.w].into_iter().all(positive) || !(a.comm == 0.0 || positive(a.comm)) {
        return Err(Error::invalid(
            "pipeline plan",
            "--f, --b, --w must be positive and --comm at least 0",
        ));
    }
    let s = generate(kind, a.pp, a.micro_batches)
        .map_err(|e| Error::invalid("pipeline plan", e.to_string()))?;
    brrr_pp::validate(&s).map_err(|e| Error::invalid("pipeline plan", e.to_string()))?;
    let t = planned(kind, a.pp, a.micro_batches, costs)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{kind}: p = {}, m = {}, v = {}",
        a.pp, a.micro_batches, s.v
    );
    for r in 0..a.pp {
        let line = s.compute_line(r);
        let line = if line.len() > 160 {
            format!("{} …", &line[..line[..160].rfind(' ').unwrap_or(160)])
        } else {
            line
        };
        let _ = writeln!(
            out,
            "stage {r}: {line}\n         idle {:.1}%, peak in flight {}, pending W {}",
            100.0 * t.idle_fraction(r),
            t.peak_in_flight[r],
            t.peak_pending_w[r]
        );
    }
    let th = theory::bubble_fraction(kind, a.pp, a.micro_batches, costs);
    let _ = writeln!(
        out,
        "bubble: simulated {:.2}% of stage time ({:.2}% over the ideal), steady state {:.2}%; theory {}",
        100.0 * t.bubble_fraction(),
        100.0 * t.bubble_over_ideal(),
        100.0 * t.steady_bubble_fraction(),
        th.map_or("-".into(), |x| format!("{:.2}%", 100.0 * x))
    );
    if let Some(path) = &a.svg {
        let title = format!("{kind}, p = {}, m = {}", a.pp, a.micro_batches);
        write_file(path, &svg::timeline_svg(&t, &title, "cost units"))?;
        let _ = writeln!(out, "wrote {}", path.display());
    }
    Ok(out)
}

/// `brrr pipeline compare`.
#[derive(clap::Args, Debug, Clone)]
pub struct CompareArgs {
    /// Pipeline stages.
    #[arg(long, default_value_t = 4)]
    pub pp: usize,
    /// Micro-batches per step.
    #[arg(long, default_value_t = 8)]
    pub micro_batches: usize,
    /// Chunks per stage of the interleaved schedule.
    #[arg(long, default_value_t = 2)]
    pub chunks: usize,
    /// Steps per schedule (the first is not timed).
    #[arg(long, default_value_t = 3)]
    pub steps: u64,
    /// Blocks of the model (at least pp × chunks).
    #[arg(long, default_value_t = 8)]
    pub n_layer: usize,
    /// Width.
    #[arg(long, default_value_t = 128)]
    pub n_embd: usize,
    /// Heads.
    #[arg(long, default_value_t = 4)]
    pub n_head: usize,
    /// Tokens per row (also the model's context).
    #[arg(long, default_value_t = 64)]
    pub seq_len: usize,
    /// Rows per micro-batch.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Write each schedule's measured timeline as DIR/pipeline-SCHEDULE.svg.
    #[arg(long)]
    pub svg_dir: Option<PathBuf>,
}

/// One schedule's row of `brrr pipeline compare`.
#[derive(Clone, Debug)]
pub struct CompareRow {
    pub kind: ScheduleKind,
    pub measured_bubble: f64,
    pub simulated_bubble: f64,
    /// The simulator on the executor's own mean F, B, W (and fused BW) durations of the
    /// timed steps, per chunk: the prediction for this machine, beside the measurement.
    pub simulated_measured: f64,
    /// Those mean durations in ms: `(F, B, W)`, B being the fused BW where the schedule
    /// has no W.
    pub measured_costs_ms: (f64, f64, f64),
    pub theory_bubble: Option<f64>,
    pub peak_in_flight: Vec<usize>,
    pub planned_in_flight: Vec<usize>,
    pub activation_bytes: Vec<u64>,
    pub seconds_per_step: f64,
}

/// Mean F, B and W durations (seconds, per chunk) of the compute spans of `t`; a fused
/// BW counts as B (with W = 0) when there is no W.
fn mean_costs(t: &Timeline) -> Costs {
    let mean = |pick: &dyn Fn(&Action) -> bool| {
        let d: Vec<f64> = t
            .spans
            .iter()
            .filter(|s| pick(&s.action))
            .map(|s| s.end - s.start)
            .collect();
        if d.is_empty() {
            0.0
        } else {
            d.iter().sum::<f64>() / d.len() as f64
        }
    };
    let w = mean(&|a| matches!(a, Action::W { .. }));
    let b = mean(&|a| matches!(a, Action::B { .. } | Action::BW { .. }));
    Costs {
        f: mean(&|a| matches!(a, Action::F { .. })),
        b,
        w,
        comm: 0.0,
    }
}

/// Runs every schedule for `a.steps` steps on the shipped corpus.
pub fn run_compare(a: &CompareArgs) -> Result<Vec<CompareRow>> {
    let cfg = TrainConfig {
        model: brrr_nn::GptConfig {
            vocab_size: 256,
            block_size: a.seq_len,
            n_layer: a.n_layer,
            n_head: a.n_head,
            n_embd: a.n_embd,
        },
        steps: a.steps,
        batch_size: a.batch_size,
        seq_len: a.seq_len,
        grad_accum: a.micro_batches,
        warmup_steps: 1,
        eval_every: a.steps.max(1),
        ..TrainConfig::default()
    };
    cfg.validate()?;
    let corpus = Corpus::load(crate::data::DEFAULT_CORPUS)?;
    let mut rows = Vec::new();
    for kind in ScheduleKind::all(a.chunks) {
        let pp = PpConfig {
            pp: a.pp,
            schedule: kind.to_string(),
            micro_batches: a.micro_batches,
        };
        let run = train_in_process(&cfg, &corpus, &pp, 1, false, &StageCheckpoints::default())?;
        let plan = planned(kind, a.pp, a.micro_batches, Costs::unit())?;
        if let Some(dir) = &a.svg_dir {
            let title = format!(
                "{kind}, p = {}, m = {}: measured (s)",
                a.pp, a.micro_batches
            );
            let name = format!("pipeline-{}.svg", kind.to_string().replace(':', "-"));
            write_file(
                &dir.join(name),
                &svg::timeline_svg(&run.timeline, &title, "s"),
            )?;
        }
        let timed = &run.rows[usize::from(run.rows.len() > 1)..];
        let costs = mean_costs(&run.timeline);
        let s = generate(kind, a.pp, a.micro_batches)
            .map_err(|e| Error::invalid("pipeline", e.to_string()))?;
        let on_measured = simulate(&s, costs).map_err(|d| {
            Error::invalid(
                "pipeline",
                format!("the generated schedule deadlocks at {:?}", d.stuck),
            )
        })?;
        rows.push(CompareRow {
            kind,
            measured_bubble: run.bubble,
            simulated_bubble: if kind == ScheduleKind::ZbH2 {
                plan.steady_bubble_fraction()
            } else {
                plan.bubble_fraction()
            },
            simulated_measured: on_measured.bubble_fraction(),
            measured_costs_ms: (1e3 * costs.f, 1e3 * costs.b, 1e3 * costs.w),
            theory_bubble: theory::bubble_fraction(kind, a.pp, a.micro_batches, Costs::unit()),
            peak_in_flight: run.peak_in_flight,
            planned_in_flight: plan.peak_in_flight,
            activation_bytes: run.activation_bytes,
            seconds_per_step: timed.iter().map(|r| r.seconds).sum::<f64>() / timed.len() as f64,
        });
    }
    Ok(rows)
}

/// The rows as a Markdown table.
pub fn compare_table(rows: &[CompareRow]) -> String {
    let mut s = String::from(
        "| schedule | idle measured | simulated, measured F/B/W | F / B / W ms | simulated, F = B = W | theory | in flight per stage (measured) | planned | activations per stage (MB) | s/step |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let mb: Vec<String> = r
            .activation_bytes
            .iter()
            .map(|b| format!("{:.1}", *b as f64 / 1e6))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {:.1}% | {:.1}% | {:.1} / {:.1} / {:.1} | {:.1}% | {} | {:?} | {:?} | {} | {:.3} |",
            r.kind,
            100.0 * r.measured_bubble,
            100.0 * r.simulated_measured,
            r.measured_costs_ms.0,
            r.measured_costs_ms.1,
            r.measured_costs_ms.2,
            100.0 * r.simulated_bubble,
            r.theory_bubble
                .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x)),
            r.peak_in_flight,
            r.planned_in_flight,
            mb.join(" / "),
            r.seconds_per_step
        );
    }
    s
}

/// `brrr estimate pipeline`: for each schedule, the bubble (theory and simulated with
/// F = B = W), the pipeline's time for one step when one micro-batch's F + B + W through
/// one stage takes `stage_time`, and the micro-batches in flight per stage; with
/// `per_layer = (bytes of one micro-batch's activations per layer, layers)` also the
/// activation bytes each stage holds at its peak.
pub fn estimate_table(
    p: usize,
    m: usize,
    v: usize,
    stage_time: f64,
    per_layer: Option<(f64, usize)>,
) -> Result<String> {
    if !(stage_time > 0.0 && stage_time.is_finite()) {
        return Err(Error::invalid(
            "estimate pipeline",
            "--stage-time must be positive",
        ));
    }
    let costs = Costs {
        f: stage_time / 3.0,
        b: stage_time / 3.0,
        w: stage_time / 3.0,
        comm: 0.0,
    };
    let mut s = format!(
        "p = {p} stages, m = {m} micro-batches, interleaved with v = {v}; ideal time {:.4} (m × stage time)\n",
        m as f64 * stage_time
    );
    s.push_str("| schedule | bubble (theory) | bubble (simulated) | pipeline time | in flight per stage | activations per stage |\n|---|---|---|---|---|---|\n");
    for kind in ScheduleKind::all(v) {
        let t = match planned(kind, p, m, costs) {
            Ok(t) => t,
            Err(e) => {
                let _ = writeln!(s, "| {kind} | - | - | - | {e} | - |");
                continue;
            }
        };
        // ZB-H2's bubble is zero in the steady state of back-to-back steps only.
        let (sim, time) = if kind == ScheduleKind::ZbH2 {
            (t.steady_bubble_fraction(), t.period())
        } else {
            (t.bubble_fraction(), t.makespan)
        };
        let bytes = match per_layer {
            Some((bytes, layers)) => t
                .peak_in_flight
                .iter()
                .map(|&n| {
                    format!(
                        "{:.2} GiB",
                        n as f64 * bytes * layers as f64
                            / (p * kind.chunks()) as f64
                            / (1u64 << 30) as f64
                    )
                })
                .collect::<Vec<_>>()
                .join(" / "),
            None => "- (give --model)".into(),
        };
        let _ = writeln!(
            s,
            "| {kind} | {} | {:.1}% | {time:.4} | {:?} | {bytes} |",
            theory::bubble_fraction(kind, p, m, costs)
                .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x)),
            100.0 * sim,
            t.peak_in_flight
        );
    }
    s.push_str("in flight counts chunk stashes (interleaved: each holds 1/v of a stage's layers); zb-h2's bubble and time are per step when steps run back to back\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(m: usize) -> TrainConfig {
        TrainConfig {
            model: brrr_nn::GptConfig {
                vocab_size: 256,
                block_size: 16,
                n_layer: 4,
                n_head: 2,
                n_embd: 32,
            },
            steps: 3,
            batch_size: 2,
            seq_len: 16,
            grad_accum: m,
            warmup_steps: 1,
            ..TrainConfig::default()
        }
    }

    /// A pipeline step sees the batches of `--grad-accum M` in the same order: the
    /// losses of every schedule match the one-device Trainer's within 2e-5.
    #[test]
    fn pipeline_losses_match_the_trainer_with_grad_accum() {
        let m = 4;
        let cfg = tiny(m);
        let corpus = Corpus::load(crate::data::DEFAULT_CORPUS).unwrap();
        let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
        let val =
            brrr_train::val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches)
                .unwrap();
        let mut trainer =
            brrr_train::Trainer::new(&CpuBackend::new(), cfg.clone(), Box::new(data), val).unwrap();
        let want: Vec<f32> = (0..cfg.steps)
            .map(|_| trainer.step_blocking().unwrap().loss)
            .collect();
        let want_val = trainer.evaluate_blocking().unwrap();
        for kind in ScheduleKind::all(2) {
            let pp = PpConfig {
                pp: 2,
                schedule: kind.to_string(),
                micro_batches: m,
            };
            let run = train_in_process(&cfg, &corpus, &pp, 1, false, &StageCheckpoints::default())
                .unwrap();
            for (r, w) in run.rows.iter().zip(&want) {
                assert!(
                    (r.loss - f64::from(*w)).abs() < 2e-5,
                    "{kind} step {}: {} vs {w}",
                    r.step,
                    r.loss
                );
            }
            // The validation loss after the last step, forwards only on the stages.
            let val = run.rows.last().and_then(|r| r.val_loss).unwrap();
            assert!(
                (val - f64::from(want_val)).abs() < 2e-5,
                "{kind}: val loss {val} vs {want_val}"
            );
            assert_eq!(run.peak_in_flight.len(), 2);
            assert!(
                run.bubble > 0.0 && run.bubble < 1.0,
                "{kind}: {}",
                run.bubble
            );
        }
    }

    /// With `--dp 2`, `--batch-size` is the global micro-batch: two pipelines, each on
    /// half the rows of every micro-batch, train on the one pipeline's batches and give
    /// its losses within 2e-5 (the gradients are summed in another order). A batch that
    /// does not split over the replicas is refused.
    #[test]
    fn batch_size_is_global_with_dp() {
        let m = 2;
        let mut cfg = tiny(m);
        cfg.batch_size = 4;
        let corpus = Corpus::load(crate::data::DEFAULT_CORPUS).unwrap();
        let pp = PpConfig {
            pp: 2,
            schedule: "1f1b".into(),
            micro_batches: m,
        };
        let none = StageCheckpoints::default();
        let one = train_in_process(&cfg, &corpus, &pp, 1, false, &none).unwrap();
        let two = train_in_process(&cfg, &corpus, &pp, 2, false, &none).unwrap();
        assert_eq!(one.rows.len(), two.rows.len());
        for (a, b) in one.rows.iter().zip(&two.rows) {
            assert!((a.loss - b.loss).abs() < 2e-5, "{} vs {}", a.loss, b.loss);
        }
        cfg.batch_size = 3;
        let e = train_in_process(&cfg, &corpus, &pp, 2, false, &none)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("multiple of --dp 2"), "{e}");
    }

    /// Two steps, stage checkpoints, two more from them: bitwise the losses of four
    /// steps in one go (the batch stream is skipped past the saved steps' batches).
    #[test]
    fn resumed_pipeline_run_gives_bitwise_the_losses() {
        let mut cfg = tiny(4);
        cfg.steps = 4;
        let corpus = Corpus::load(crate::data::DEFAULT_CORPUS).unwrap();
        let pp = PpConfig {
            pp: 2,
            schedule: "zb-h1".into(),
            micro_batches: 4,
        };
        let none = StageCheckpoints::default();
        let whole = train_in_process(&cfg, &corpus, &pp, 1, false, &none).unwrap();
        let dir = std::env::temp_dir().join(format!("brrr-pp-resume-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let save = StageCheckpoints {
            resume: None,
            save: Some(dir.clone()),
        };
        let mut half = cfg.clone();
        half.steps = 2;
        let first = train_in_process(&half, &corpus, &pp, 1, false, &save).unwrap();
        let resume = StageCheckpoints {
            resume: Some(dir.clone()),
            save: None,
        };
        let rest = train_in_process(&cfg, &corpus, &pp, 1, false, &resume).unwrap();
        assert_eq!(rest.start_step, 2);
        let bits = |r: &[StepRow]| r.iter().map(|x| x.loss.to_bits()).collect::<Vec<_>>();
        let mut got = bits(&first.rows);
        got.extend(bits(&rest.rows));
        assert_eq!(got, bits(&whole.rows));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plan_reports_theory_and_rejects_bad_costs() {
        let mut a = PlanArgs {
            pp: 4,
            micro_batches: 8,
            schedule: "gpipe".into(),
            f: 1.0,
            b: 1.0,
            w: 1.0,
            comm: 0.0,
            svg: None,
        };
        let text = run_plan(&a).unwrap();
        assert!(
            text.contains("simulated 27.27%") && text.contains("theory 27.27%"),
            "{text}"
        );
        a.f = -1.0;
        assert!(run_plan(&a).is_err());
        a.f = 1.0;
        a.schedule = "bogus".into();
        assert!(
            run_plan(&a)
                .unwrap_err()
                .to_string()
                .contains("unknown schedule")
        );
    }
}
