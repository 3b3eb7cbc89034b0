//! `brrr train`: flags into a [`TrainConfig`] (its layout included), then brrr-launch's
//! [`brrr_launch::launch`], which starts the ranks, builds each rank's backend and
//! engine, and drives the one training loop of brrr-train; this module adds the
//! progress bar and the summary ([`CliObserver`]).
//!
//! Everything that can be checked is checked before the first file of the run
//! directory is written: the flags and their combination with the layout, the corpus,
//! the memory the run needs, an existing run in the output directory, the `--trace`
//! path, and on `--resume` the flags that would contradict the saved run.

use crate::data::{DEFAULT_CORPUS, SYNTHETIC, unigram_entropy_nats};
use brrr_amp::{AmpConfig, AmpMode, LossScaling};
use brrr_backend::{Backend, Error, Result};
use brrr_checkpoint::Strategy;
use brrr_launch::{Job, Outcome};
use brrr_nn::{Gpt, GptConfig};
use brrr_perf::trace::Tracer;
use brrr_train::memory;
use brrr_train::{
    EngineKind, Evaluation, Layout, Observer, RunDir, RunStart, StepStats, TrainConfig, TrainState,
};
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use brrr_launch::{BackendKind, DEFAULT_PREFETCH, not_built};
pub use brrr_train::CHECKPOINT_FILE;
pub use brrr_train::run_dir::{CONFIG_FILE, DP_DIR, METRICS_FILE, PLOT_FILE, PP_DIR};

/// Model shapes by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// 4 layers, 4 heads, 128 wide, context 128: trains in minutes on two CPU cores.
    Tiny,
    /// GPT-2 small's shape (124M parameters, vocabulary padded to 50304, context 1024),
    /// for benchmarks on a GPU.
    Gpt2_124m,
}

impl Preset {
    /// The preset's model.
    pub fn model(self) -> GptConfig {
        match self {
            Preset::Tiny => TrainConfig::default().model,
            Preset::Gpt2_124m => GptConfig::gpt2_124m(),
        }
    }
}

/// Flags of `brrr train`. Flags that define the run are optional, so that `--resume`
/// can tell which ones were given (and refuse those that contradict the saved run);
/// their defaults are [`TrainConfig::default`]'s.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct TrainArgs {
    /// Where to run.
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: BackendKind,
    /// Total optimizer steps of the run [default: 800]; with --resume, the new total.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Sequences per micro-batch, the global batch: in every layout the data-parallel
    /// replicas (--dp) split it, each taking batch-size / dp rows [default: 16].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Tokens per sequence, at most the model's context [default: 128].
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// Micro-batches per optimizer step [default: 1].
    #[arg(long)]
    pub grad_accum: Option<usize>,
    /// Seeds the weights and the batches [default: 1337].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Peak learning rate, after warmup [default: 2e-3].
    #[arg(long)]
    pub lr: Option<f64>,
    /// Final learning rate of the cosine decay [default: 2e-4].
    #[arg(long)]
    pub min_lr: Option<f64>,
    /// Steps of linear warmup [default: 50].
    #[arg(long)]
    pub warmup_steps: Option<u64>,
    /// AdamW weight decay, >= 0 [default: 0.1].
    #[arg(long, allow_negative_numbers = true)]
    pub weight_decay: Option<f32>,
    /// Clip the global gradient norm to this value [default: 1.0].
    #[arg(long, allow_negative_numbers = true)]
    pub grad_clip: Option<f64>,
    /// Evaluate on the held-out split (and save a checkpoint) every this many steps
    /// [default: 100]; may change on --resume.
    #[arg(long)]
    pub eval_every: Option<u64>,
    /// Validation batches per evaluation [default: 8].
    #[arg(long)]
    pub eval_batches: Option<usize>,
    /// The model's shape [default: tiny].
    #[arg(long, value_enum)]
    pub preset: Option<Preset>,
    /// Override the preset's layer count.
    #[arg(long)]
    pub n_layer: Option<usize>,
    /// Override the preset's head count.
    #[arg(long)]
    pub n_head: Option<usize>,
    /// Override the preset's width.
    #[arg(long)]
    pub n_embd: Option<usize>,
    /// Override the preset's context length (the longest --seq-len the model takes).
    #[arg(long)]
    pub block_size: Option<usize>,
    /// A UTF-8 text file to train on, at most 1 GiB (default: the corpus shipped with
    /// brrr).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Train on random printable ASCII generated from the seed instead of a corpus
    /// (throughput benchmarks: the loss cannot fall below ln 95).
    #[arg(long, conflicts_with = "corpus")]
    pub synthetic: bool,
    /// Train on a directory of token shards written by `brrr data prepare` (its
    /// `data.json` sets the tokenizer and vocabulary) instead of a text corpus.
    #[arg(long, conflicts_with_all = ["corpus", "synthetic"])]
    pub data: Option<PathBuf>,
    /// With --data: attention stays inside each document of a window (positions restart
    /// and a segment mask starts at every end-of-text token the shards hold before each
    /// document), instead of attending across into the previous document.
    #[arg(long, requires = "data")]
    pub doc_mask: bool,
    /// Batches a background thread prepares ahead of the step (0: none, each batch is
    /// produced when the step asks for it). Batches are the same either way.
    #[arg(long)]
    pub prefetch: Option<usize>,
    /// Output directory (default: runs/train; with --resume, the resumed run's).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace the run already in the output directory.
    #[arg(long)]
    pub force: bool,
    /// Continue the run saved in this directory.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Stop after this many total steps, as if interrupted (a checkpoint is saved);
    /// the schedule still follows --steps.
    #[arg(long)]
    pub stop_after: Option<u64>,
    /// Print no progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Write a Chrome trace (open it in Perfetto) of every step's phases to this file.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Time every op (synchronising after each) and print a table per op kind at the
    /// end: calls, time, share of the steps, GFLOP/s, GB/s and regime (brrr-profile).
    /// With --trace the trace holds the op spans too. With --dp, --tp or --pp every
    /// rank is profiled and the table is world rank 0's.
    #[arg(long)]
    pub profile: bool,
    /// Activation recomputation: none, every:K (keep every K-th block's input), sqrt
    /// (√n groups, Chen et al. 2016), selective (recompute attention's scores only,
    /// Korthikanti et al. 2022) or budget:BYTES (the least recomputation within BYTES
    /// of activations, e.g. budget:8M) [default: none]; may change on --resume.
    #[arg(long, value_parser = parse_checkpoint)]
    pub checkpoint: Option<Strategy>,
    /// Attention's core: fused (one kernel, q, k and v read in place, no [T, T] matrix
    /// stored) or composite (GEMMs and a softmax) [default: fused; composite with a
    /// --checkpoint strategy, whose planner counts the composite's [T, T] scores]. The
    /// fused kernel runs where it applies: a backend that has one (the CPU), f32, no
    /// --doc-mask; elsewhere the composite path runs whatever this says. Every engine
    /// (--dp, --tp, --pp) follows it. Saved with the run; given on --resume, it changes
    /// from there.
    #[arg(long, value_enum)]
    pub attention: Option<AttentionArg>,
    /// The optimizer: adamw (f32 moments, 8 bytes of state per parameter), adamw8bit
    /// (8-bit block-wise moments, about 2 bytes; Dettmers et al. 2022) or
    /// galore:RANK or galore:RANK:EVERY (AdamW on a rank-RANK projection of each attention
    /// and MLP weight's gradient, refreshed by an SVD every EVERY steps
    /// [default: 200]; Zhao et al. 2024) [default: adamw]. One device only for now.
    #[arg(long, value_parser = parse_optimizer)]
    pub optimizer: Option<brrr_nn::Optimizer>,
    /// Keep the optimizer's state and f32 master weights on the host and update there
    /// (ZeRO-Offload, Ren et al. 2021): each step's gradients go to the host, the CPU
    /// updates, the new weights come back, the three pipelined over the parameters.
    /// Works with every --optimizer; one device only for now. Given on --resume, the
    /// run goes on offloaded.
    #[arg(long)]
    pub offload: bool,
    /// Mixed precision: GEMMs and attention in bf16 or fp16 with f32 master weights
    /// [default: off]. fp16 scales the loss dynamically; bf16 does not (see
    /// --loss-scaling).
    #[arg(long, value_enum)]
    pub amp: Option<AmpArg>,
    /// Loss scaling under --amp: auto (fp16 only), dynamic, none [default: auto].
    #[arg(long, value_enum)]
    pub loss_scaling: Option<LossScalingArg>,
    /// Clean steps in a row before the loss scale doubles [default: 2000].
    #[arg(long)]
    pub scale_growth_interval: Option<u32>,
    /// Overflows since the scale last grew before it halves [default: 1, PyTorch's rule;
    /// Megatron-LM and DeepSpeed use 2].
    #[arg(long)]
    pub scale_hysteresis: Option<u32>,
    /// The loss scale never halves below this [default: 0, no floor].
    #[arg(long)]
    pub min_loss_scale: Option<f32>,
    /// Tensor parallelism (Megatron): split every layer over N ranks (threads, or
    /// processes under a launcher) [default: 1].
    #[arg(long)]
    pub tp: Option<usize>,
    /// Sequence parallelism with --tp: LayerNorms and residuals on a sequence shard.
    #[arg(long)]
    pub sp: bool,
    /// Pipeline stages: cut the model into N stages on in-process ranks (see
    /// `brrr pipeline plan`); with --tp T each stage is T ranks wide, with --dp D there
    /// are D pipelines (N·T·D ranks) [default: 1].
    #[arg(long)]
    pub pp: Option<usize>,
    /// Pipeline schedule under --pp: gpipe, 1f1b, interleaved:V, zb-h1, zb-h2
    /// [default: 1f1b].
    #[arg(long)]
    pub schedule: Option<String>,
    /// Micro-batches of --batch-size rows per step: --grad-accum by the name
    /// pipelines use [default: 1].
    #[arg(long)]
    pub micro_batches: Option<usize>,
    /// Data-parallel ranks: threads of this process, or the processes of a launcher
    /// (`brrr launch`, mpirun, srun, torchrun) [default: 1].
    #[arg(long)]
    pub dp: Option<usize>,
    /// ZeRO stage over the --dp replicas: 0 (DDP), 1 (moments sharded), 2 (+
    /// gradients), 3 (+ parameters, FSDP); with --pp, 1 [default: 0].
    #[arg(long)]
    pub zero: Option<u8>,
    /// Gradient bucket size in MiB of the --dp average [default: 25; with --dp alone
    /// the first bucket 1].
    #[arg(long)]
    pub bucket_mb: Option<f64>,
    /// Set by `brrr finetune`: the run starts from a trained run (no flag of its own).
    #[arg(skip)]
    pub finetune: Option<FinetuneFrom>,
}

/// What `brrr finetune` takes from the base run: its model's shape and tokenizer, and
/// where the run starts.
#[derive(Clone, Debug)]
pub struct FinetuneFrom {
    /// The base run's model.
    pub model: GptConfig,
    /// The base run's tokenizer.
    pub tokenizer: String,
    /// The base run's directory and LoRA's options.
    pub finetune: brrr_train::Finetune,
}

fn parse_checkpoint(s: &str) -> std::result::Result<Strategy, String> {
    s.parse()
        .map_err(|e: brrr_checkpoint::PlanError| e.to_string())
}

/// `--attention`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AttentionArg {
    /// The backend's fused attention kernel where it has one.
    Fused,
    /// Attention composed of GEMMs and a softmax, its `[T, T]` scores in memory.
    Composite,
}

impl AttentionArg {
    /// [`TrainConfig::fused_attention`] for this choice.
    pub fn fused(self) -> bool {
        self == AttentionArg::Fused
    }

    fn name(fused: bool) -> &'static str {
        if fused { "fused" } else { "composite" }
    }
}

/// `--attention`, or its default for a new run: fused, unless `--checkpoint` plans
/// recomputation (its planner models the composite path's `[T, T]` scores, which is what
/// `selective` recomputes). The model also falls back to the composite path where the
/// kernel does not apply (see the flag's help).
fn default_fused_attention(args: &TrainArgs) -> bool {
    match args.attention {
        Some(a) => a.fused(),
        None => args.checkpoint.is_none_or(|c| c == Strategy::None),
    }
}

/// Applies `--attention` to a resumed run's config, noting a change in `notes`.
pub fn resume_attention(args: &TrainArgs, cfg: &mut TrainConfig, notes: &mut Vec<String>) {
    if let Some(a) = args.attention.filter(|a| a.fused() != cfg.fused_attention) {
        notes.push(format!(
            "--attention {} (the run had {})",
            AttentionArg::name(a.fused()),
            AttentionArg::name(cfg.fused_attention)
        ));
        cfg.fused_attention = a.fused();
    }
}

/// `--amp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AmpArg {
    /// f32 throughout.
    Off,
    /// bf16 compute, f32 master weights; no loss scaling needed.
    Bf16,
    /// f16 compute, f32 master weights, a dynamic loss scale.
    Fp16,
}

impl AmpArg {
    fn mode(self) -> AmpMode {
        match self {
            AmpArg::Off => AmpMode::Off,
            AmpArg::Bf16 => AmpMode::Bf16,
            AmpArg::Fp16 => AmpMode::Fp16,
        }
    }
}

/// `--loss-scaling`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LossScalingArg {
    /// Dynamic under `--amp fp16`, none otherwise.
    Auto,
    /// A dynamic loss scale (needs `--amp`).
    Dynamic,
    /// No loss scale.
    None,
}

/// The `amp` part of a fresh run's configuration.
fn amp_from_args(args: &TrainArgs) -> AmpConfig {
    let mut amp = AmpConfig {
        mode: args.amp.map_or(AmpMode::Off, AmpArg::mode),
        loss_scaling: match args.loss_scaling {
            None | Some(LossScalingArg::Auto) => LossScaling::Auto,
            Some(LossScalingArg::Dynamic) => LossScaling::Dynamic,
            Some(LossScalingArg::None) => LossScaling::None,
        },
        ..AmpConfig::default()
    };
    let scaler = &mut amp.scaler;
    scaler.growth_interval = args.scale_growth_interval.unwrap_or(scaler.growth_interval);
    scaler.hysteresis = args.scale_hysteresis.unwrap_or(scaler.hysteresis);
    scaler.min_scale = args.min_loss_scale.unwrap_or(scaler.min_scale);
    amp
}

/// The configuration the flags describe (a fresh run), validated.
pub fn config_from_args(args: &TrainArgs) -> Result<TrainConfig> {
    let d = TrainConfig::default();
    let corpus = match &args.corpus {
        _ if args.synthetic => SYNTHETIC.to_string(),
        _ if args.data.is_some() => data_dir_string(args),
        Some(p) => p.display().to_string(),
        None => DEFAULT_CORPUS.to_string(),
    };
    let cfg = TrainConfig {
        model: model_from_args(args),
        steps: args.steps.unwrap_or(d.steps),
        batch_size: args.batch_size.unwrap_or(d.batch_size),
        seq_len: args.seq_len.unwrap_or(d.seq_len),
        grad_accum: args.grad_accum.unwrap_or(d.grad_accum),
        seed: args.seed.unwrap_or(d.seed),
        lr: args.lr.unwrap_or(d.lr),
        min_lr: args.min_lr.unwrap_or(d.min_lr),
        warmup_steps: args.warmup_steps.unwrap_or(d.warmup_steps),
        weight_decay: args.weight_decay.unwrap_or(d.weight_decay),
        grad_clip: args.grad_clip.unwrap_or(d.grad_clip),
        eval_every: args.eval_every.unwrap_or(d.eval_every),
        eval_batches: args.eval_batches.unwrap_or(d.eval_batches),
        corpus,
        tokenizer: d.tokenizer,
        checkpoint: args.checkpoint.unwrap_or_default(),
        amp: amp_from_args(args),
        data: data_dir_string(args),
        document_mask: args.doc_mask,
        fused_attention: default_fused_attention(args),
        layout: layout_from_args(args),
        optimizer: args.optimizer.unwrap_or_default(),
        finetune: None,
        offload: args.offload,
    };
    let cfg = with_micro_batches(cfg, args)?;
    let cfg = with_data_tokenizer(cfg)?;
    let cfg = with_finetune(cfg, args)?;
    cfg.validate()?;
    Ok(cfg)
}

/// A fine-tuning run's model is its base run's; the new data must use the base run's
/// tokenizer and vocabulary.
fn with_finetune(mut cfg: TrainConfig, args: &TrainArgs) -> Result<TrainConfig> {
    let Some(from) = &args.finetune else {
        return Ok(cfg);
    };
    if cfg.tokenizer != from.tokenizer || cfg.model.vocab_size != from.model.vocab_size {
        return Err(Error::invalid(
            "finetune",
            format!(
                "the base run reads {} tokens ({} in its vocabulary) and the new data {} ({}): \
                 fine-tune on data the base run's tokenizer wrote",
                from.tokenizer, from.model.vocab_size, cfg.tokenizer, cfg.model.vocab_size
            ),
        ));
    }
    cfg.model = from.model.clone();
    cfg.finetune = Some(from.finetune.clone());
    Ok(cfg)
}

fn parse_optimizer(s: &str) -> std::result::Result<brrr_nn::Optimizer, String> {
    s.parse()
}

fn data_dir_string(args: &TrainArgs) -> String {
    args.data
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// With `--data`, the shards' tokenizer and vocabulary (from their `data.json`).
fn with_data_tokenizer(mut cfg: TrainConfig) -> Result<TrainConfig> {
    if !cfg.data.is_empty() {
        let kind = brrr_data::data_dir::read_meta(Path::new(&cfg.data))?.tokenizer;
        cfg.tokenizer = kind.name().to_string();
        cfg.model.vocab_size = kind.vocab_size();
    }
    Ok(cfg)
}

/// The layout the flags describe. Under a launcher (`mpirun -np 4 brrr train`) with no
/// layout flags, the processes are data-parallel ranks, as torchrun users expect,
/// rather than four one-device runs writing the same directory.
pub fn layout_from_args(args: &TrainArgs) -> Layout {
    let d = Layout::default();
    let mut l = Layout {
        dp: args.dp.unwrap_or(d.dp),
        tp: args.tp.unwrap_or(d.tp),
        pp: args.pp.unwrap_or(d.pp),
        sp: args.sp,
        zero: args.zero.unwrap_or(d.zero),
        schedule: args.schedule.clone().unwrap_or(d.schedule),
        bucket_mb: args.bucket_mb,
    };
    let given = args.dp.is_some() || args.tp.is_some() || args.pp.is_some();
    if let Ok(env) = brrr_collectives::env::LaunchEnv::from_env()
        && env.launcher != brrr_collectives::env::Launcher::Single
        && env.world_size > 1
        && !given
    {
        l.dp = env.world_size;
    }
    l
}

/// `--micro-batches` is a pipeline's name for `--grad-accum`: micro-batches per step.
fn with_micro_batches(mut cfg: TrainConfig, args: &TrainArgs) -> Result<TrainConfig> {
    match (args.micro_batches, args.grad_accum) {
        (Some(m), Some(k)) if m != k => Err(Error::invalid(
            "train",
            format!(
                "--micro-batches {m} and --grad-accum {k} name the same thing (micro-batches \
                 per step): give one"
            ),
        )),
        (Some(m), _) => {
            cfg.grad_accum = m;
            Ok(cfg)
        }
        _ => Ok(cfg),
    }
}

fn model_from_args(args: &TrainArgs) -> GptConfig {
    let mut model = args.preset.unwrap_or(Preset::Tiny).model();
    if let Some(v) = args.n_layer {
        model.n_layer = v;
    }
    if let Some(v) = args.n_head {
        model.n_head = v;
    }
    if let Some(v) = args.n_embd {
        model.n_embd = v;
    }
    if let Some(v) = args.block_size {
        model.block_size = v;
    }
    model
}

/// Adds `flag given (the run has saved)` to `out` when a flag was given with a value
/// other than the saved run's.
fn differs<T: PartialEq + fmt::Display>(
    out: &mut Vec<String>,
    flag: &str,
    given: Option<T>,
    saved: T,
) {
    if let Some(g) = given
        && g != saved
    {
        out.push(format!("{flag} {g} (the run has {saved})"));
    }
}

/// The flags of `args` that contradict the saved run `saved`.
fn resume_conflicts(args: &TrainArgs, saved: &TrainConfig) -> Vec<String> {
    let mut c = Vec::new();
    differs(&mut c, "--batch-size", args.batch_size, saved.batch_size);
    differs(&mut c, "--seq-len", args.seq_len, saved.seq_len);
    differs(&mut c, "--grad-accum", args.grad_accum, saved.grad_accum);
    differs(&mut c, "--seed", args.seed, saved.seed);
    differs(&mut c, "--lr", args.lr, saved.lr);
    differs(&mut c, "--min-lr", args.min_lr, saved.min_lr);
    differs(
        &mut c,
        "--warmup-steps",
        args.warmup_steps,
        saved.warmup_steps,
    );
    differs(
        &mut c,
        "--weight-decay",
        args.weight_decay,
        saved.weight_decay,
    );
    differs(&mut c, "--grad-clip", args.grad_clip, saved.grad_clip);
    differs(&mut c, "--optimizer", args.optimizer, saved.optimizer);
    differs(
        &mut c,
        "--amp",
        args.amp.map(|a| a.mode().name()),
        saved.amp.mode.name(),
    );
    if args.loss_scaling.is_some() && amp_from_args(args).loss_scaling != saved.amp.loss_scaling {
        c.push(format!(
            "--loss-scaling (the run has {:?})",
            saved.amp.loss_scaling
        ));
    }
    let scaler = &saved.amp.scaler;
    differs(
        &mut c,
        "--scale-growth-interval",
        args.scale_growth_interval,
        scaler.growth_interval,
    );
    differs(
        &mut c,
        "--scale-hysteresis",
        args.scale_hysteresis,
        scaler.hysteresis,
    );
    differs(
        &mut c,
        "--min-loss-scale",
        args.min_loss_scale,
        scaler.min_scale,
    );
    differs(
        &mut c,
        "--eval-batches",
        args.eval_batches,
        saved.eval_batches,
    );
    let m = &saved.model;
    differs(&mut c, "--n-layer", args.n_layer, m.n_layer);
    differs(&mut c, "--n-head", args.n_head, m.n_head);
    differs(&mut c, "--n-embd", args.n_embd, m.n_embd);
    differs(&mut c, "--block-size", args.block_size, m.block_size);
    if let Some(p) = args.preset
        && model_from_args(args) != *m
    {
        c.push(format!("--preset {p:?} (the run's model is {m:?})"));
    }
    let corpus = args.corpus.as_ref().map(|p| p.display().to_string());
    differs(&mut c, "--corpus", corpus, saved.corpus.clone());
    let data = args.data.as_ref().map(|p| p.display().to_string());
    differs(&mut c, "--data", data, saved.data.clone());
    if args.doc_mask && !saved.document_mask {
        c.push("--doc-mask (the saved run trains without it)".to_string());
    }
    if args.synthetic && saved.corpus != SYNTHETIC {
        c.push(format!("--synthetic (the run trained on {})", saved.corpus));
    }
    differs(
        &mut c,
        "--micro-batches",
        args.micro_batches,
        saved.grad_accum,
    );
    c
}

/// Reads `config.toml` from a run directory ([`RunDir::read_config`]).
pub fn read_config(dir: &Path) -> Result<TrainConfig> {
    RunDir::read_config(dir)
}

/// Loads the weights of a checkpoint into a model of the same configuration.
pub fn load_weights<B: Backend>(ck: &crate::ckpt::Checkpoint, model: &mut Gpt<B>) -> Result<()> {
    let state = TrainState::from_checkpoint(ck)?;
    let backend = model.wte.weight.value.backend().clone();
    brrr_train::load_params(&backend, model, &state)
}

/// What a finished (or stopped) run reports; its `Display` is what `brrr train` prints.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The run directory.
    pub out_dir: PathBuf,
    /// Optimizer steps completed, over every session of the run.
    pub steps_done: u64,
    /// The run had already done all its steps: nothing was trained or written.
    pub already_finished: bool,
    /// The last step's training loss (`None` if no step ran).
    pub final_loss: Option<f32>,
    /// The last evaluation's validation loss (`None` if none ran).
    pub final_val_loss: Option<f32>,
    /// The corpus's unigram entropy in nats: the loss of a model that ignores context.
    pub unigram_entropy: f64,
    /// Training tokens per second over this session's timed steps.
    pub tokens_per_s: f64,
    /// The model's FLOPs per trained token (`GptConfig::flops_per_token`), for MFU.
    pub flops_per_token: f64,
    /// The device whose peak MFU is measured against, or why there is none (several
    /// ranks sharing one machine, nothing trained).
    pub peak_of: std::result::Result<brrr_backend::BackendInfo, String>,
    /// [`Summary::peak`], found on first use: a CPU's peak is measured, which takes
    /// about a second, and only a summary that is shown needs it.
    peak: std::sync::OnceLock<std::result::Result<MfuPeak, String>>,
    /// The precision the run trained in (`--amp`), which chooses the peak.
    pub amp: AmpMode,
    /// Where the checkpoint is, inside `out_dir` (one file, or a data-parallel run's
    /// shards).
    pub checkpoint: String,
    /// The engine that ran ([`brrr_train::Engine::describe`]).
    pub engine: String,
    /// What the layout measured ([`brrr_train::Engine::report`]).
    pub report: Vec<String>,
}

impl Summary {
    /// The peak MFU is measured against ([`mfu_peak`]), or why there is none; measured
    /// on the first call.
    pub fn peak(&self) -> &std::result::Result<MfuPeak, String> {
        self.peak.get_or_init(|| match &self.peak_of {
            Ok(device) => mfu_peak(device, self.amp),
            Err(why) => Err(why.clone()),
        })
    }

    /// Model FLOPs utilisation: `tokens/s × flops_per_token / peak.flops` (PaLM,
    /// Chowdhery et al. 2022, appendix B), when the device's peak is known.
    pub fn mfu(&self) -> Option<f64> {
        match self.peak() {
            Ok(p) if self.tokens_per_s > 0.0 => {
                Some(self.tokens_per_s * self.flops_per_token / p.flops)
            }
            _ => None,
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.already_finished {
            return writeln!(
                f,
                "already finished at step {}: nothing to train (pass a larger --steps to continue)",
                self.steps_done
            );
        }
        if !self.engine.is_empty() {
            writeln!(f, "engine:            {}", self.engine)?;
        }
        writeln!(f, "steps done:        {}", self.steps_done)?;
        if let Some(l) = self.final_loss {
            writeln!(f, "final train loss:  {l:.4} nats/token")?;
        }
        match self.final_val_loss {
            Some(v) if self.unigram_entropy.is_finite() => writeln!(
                f,
                "final val loss:    {v:.4} nats/token (unigram entropy of the corpus: {:.4})",
                self.unigram_entropy
            )?,
            Some(v) => writeln!(f, "final val loss:    {v:.4} nats/token")?,
            None => {}
        }
        writeln!(f, "throughput:        {:.0} tokens/s", self.tokens_per_s)?;
        match (self.peak(), self.mfu()) {
            (Ok(peak), Some(mfu)) => {
                let rate = if peak.flops >= 1e12 {
                    format!("{:.1} TFLOP/s", peak.flops / 1e12)
                } else {
                    format!("{:.0} GFLOP/s", peak.flops / 1e9)
                };
                let pct = mfu * 100.0;
                writeln!(
                    f,
                    "MFU:               {pct:.1}% of {rate}, the {}",
                    peak.what
                )?;
            }
            (Err(why), _) => writeln!(f, "MFU:               n/a: {why}")?,
            (Ok(_), None) => writeln!(f, "MFU:               n/a: no timed steps")?,
        }
        for line in &self.report {
            writeln!(f, "{line}")?;
        }
        writeln!(
            f,
            "wrote:             {}/{{config.toml, metrics.csv, loss.svg, {}}}",
            self.out_dir.display(),
            self.checkpoint
        )
    }
}

/// The peak FLOP/s that MFU divides by, and where it comes from.
#[derive(Clone, Debug)]
pub struct MfuPeak {
    /// The peak, in FLOP/s.
    pub flops: f64,
    /// E.g. "fp32 vector peak of NVIDIA H200 (brrr_perf::specs)".
    pub what: String,
}

/// The peak a run on `info`'s device in precision `amp` is measured against.
///
/// On a GPU: in f32 (TF32 off, as `bench/torch_reference.py` runs PyTorch) the f32
/// *vector* peak; under `--amp bf16` / `fp16` the 16-bit *tensor-core* peak, since that
/// is where the GEMMs, nearly all of the FLOPs, run (PyTorch's and PaLM's convention for
/// mixed precision). On the CPU the measured f32 FMA peak in every mode: brrr-cpu widens
/// 16-bit operands and computes in f32, so f32 arithmetic is its ceiling.
pub fn mfu_peak(
    info: &brrr_backend::BackendInfo,
    amp: AmpMode,
) -> std::result::Result<MfuPeak, String> {
    if info.name == "cpu" {
        return Ok(cpu_mfu_peak());
    }
    // `BackendInfo::device` is "NAME (details)"; only the name identifies the GPU.
    let name = info.device.split(" (").next().unwrap_or_default();
    let gpu = brrr_perf::specs::gpu_for_device(name).ok_or_else(|| {
        format!("no peak known for \"{name}\" (brrr_perf::specs has no such GPU)")
    })?;
    let (dtype, unit, label) = gpu_peak_kind(amp);
    let flops = gpu.peak(dtype, unit).map_err(|e| e.to_string())?;
    Ok(MfuPeak {
        flops,
        what: format!("{label} of {} (brrr_perf::specs)", gpu.name),
    })
}

/// The CPU's ceiling: the larger of the FMA loop's throughput measured now (the nominal
/// clock's peak where none can be timed) and brrr-cpu's best f32 GEMM rate measured now
/// ([`crate::bench::cpu_gemm_ceiling`]), each named with its figure.
///
/// Why the larger: both are measurements, and a measurement can only come out low (a
/// core taken by another process, a clock not yet up). A GEMM faster than the FMA loop
/// proves the loop under-measured, and MFU against it would flatter the run.
fn cpu_mfu_peak() -> MfuPeak {
    let fma = brrr_perf::machine::cpu_fp32_peak_measured();
    match crate::bench::cpu_gemm_ceiling() {
        Some(g) if g.gflops * 1e9 > fma.flops => MfuPeak {
            flops: g.gflops * 1e9,
            what: format!(
                "best f32 GEMM rate of brrr-cpu measured now (n = {}), above the FMA loop's {:.0} GFLOP/s ({})",
                g.n,
                fma.flops / 1e9,
                fma.describe()
            ),
        },
        gemm => MfuPeak {
            flops: fma.flops,
            what: match gemm {
                Some(g) => format!(
                    "{}; brrr-cpu's best f32 GEMM measured {:.0} GFLOP/s (n = {})",
                    fma.describe(),
                    g.gflops,
                    g.n
                ),
                None => fma.describe(),
            },
        },
    }
}

/// Which of a GPU's peaks a run in precision `amp` is judged against (see [`mfu_peak`]).
pub fn gpu_peak_kind(amp: AmpMode) -> (brrr_perf::DType, brrr_perf::Unit, &'static str) {
    use brrr_perf::{DType, Unit};
    match amp {
        AmpMode::Off => (DType::F32, Unit::Vector, "fp32 vector peak"),
        AmpMode::Bf16 => (DType::Bf16, Unit::Tensor, "dense bf16 tensor-core peak"),
        AmpMode::Fp16 => (DType::F16, Unit::Tensor, "dense fp16 tensor-core peak"),
    }
}

/// Runs `brrr train`: checks everything, then starts the run with brrr-launch.
pub fn run(args: &TrainArgs) -> Result<Summary> {
    if args.profile {
        return crate::profile_cmd::run(args);
    }
    let Some(plan) = plan(args, args.backend == BackendKind::Cpu)? else {
        return finished_summary(args);
    };
    let job = plan.job(args);
    let mut obs = CliObserver::new(&plan, args.quiet);
    let outcome = brrr_launch::launch_with(&job, &plan.data, &mut obs)?;
    obs.pb.finish_and_clear();
    Ok(obs.summary(&plan, &outcome))
}

/// `brrr train` on backends you build (`make` gives each rank its own: a profiling
/// wrapper of its device), in every layout: the observed rank's phases go into
/// `tracer` when given, written to `--trace`.
pub fn run_on<B: Backend>(
    make: &(dyn Fn(brrr_launch::Rank) -> Result<B> + Sync),
    args: &TrainArgs,
    tracer: Option<Arc<Tracer>>,
) -> Result<Summary> {
    let Some(plan) = plan(args, args.backend == BackendKind::Cpu)? else {
        return finished_summary(args);
    };
    let job = plan.job(args);
    let mut obs = CliObserver::new(&plan, args.quiet);
    let outcome = brrr_launch::launch_on(&job, &plan.data, &mut obs, make, tracer)?;
    obs.pb.finish_and_clear();
    Ok(obs.summary(&plan, &outcome))
}

/// A run, checked and ready to start: nothing has been written yet.
struct Plan {
    cfg: TrainConfig,
    /// The directory resumed from.
    resume: Option<PathBuf>,
    out_dir: PathBuf,
    start_step: u64,
    stop_at: u64,
    /// What `--resume` took from the command line, to tell the user.
    notes: Vec<String>,
    /// The corpus's unigram entropy (for the summary), when training on text.
    entropy: f64,
    /// The data, opened once: the ranks draw from it.
    data: brrr_data::DataSpec,
}

impl Plan {
    fn job(&self, args: &TrainArgs) -> Job {
        Job {
            config: self.cfg.clone(),
            backend: args.backend,
            out: Some(self.out_dir.clone()),
            resume: self.resume.clone(),
            stop_at: self.stop_at,
            prefetch: args.prefetch.unwrap_or(DEFAULT_PREFETCH),
            trace: args.trace.clone(),
        }
    }
}

/// Checks the flags, the saved run, the output directory, the trace path, the memory
/// and the corpus. `None`: a resumed run that had already finished.
fn plan(args: &TrainArgs, is_cpu: bool) -> Result<Option<Plan>> {
    let (cfg, resume, start_step, notes) = match &args.resume {
        Some(dir) => {
            let (cfg, notes) = resume_config(args, dir)?;
            let start = brrr_launch::saved_step(dir, &cfg)?;
            if start >= cfg.steps {
                return Ok(None);
            }
            (cfg, Some(dir.clone()), start, notes)
        }
        None => (config_from_args(args)?, None, 0, Vec::new()),
    };
    let out_dir = match (&args.out, &resume) {
        (Some(o), _) => o.clone(),
        (None, Some(dir)) => dir.clone(),
        (None, None) => PathBuf::from("runs/train"),
    };
    let in_place = resume
        .as_ref()
        .is_some_and(|d| brrr_train::run_dir::same_dir(d, &out_dir));
    if !in_place {
        RunDir::check_new(&out_dir, args.force)?;
    }
    if let Some(t) = &args.trace {
        check_writable(t)?;
    }
    let stop_at = args.stop_after.unwrap_or(cfg.steps).min(cfg.steps);
    if stop_at <= start_step {
        return Err(Error::invalid(
            "train",
            format!(
                "--stop-after {stop_at} stops at or before step {start_step}, where the run \
                 starts: nothing would be trained or saved"
            ),
        ));
    }
    check_memory(&cfg, is_cpu)?;
    let data = brrr_data::DataSpec::open(&cfg.data_options())?;
    let plan = Plan {
        entropy: data
            .corpus()
            .map_or(f64::NAN, |c| unigram_entropy_nats(c.tokens())),
        data,
        cfg,
        resume,
        out_dir,
        start_step,
        stop_at,
        notes,
    };
    // Everything the job itself checks (the layout's feature matrix, the schedule,
    // --trace and --prefetch), before anything is written.
    plan.job(args).validate()?;
    Ok(Some(plan))
}

/// The layout flags of `args` that differ from the saved layout `l`.
fn layout_changes(args: &TrainArgs, l: &Layout) -> Vec<String> {
    let mut c = Vec::new();
    differs(&mut c, "--dp", args.dp, l.dp);
    differs(&mut c, "--tp", args.tp, l.tp);
    differs(&mut c, "--pp", args.pp, l.pp);
    differs(&mut c, "--zero", args.zero, l.zero);
    if args.sp && !l.sp {
        c.push("--sp (the saved run trains without it)".to_string());
    }
    c
}

/// The saved layout with the layout flags of `args` applied.
fn changed_layout(args: &TrainArgs, l: &Layout) -> Layout {
    Layout {
        dp: args.dp.unwrap_or(l.dp),
        tp: args.tp.unwrap_or(l.tp),
        pp: args.pp.unwrap_or(l.pp),
        sp: args.sp || (l.sp && args.tp.is_none_or(|t| t > 1)),
        zero: args.zero.unwrap_or(l.zero),
        schedule: args.schedule.clone().unwrap_or_else(|| l.schedule.clone()),
        bucket_mb: args.bucket_mb.or(l.bucket_mb),
    }
}

/// The saved run's config with what `--resume` may change applied; errors on flags
/// that contradict it.
fn resume_config(args: &TrainArgs, dir: &Path) -> Result<(TrainConfig, Vec<String>)> {
    let mut cfg = read_config(dir)?;
    // Runs saved before configs held their layout: the layout flags say what it was.
    if cfg.layout == Layout::default() {
        cfg.layout = layout_from_args(args);
    }
    let mut conflicts = resume_conflicts(args, &cfg);
    let mut notes = Vec::new();
    let changes = layout_changes(args, &cfg.layout);
    if !changes.is_empty() {
        // A run may go on in another layout from one whole checkpoint (every engine
        // reads it; `brrr ckpt consolidate` writes it from --dp or --pp files).
        let to = changed_layout(args, &cfg.layout);
        match dir.join(CHECKPOINT_FILE).exists() {
            true => {
                notes.push(format!(
                    "{} (the run had {})",
                    to.flags(),
                    cfg.layout.flags()
                ));
                cfg.layout = to;
            }
            false => conflicts.extend(changes.into_iter().map(|c| {
                c + " (another layout resumes only from one whole checkpoint: `brrr ckpt \
                     consolidate`, then --resume in any layout)"
            })),
        }
    }
    if !conflicts.is_empty() {
        return Err(Error::invalid(
            "train --resume",
            format!(
                "these flags contradict the run saved in {}: {}; drop them to continue that \
                 run, or start a new run without --resume",
                dir.display(),
                conflicts.join(", ")
            ),
        ));
    }
    if let Some(s) = args.steps.filter(|&s| s != cfg.steps) {
        notes.push(format!("--steps {s} (the run had {})", cfg.steps));
        cfg.steps = s;
    }
    if let Some(e) = args.eval_every.filter(|&e| e != cfg.eval_every) {
        notes.push(format!("--eval-every {e} (the run had {})", cfg.eval_every));
        cfg.eval_every = e;
    }
    if let Some(c) = args.checkpoint.filter(|&c| c != cfg.checkpoint) {
        notes.push(format!("--checkpoint {c} (the run had {})", cfg.checkpoint));
        cfg.checkpoint = c;
    }
    if let Some(s) = args
        .schedule
        .as_ref()
        .filter(|s| **s != cfg.layout.schedule)
    {
        notes.push(format!(
            "--schedule {s} (the run had {})",
            cfg.layout.schedule
        ));
        cfg.layout.schedule = s.clone();
    }
    resume_attention(args, &mut cfg, &mut notes);
    if args.offload && !cfg.offload {
        notes.push("--offload (the run trained without it)".to_string());
        cfg.offload = true;
    }
    cfg.validate()?;
    Ok((cfg, notes))
}

/// Errors unless a file can be created at `path` (its directory exists and is writable,
/// and it is not a directory), without touching an existing file there.
fn check_writable(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(Error::file(
            path,
            "is a directory, not a file to write the trace to",
        ));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".brrr-write-check")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| {
            Error::io(
                format!("{}: cannot write the trace there", path.display()),
                e,
            )
        })
}

/// Errors if the run's estimated memory exceeds what this machine has available: all of
/// it on the CPU backend, the data on the host for the others.
fn check_memory(cfg: &TrainConfig, is_cpu: bool) -> Result<()> {
    let need = memory::estimate(cfg)?;
    let bytes = if is_cpu {
        need.total()
    } else {
        need.host_bytes
    };
    match memory::mem_available() {
        Some(avail) => memory::check_fits(bytes, avail, "memory (MemAvailable in /proc/meminfo)"),
        // Without /proc/meminfo, still refuse what no machine has (1 PiB).
        None => memory::check_fits(bytes, 1 << 50, "memory (a stated limit of 1 PiB)"),
    }
}

fn finished_summary(args: &TrainArgs) -> Result<Summary> {
    let dir = args.resume.clone().unwrap_or_default();
    let (cfg, _) = resume_config(args, &dir)?;
    Ok(Summary {
        steps_done: brrr_launch::saved_step(&dir, &cfg)?,
        out_dir: dir,
        already_finished: true,
        final_loss: None,
        final_val_loss: None,
        unigram_entropy: f64::NAN,
        tokens_per_s: 0.0,
        flops_per_token: 0.0,
        peak_of: Err("nothing was trained".into()),
        peak: Default::default(),
        amp: AmpMode::Off,
        checkpoint: CHECKPOINT_FILE.into(),
        engine: String::new(),
        report: Vec::new(),
    })
}

/// Where a layout's checkpoint lies inside the run directory.
fn checkpoint_files(layout: &Layout) -> String {
    match layout.engine() {
        EngineKind::OneDevice | EngineKind::TensorParallel => CHECKPOINT_FILE.into(),
        EngineKind::DataParallel => format!("{DP_DIR}/dp-rank*-of{}.bin", layout.dp),
        EngineKind::Pipeline => format!("{PP_DIR}/pp-stage*-of{}*.bin", layout.pp),
    }
}

/// The global batch and how the layout splits it, for the header.
fn batch_line(cfg: &TrainConfig) -> String {
    let dp = cfg.layout.dp;
    let split = match dp {
        1 => String::new(),
        n => format!(
            ", each of {n} replicas training {} rows of it",
            cfg.batch_size / n
        ),
    };
    format!(
        "batch: {} sequences of {} tokens per micro-batch{split}, {} micro-batch{} a step",
        cfg.batch_size,
        cfg.seq_len,
        cfg.grad_accum,
        if cfg.grad_accum == 1 { "" } else { "es" }
    )
}

/// What the run trains on, for the header line.
fn data_line(cfg: &TrainConfig) -> String {
    match cfg.data.is_empty() {
        true => format!("corpus {}", cfg.corpus),
        false => format!(
            "shards in {} (tokenizer {}, vocabulary {})",
            cfg.data, cfg.tokenizer, cfg.model.vocab_size
        ),
    }
}

/// `brrr train`'s observer on world rank 0: the progress bar, the lines at each
/// evaluation, and the throughput for MFU. (The run directory is brrr-train's
/// [`RunDir`], which brrr-launch puts beside it.)
pub struct CliObserver {
    pb: ProgressBar,
    quiet: bool,
    start_step: u64,
    total: u64,
    notes: Vec<String>,
    resume: Option<PathBuf>,
    tokens_per_step: usize,
    amp: AmpMode,
    scales_loss: bool,
    data: String,
    /// How the global batch is split, for the header.
    batch: String,
    /// The evaluation of the step being reported (`on_eval` comes before `on_step`).
    pending_val: Option<Evaluation>,
    last_loss: Option<f32>,
    last_val: Option<f32>,
    timed_tokens: usize,
    timed_secs: f64,
    /// Steps skipped for inf/NaN gradients in this process (mixed precision).
    skipped: u64,
}

impl CliObserver {
    fn new(plan: &Plan, quiet: bool) -> Self {
        CliObserver {
            pb: progress_bar(quiet, plan.start_step, plan.cfg.steps),
            quiet,
            start_step: plan.start_step,
            total: plan.cfg.steps,
            notes: plan.notes.clone(),
            resume: plan.resume.clone(),
            tokens_per_step: plan.cfg.tokens_per_step(),
            amp: plan.cfg.amp.mode,
            scales_loss: plan.cfg.amp.scales_loss(),
            data: data_line(&plan.cfg),
            batch: batch_line(&plan.cfg),
            pending_val: None,
            skipped: 0,
            last_loss: None,
            last_val: None,
            timed_tokens: 0,
            timed_secs: 0.0,
        }
    }

    fn summary(&self, plan: &Plan, outcome: &Outcome) -> Summary {
        let tps = if self.timed_secs > 0.0 {
            self.timed_tokens as f64 / self.timed_secs
        } else {
            0.0
        };
        // Several ranks on one machine share its cores: MFU against one device's peak
        // would mislead.
        let peak_of = match outcome.world {
            1 => Ok(outcome.device.clone()),
            n => Err(format!("{n} ranks share this machine's peak")),
        };
        Summary {
            out_dir: plan.out_dir.clone(),
            steps_done: outcome.steps_done,
            already_finished: false,
            final_loss: self.last_loss,
            final_val_loss: self.last_val,
            unigram_entropy: plan.entropy,
            tokens_per_s: tps,
            flops_per_token: plan.cfg.model.flops_per_token(plan.cfg.seq_len),
            peak_of,
            peak: Default::default(),
            amp: plan.cfg.amp.mode,
            checkpoint: checkpoint_files(&plan.cfg.layout),
            engine: outcome.engine.clone(),
            report: outcome.report.clone(),
        }
    }
}

impl Observer for CliObserver {
    fn on_start(&mut self, s: &RunStart) -> Result<()> {
        if let Some(dir) = &self.resume {
            let mut line = format!("resuming {} at step {}", dir.display(), s.step);
            if !self.notes.is_empty() {
                line += &format!(", now with {}", self.notes.join(", "));
            }
            say(&self.pb, self.quiet, line);
        }
        say(
            &self.pb,
            self.quiet,
            format!(
                "brrr train: {} parameters on {}, {}, {} steps of {} tokens, {}",
                s.params, s.device, s.engine, self.total, self.tokens_per_step, self.data
            ),
        );
        say(&self.pb, self.quiet, self.batch.clone());
        if self.amp != AmpMode::Off {
            let scaling = match self.scales_loss {
                true => "dynamic loss scaling",
                false => "no loss scaling",
            };
            say(
                &self.pb,
                self.quiet,
                format!(
                    "mixed precision: {} GEMMs and attention, f32 master weights, {scaling}",
                    self.amp.name()
                ),
            );
        }
        Ok(())
    }

    fn on_eval(&mut self, eval: &Evaluation) -> Result<()> {
        self.pending_val = Some(*eval);
        Ok(())
    }

    fn on_step(&mut self, s: &StepStats) -> Result<()> {
        let val_loss = self
            .pending_val
            .take()
            .filter(|e| e.step == s.step)
            .map(|e| e.loss);
        let secs = s.seconds.unwrap_or(f64::NAN);
        let tokens_per_s = s.tokens as f64 / secs;
        if s.step > self.start_step + 1 {
            // The first step of a process pays for allocation and warm caches.
            self.timed_tokens += s.tokens;
            self.timed_secs += secs;
        }
        self.last_loss = Some(s.loss);
        self.skipped += u64::from(s.skipped);
        self.last_val = val_loss.or(self.last_val);
        self.pb.set_position(s.step);
        let mut msg = format!("loss {:.4}  {tokens_per_s:.0} tok/s", s.loss);
        if s.loss_scale != 1.0 || self.skipped > 0 {
            msg.push_str(&format!(
                "  scale {}  skipped {}",
                s.loss_scale, self.skipped
            ));
        }
        self.pb.set_message(msg);
        if let Some(v) = val_loss {
            let (done, loss, lr, norm) = (s.step, s.loss, s.lr, s.grad_norm);
            say(
                &self.pb,
                self.quiet,
                format!(
                    "step {done:>6}  loss {loss:.4}  val {v:.4}  lr {lr:.2e}  |g| {norm:.3}  {tokens_per_s:.0} tok/s"
                ),
            );
        }
        Ok(())
    }
}

fn progress_bar(quiet: bool, start: u64, total: u64) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} steps  {msg}  [{elapsed_precise}, ETA {eta}]",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    pb.set_position(start);
    pb
}

/// Prints above the progress bar, or as a plain line when there is no terminal to
/// draw one on (a log file, CI).
fn say(pb: &ProgressBar, quiet: bool, msg: String) {
    if quiet {
        return;
    }
    if pb.is_hidden() {
        eprintln!("{msg}");
    } else {
        pb.println(msg);
    }
}
