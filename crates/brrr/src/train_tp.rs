//! `brrr train --tp N [--sp] [--dp M]`: Megatron tensor parallelism (`brrr-tp`) over
//! `M × N` ranks, as threads of this process by default, or one process per rank under
//! `brrr launch`, mpirun, srun or torchrun (the world from the launcher's environment).
//!
//! Every rank draws the same global batches from the same seed and trains its
//! data-parallel rows with its tensor-parallel shard; rank 0 writes the run directory a
//! single-device run writes (`config.toml`, `metrics.csv`, `loss.svg`, and a checkpoint
//! of the whole model gathered from the shards, which `brrr sample` reads as it is).

use crate::data::{Corpus, SYNTHETIC, synthetic_corpus, unigram_entropy_nats};
use crate::metrics::{self, MetricsWriter, Row};
use crate::train::{
    self, CHECKPOINT_FILE, CONFIG_FILE, METRICS_FILE, PLOT_FILE, Summary, TrainArgs,
};
use brrr_backend::{Error, Result};
use brrr_checkpoint::Strategy;
use brrr_collectives::env::{LaunchEnv, Launcher};
use brrr_collectives::{Communicator, ParallelGroups, ParallelLayout, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_tp::{TpConfig, TpTrainer};
use brrr_train::{Batch, BatchSource, Batcher, TrainConfig, val_batches};
use std::path::{Path, PathBuf};

/// Whether the flags ask for tensor parallelism, or for data-parallel replicas (which
/// this module runs as `--tp 1`: a plain gradient all-reduce per step) rather than
/// letting a single-device run ignore `--dp`.
pub fn wanted(args: &TrainArgs) -> bool {
    args.tp.is_some_and(|n| n > 1) || args.sp
}

/// What this module does not combine with `--tp` yet, as an error naming the flag.
fn refuse_unsupported(args: &TrainArgs) -> Result<()> {
    let no = |flag: &str| {
        Err(Error::invalid(
            "train",
            format!("{flag} with --tp is not supported yet"),
        ))
    };
    if args.resume.is_some() {
        return no("--resume");
    }
    if args.amp.is_some() {
        return no("--amp");
    }
    if args.checkpoint.is_some_and(|s| s != Strategy::None) {
        return no("--checkpoint");
    }
    if args.data.is_some() {
        return no("--data");
    }
    if args.trace.is_some() {
        return no("--trace");
    }
    if args.backend != train::BackendKind::Cpu {
        return no("--backend other than cpu");
    }
    Ok(())
}

/// Runs `brrr train` with tensor parallelism.
pub fn run(args: &TrainArgs) -> Result<Summary> {
    refuse_unsupported(args)?;
    let tp = TpConfig {
        tp: args.tp.unwrap_or(1),
        sp: args.sp,
    };
    let dp = args.dp.unwrap_or(1);
    let cfg = train::config_from_args(args)?;
    let layout = ParallelLayout {
        dp,
        tp: tp.tp,
        pp: 1,
    };
    let env = LaunchEnv::from_env()?;
    let world = if env.launcher == Launcher::Single {
        dp * tp.tp
    } else {
        env.world_size
    };
    tp.validate(layout, world, &cfg)?;
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs/train"));
    if !args.force && out_dir.join(CONFIG_FILE).exists() {
        return Err(Error::invalid(
            "train",
            format!(
                "{} already holds a run; pass --force to replace it or --out elsewhere",
                out_dir.display()
            ),
        ));
    }
    let corpus = if cfg.corpus == SYNTHETIC {
        synthetic_corpus(cfg.seed)?
    } else {
        Corpus::load(&cfg.corpus)?
    };
    let job = Job {
        cfg,
        tp,
        layout,
        corpus,
        out_dir,
        stop_at: args.stop_after.unwrap_or(u64::MAX),
        quiet: args.quiet,
    };
    if env.launcher == Launcher::Single {
        let results = run_in_process(world, |comm| Ok(job.run_rank(comm)?));
        let mut summaries = Vec::new();
        for (rank, r) in results.into_iter().enumerate() {
            summaries.push(r.map_err(|e| Error::invalid("train", format!("rank {rank}: {e}")))?);
        }
        // Rank 0's: the one that wrote the run directory.
        Ok(summaries.swap_remove(0))
    } else {
        job.run_rank(&brrr_collectives::from_env()?)
    }
}

/// Everything a rank needs, the same on every rank.
struct Job {
    cfg: TrainConfig,
    tp: TpConfig,
    layout: ParallelLayout,
    corpus: Corpus,
    out_dir: PathBuf,
    stop_at: u64,
    quiet: bool,
}

impl Job {
    /// One rank's run; rank 0 writes the run directory. Every rank returns the same
    /// losses (averaged over the data-parallel group) in its summary.
    fn run_rank(&self, world: &Communicator) -> Result<Summary> {
        let cfg = &self.cfg;
        let backend = CpuBackend::new();
        let writer = world.rank() == 0;
        let groups = ParallelGroups::new(world, self.layout)?;
        let mut trainer = TpTrainer::new(&backend, cfg.clone(), self.tp, groups)?;
        let mut data = Batcher::for_corpus(&self.corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
        let val = val_batches(
            self.corpus.val(),
            cfg.batch_size,
            cfg.seq_len,
            cfg.eval_batches,
        )?;
        let mut out = match writer {
            true => Some(RunWriter::create(&self.out_dir, cfg)?),
            false => None,
        };
        if writer && !self.quiet {
            println!(
                "training {} parameters on {} ranks: dp {} × tp {}{}, {} steps",
                cfg.model.num_params(),
                world.world_size(),
                self.layout.dp,
                self.layout.tp,
                if self.tp.sp {
                    " with sequence parallelism"
                } else {
                    ""
                },
                cfg.steps
            );
        }
        let stop_at = self.stop_at.min(cfg.steps);
        let (mut timed_tokens, mut timed_secs) = (0usize, 0.0f64);
        let mut last = (None, None);
        while trainer.steps_done() < stop_at {
            let batches = (0..cfg.grad_accum)
                .map(|_| BatchSource::next_batch(&mut data))
                .collect::<Result<Vec<Batch>>>()?;
            let stats = trainer.step(&batches)?;
            let done = stats.step;
            let val_loss = match cfg.evaluates_at(done) {
                true => Some(trainer.evaluate(&val)?),
                false => None,
            };
            if done > 1 {
                timed_tokens += stats.tokens;
                timed_secs += stats.seconds.unwrap_or(0.0);
            }
            last = (Some(stats.loss), val_loss.or(last.1));
            let checkpoint = cfg.evaluates_at(done) || done == stop_at;
            // Gathering the state is collective: every rank takes part.
            let state = match checkpoint {
                true => Some(trainer.state(data.position(), data.fingerprint())?),
                false => None,
            };
            if let Some(w) = &mut out {
                w.step(&stats, val_loss, self.quiet)?;
                if let Some(s) = &state {
                    w.checkpoint(s)?;
                }
            }
        }
        let tokens_per_s = if timed_secs > 0.0 {
            timed_tokens as f64 / timed_secs
        } else {
            0.0
        };
        Ok(Summary {
            out_dir: self.out_dir.clone(),
            steps_done: trainer.steps_done(),
            already_finished: false,
            final_loss: last.0,
            final_val_loss: last.1,
            unigram_entropy: unigram_entropy_nats(self.corpus.tokens()),
            tokens_per_s,
            // Throughput of all ranks together on one machine's cores.
            mfu: None,
            peak: Err("not measured for tensor-parallel runs".into()),
            amp: brrr_amp::AmpMode::Off,
            checkpoint: crate::train::CHECKPOINT_FILE.into(),
        })
    }
}

/// Rank 0's run directory: the files a single-device run writes.
struct RunWriter {
    dir: PathBuf,
    metrics: MetricsWriter,
}

impl RunWriter {
    fn create(dir: &Path, cfg: &TrainConfig) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("{}: creating output directory", dir.display()), e))?;
        for f in [CHECKPOINT_FILE, PLOT_FILE] {
            match std::fs::remove_file(dir.join(f)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io(format!("{}: removing {f}", dir.display()), e));
                }
                _ => {}
            }
        }
        let text = toml::to_string_pretty(cfg)
            .map_err(|e| Error::invalid("train", format!("serialising config: {e}")))?;
        crate::atomic::write_atomic(dir.join(CONFIG_FILE), text.as_bytes())?;
        Ok(RunWriter {
            dir: dir.to_path_buf(),
            metrics: MetricsWriter::create(dir.join(METRICS_FILE))?,
        })
    }

    fn step(
        &mut self,
        s: &brrr_train::StepStats,
        val_loss: Option<f32>,
        quiet: bool,
    ) -> Result<()> {
        let secs = s.seconds.unwrap_or(f64::NAN);
        let tokens_per_s = s.tokens as f64 / secs;
        self.metrics.append(&Row::from_stats(s, val_loss))?;
        if let (Some(v), false) = (val_loss, quiet) {
            println!(
                "step {:>6}  loss {:.4}  val {v:.4}  lr {:.2e}  |g| {:.3}  {tokens_per_s:.0} tok/s",
                s.step, s.loss, s.lr, s.grad_norm
            );
        }
        Ok(())
    }

    fn checkpoint(&self, state: &brrr_train::TrainState) -> Result<()> {
        state.save(self.dir.join(CHECKPOINT_FILE))?;
        metrics::plot_csv_svg(self.metrics.path(), self.dir.join(PLOT_FILE))
    }
}
