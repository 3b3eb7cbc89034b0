//! `brrr train`: the training loop, on any backend.
//!
//! One optimizer step is `grad_accum` micro-batches of forward + backward (each
//! backward accumulates into the parameter gradients with loss scale `1/(n·k)`), one
//! global gradient-norm computation for clipping, and one fused AdamW update per
//! parameter. The learning rate follows warmup + cosine. Everything that determines
//! the future of a run (weights, AdamW moments, step, the batch sampler's RNG
//! position) goes into the checkpoint, so a resumed run continues bit for bit.

use crate::ckpt::{self, NamedTensor};
use crate::data::{
    Batch, Batcher, ByteTokenizer, Corpus, DEFAULT_CORPUS, RngState, unigram_entropy_nats,
    val_batches,
};
use crate::metrics::{self, MetricsWriter, Row};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, CosineSchedule, Gpt, GptConfig, Module, clip_grad_norm};
use brrr_perf::trace::Tracer;
use brrr_tensor::Tensor;
use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The backends `--backend` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Cpu,
    Wgpu,
    Cuda,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cuda => "cuda",
        }
    }
}

/// Model shapes by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// 4 layers, 4 heads, 128 wide, context 128: trains in minutes on two CPU cores.
    Tiny,
    /// GPT-2 small's shape (124M parameters, vocabulary padded to 50304, context 1024),
    /// for benchmarks on a GPU.
    Gpt2_124m,
}

/// Flags of `brrr train`.
#[derive(Clone, Debug, clap::Args)]
pub struct TrainArgs {
    /// Where to run.
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: BackendKind,
    /// Total optimizer steps of the run (a resumed run continues up to this).
    #[arg(long, default_value_t = 800)]
    pub steps: u64,
    /// Sequences per micro-batch.
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Tokens per sequence (at most the model's context).
    #[arg(long, default_value_t = 128)]
    pub seq_len: usize,
    /// Micro-batches per optimizer step.
    #[arg(long, default_value_t = 1)]
    pub grad_accum: usize,
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Peak learning rate (after warmup).
    #[arg(long, default_value_t = 2e-3)]
    pub lr: f64,
    /// Final learning rate of the cosine decay.
    #[arg(long, default_value_t = 2e-4)]
    pub min_lr: f64,
    #[arg(long, default_value_t = 50)]
    pub warmup_steps: u64,
    #[arg(long, default_value_t = 0.1)]
    pub weight_decay: f32,
    /// Clip the global gradient norm to this value.
    #[arg(long, default_value_t = 1.0)]
    pub grad_clip: f64,
    /// Evaluate on the held-out split (and save a checkpoint) every this many steps.
    #[arg(long, default_value_t = 100)]
    pub eval_every: u64,
    /// Validation batches per evaluation.
    #[arg(long, default_value_t = 8)]
    pub eval_batches: usize,
    #[arg(long, value_enum, default_value = "tiny")]
    pub preset: Preset,
    /// Override the preset's layer count.
    #[arg(long)]
    pub n_layer: Option<usize>,
    /// Override the preset's head count.
    #[arg(long)]
    pub n_head: Option<usize>,
    /// Override the preset's width.
    #[arg(long)]
    pub n_embd: Option<usize>,
    /// A UTF-8 text file to train on (default: the corpus shipped with brrr).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Train on random printable ASCII generated from the seed instead of a corpus
    /// (throughput benchmarks: the loss cannot fall below ln 95).
    #[arg(long, conflicts_with = "corpus")]
    pub synthetic: bool,
    /// Output directory (default: runs/train).
    #[arg(long)]
    pub out: Option<PathBuf>,
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
}

/// What a run is, as written to `config.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub model: GptConfig,
    pub steps: u64,
    pub batch_size: usize,
    pub seq_len: usize,
    pub grad_accum: usize,
    pub seed: u64,
    pub lr: f64,
    pub min_lr: f64,
    pub warmup_steps: u64,
    pub weight_decay: f32,
    pub grad_clip: f64,
    pub eval_every: u64,
    pub eval_batches: usize,
    pub corpus: String,
    pub tokenizer: String,
}

impl TrainConfig {
    pub fn from_args(args: &TrainArgs) -> Result<Self> {
        let mut model = match args.preset {
            Preset::Tiny => GptConfig {
                vocab_size: ByteTokenizer::VOCAB_SIZE,
                block_size: 128,
                n_layer: 4,
                n_head: 4,
                n_embd: 128,
            },
            Preset::Gpt2_124m => GptConfig::gpt2_124m(),
        };
        if let Some(v) = args.n_layer {
            model.n_layer = v;
        }
        if let Some(v) = args.n_head {
            model.n_head = v;
        }
        if let Some(v) = args.n_embd {
            model.n_embd = v;
        }
        model.block_size = model.block_size.max(args.seq_len);
        let corpus = match &args.corpus {
            _ if args.synthetic => SYNTHETIC.to_string(),
            Some(p) => p.display().to_string(),
            None => DEFAULT_CORPUS.to_string(),
        };
        let cfg = TrainConfig {
            model,
            steps: args.steps,
            batch_size: args.batch_size,
            seq_len: args.seq_len,
            grad_accum: args.grad_accum,
            seed: args.seed,
            lr: args.lr,
            min_lr: args.min_lr,
            warmup_steps: args.warmup_steps,
            weight_decay: args.weight_decay,
            grad_clip: args.grad_clip,
            eval_every: args.eval_every,
            eval_batches: args.eval_batches,
            corpus,
            tokenizer: ByteTokenizer::NAME.to_string(),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        let bad = |m: String| Err(Error::invalid("train", m));
        if self.steps == 0 {
            return bad("--steps must be at least 1".into());
        }
        if self.batch_size == 0 || self.seq_len == 0 || self.grad_accum == 0 {
            return bad("--batch-size, --seq-len and --grad-accum must be at least 1".into());
        }
        if self.seq_len > self.model.block_size {
            return bad(format!(
                "--seq-len {} exceeds the context {}",
                self.seq_len, self.model.block_size
            ));
        }
        if self.model.vocab_size < ByteTokenizer::VOCAB_SIZE {
            return bad(format!(
                "vocab_size {} is smaller than the byte tokenizer's 256",
                self.model.vocab_size
            ));
        }
        let lr_ok = self.lr > 0.0 && self.lr.is_finite();
        let min_ok = self.min_lr >= 0.0 && self.min_lr <= self.lr;
        if !(lr_ok && min_ok) {
            return bad(format!(
                "need 0 <= --min-lr <= --lr and --lr > 0 (got {} and {})",
                self.min_lr, self.lr
            ));
        }
        if self.eval_every == 0 || self.eval_batches == 0 {
            return bad("--eval-every and --eval-batches must be at least 1".into());
        }
        if self.grad_clip.is_nan() || self.grad_clip <= 0.0 {
            return bad(format!(
                "--grad-clip must be positive, got {}",
                self.grad_clip
            ));
        }
        Ok(())
    }

    pub fn schedule(&self) -> CosineSchedule {
        CosineSchedule {
            max_lr: self.lr,
            min_lr: self.min_lr,
            warmup_steps: self.warmup_steps,
            total_steps: self.steps,
        }
    }

    pub fn tokens_per_step(&self) -> usize {
        self.batch_size * self.seq_len * self.grad_accum
    }
}

/// What a finished (or stopped) run reports.
#[derive(Clone, Debug)]
pub struct Summary {
    pub out_dir: PathBuf,
    pub steps_done: u64,
    pub final_loss: f32,
    pub final_val_loss: Option<f32>,
    pub unigram_entropy: f64,
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation: `tokens/s × flops_per_token / peak.flops` (PaLM,
    /// Chowdhery et al. 2022, appendix B), when the device's peak is known.
    pub mfu: Option<f64>,
    /// The peak MFU is measured against, or why there is none.
    pub peak: std::result::Result<MfuPeak, String>,
}

/// The peak FLOP/s that MFU divides by, and where it comes from.
#[derive(Clone, Debug)]
pub struct MfuPeak {
    pub flops: f64,
    /// E.g. "fp32 vector peak of NVIDIA H200 (brrr_perf::specs)".
    pub what: String,
}

/// The peak a run on `info`'s device is measured against. The model trains in f32 with
/// TF32 off, so on a GPU this is the f32 *vector* peak (not the tensor-core one), the same
/// rule PyTorch's defaults give the reference run in `bench/torch_reference.py`.
pub fn mfu_peak(info: &brrr_backend::BackendInfo) -> std::result::Result<MfuPeak, String> {
    if info.name == "cpu" {
        let p = brrr_perf::machine::cpu_fp32_peak();
        return Ok(MfuPeak {
            flops: p.flops,
            what: "fp32 peak of this CPU at its nominal clock (brrr_perf::machine)".into(),
        });
    }
    // `BackendInfo::device` is "NAME (details)"; only the name identifies the GPU.
    let name = info.device.split(" (").next().unwrap_or_default();
    let gpu = brrr_perf::specs::gpu_for_device(name).ok_or_else(|| {
        format!("no peak known for \"{name}\" (brrr_perf::specs has no such GPU)")
    })?;
    let flops = gpu
        .peak(brrr_perf::DType::F32, brrr_perf::Unit::Vector)
        .map_err(|e| e.to_string())?;
    Ok(MfuPeak {
        flops,
        what: format!("fp32 vector peak of {} (brrr_perf::specs)", gpu.name),
    })
}

/// The `corpus` value of a run on generated data.
pub const SYNTHETIC: &str = "synthetic";

/// 4 MiB of uniformly random printable ASCII (95 symbols) from `seed`.
fn synthetic_corpus(seed: u64) -> Result<Corpus> {
    use rand::Rng;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED);
    let text: String = (0..4 << 20)
        .map(|_| char::from(rng.random_range(32u8..127)))
        .collect();
    Corpus::from_text(SYNTHETIC, text)
}

pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";
pub const CONFIG_FILE: &str = "config.toml";
pub const METRICS_FILE: &str = "metrics.csv";
pub const PLOT_FILE: &str = "loss.svg";

/// Runs `brrr train`.
pub fn run(args: &TrainArgs) -> Result<Summary> {
    match args.backend {
        BackendKind::Cpu => run_with(CpuBackend::new(), args),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => run_with(brrr_cuda::CudaBackend::new(0)?, args),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => run_with(brrr_wgpu::WgpuBackend::new_blocking()?, args),
        #[allow(unreachable_patterns)]
        other => Err(not_built(other)),
    }
}

/// The error for a backend this binary was compiled without.
pub fn not_built(kind: BackendKind) -> Error {
    Error::NoDevice {
        backend: kind.name(),
        reason: format!(
            "this brrr binary was built without the {0} backend; rebuild with \
             `cargo run --release --features {0} -- ...`",
            kind.name()
        ),
    }
}

/// Reads `config.toml` from a run directory.
pub fn read_config(dir: &Path) -> Result<TrainConfig> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(format!("{}: reading run config", path.display()), e))?;
    let cfg: TrainConfig =
        toml::from_str(&text).map_err(|e| Error::file(&path, format!("invalid config: {e}")))?;
    cfg.validate()?;
    Ok(cfg)
}

/// The training loop on backend `B`.
pub fn run_with<B: Backend>(backend: B, args: &TrainArgs) -> Result<Summary> {
    // ---- configuration: fresh, or the saved one when resuming ------------------------
    let (cfg, resume_ckpt, out_dir) = match &args.resume {
        Some(dir) => {
            let mut cfg = read_config(dir)?;
            // The one thing a resume may change is how far to go.
            cfg.steps = args.steps;
            cfg.validate()?;
            let ck = ckpt::load(dir.join(CHECKPOINT_FILE))?;
            let out = args.out.clone().unwrap_or_else(|| dir.clone());
            if out != *dir {
                // Continue in a new directory: it starts from the old run's files.
                std::fs::create_dir_all(&out).map_err(|e| {
                    Error::io(format!("{}: creating output directory", out.display()), e)
                })?;
                for f in [CONFIG_FILE, METRICS_FILE] {
                    std::fs::copy(dir.join(f), out.join(f))
                        .map_err(|e| Error::io(format!("copying {f} from {}", dir.display()), e))?;
                }
            }
            (cfg, Some(ck), out)
        }
        None => (
            TrainConfig::from_args(args)?,
            None,
            args.out
                .clone()
                .unwrap_or_else(|| PathBuf::from("runs/train")),
        ),
    };
    std::fs::create_dir_all(&out_dir).map_err(|e| {
        Error::io(
            format!("{}: creating output directory", out_dir.display()),
            e,
        )
    })?;

    let corpus = if cfg.corpus == SYNTHETIC {
        synthetic_corpus(cfg.seed)?
    } else {
        Corpus::load(&cfg.corpus)?
    };
    let entropy = unigram_entropy_nats(corpus.tokens());

    // ---- model, optimizer, data ---------------------------------------------------------
    let mut init_rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut model = Gpt::new(&backend, cfg.model.clone(), DType::F32, &mut init_rng)?;
    let mut opt = AdamW::new(AdamWConfig {
        weight_decay: cfg.weight_decay,
        ..AdamWConfig::default()
    });
    let mut batcher = Batcher::new(corpus.train(), cfg.batch_size, cfg.seq_len, cfg.seed)?;
    let val = val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches)?;
    let mut start_step = 0u64;
    if let Some(ck) = &resume_ckpt {
        if ck.meta("corpus_fingerprint")? != corpus.fingerprint() {
            return Err(Error::file(
                &cfg.corpus,
                "the corpus differs from the one this run was trained on",
            ));
        }
        start_step = parse_meta(ck, "step")?;
        restore(ck, &mut model, &mut opt)?;
        let state: RngState = ck.meta("rng")?.parse()?;
        batcher.set_state(state);
    } else {
        write_config(&out_dir, &cfg)?;
    }
    let metrics_path = out_dir.join(METRICS_FILE);
    let mut metrics = if resume_ckpt.is_some() {
        MetricsWriter::resume(&metrics_path, start_step)?
    } else {
        MetricsWriter::create(&metrics_path)?
    };

    let stop_at = args.stop_after.unwrap_or(cfg.steps).min(cfg.steps);
    let schedule = cfg.schedule();
    let flops_per_token = cfg.model.flops_per_token(cfg.seq_len);
    let n_tokens = (cfg.batch_size * cfg.seq_len) as f32;
    let dloss = 1.0 / (n_tokens * cfg.grad_accum as f32);

    let pb = progress_bar(args.quiet, start_step, cfg.steps);
    let info = backend.info();
    say(
        &pb,
        args.quiet,
        format!(
            "brrr train: {} parameters on {} ({}), {} steps of {} tokens, corpus {} ({} bytes, unigram entropy {:.3} nats)",
            model.num_params(),
            info.name,
            info.device,
            cfg.steps,
            cfg.tokens_per_step(),
            corpus.path().display(),
            corpus.len(),
            entropy
        ),
    );

    let tracer = if args.trace.is_some() {
        Tracer::new()
    } else {
        Tracer::disabled()
    };
    let mut last = (f32::NAN, None);
    let mut timed_tokens = 0usize;
    let mut timed_secs = 0.0f64;
    for step in start_step..stop_at {
        let _step_span = tracer.span("step");
        let t0 = Instant::now();
        let lr = schedule.lr(step);
        model.zero_grad()?;
        let mut loss_sum = 0.0f64;
        for _ in 0..cfg.grad_accum {
            let (ids, targets) =
                tracer.in_span("data", || upload(&backend, &batcher.next_batch()))?;
            let losses = tracer.in_span("forward", || model.forward_loss(&ids, &targets))?;
            loss_sum += tracer.in_span("read loss", || losses.mean_all()?.to_scalar_f64())?;
            tracer.in_span("backward", || model.backward(dloss))?;
        }
        let loss = (loss_sum / cfg.grad_accum as f64) as f32;
        if !loss.is_finite() {
            return Err(Error::invalid(
                "train",
                format!("loss became {loss} at step {}; lower --lr", step + 1),
            ));
        }
        let (norm, coef) = tracer.in_span("grad norm", || {
            clip_grad_norm(&model.params(), cfg.grad_clip)
        })?;
        tracer.in_span("adamw", || opt.step(model.params_mut(), lr as f32, coef))?;
        let secs = t0.elapsed().as_secs_f64();
        let tokens_per_s = cfg.tokens_per_step() as f64 / secs;
        if step > start_step {
            // The first step pays for allocation and warm caches.
            timed_tokens += cfg.tokens_per_step();
            timed_secs += secs;
        }
        let done = step + 1;
        // Evaluation depends only on the step (not on where this process stops), so an
        // interrupted and resumed run writes the same metrics as an uninterrupted one.
        let eval_now = done % cfg.eval_every == 0 || done == cfg.steps;
        let val_loss = if eval_now {
            Some(evaluate(&backend, &mut model, &val)?)
        } else {
            None
        };
        metrics.append(&Row {
            step: done,
            loss,
            val_loss,
            lr: lr as f32,
            grad_norm: norm as f32,
            tokens_per_s,
        })?;
        last = (loss, val_loss.or(last.1));
        pb.set_position(done);
        pb.set_message(format!("loss {loss:.4}  {tokens_per_s:.0} tok/s"));
        if let Some(v) = val_loss {
            say(
                &pb,
                args.quiet,
                format!(
                    "step {done:>6}  loss {loss:.4}  val {v:.4}  lr {lr:.2e}  |g| {norm:.3}  {tokens_per_s:.0} tok/s"
                ),
            );
        }
        if val_loss.is_some() || done == stop_at {
            tracer.in_span("checkpoint", || {
                save_checkpoint(&out_dir, done, &cfg, &corpus, &batcher, &model, &opt)
            })?;
            metrics::plot_csv_svg(&metrics_path, out_dir.join(PLOT_FILE))?;
        }
    }
    pb.finish_and_clear();
    if let Some(path) = &args.trace {
        tracer
            .write_chrome_trace(path)
            .map_err(|e| Error::file(path, e.to_string()))?;
    }
    let tps = if timed_secs > 0.0 {
        timed_tokens as f64 / timed_secs
    } else {
        0.0
    };
    let peak = mfu_peak(&info);
    let mfu = match &peak {
        Ok(p) if tps > 0.0 => Some(tps * flops_per_token / p.flops),
        _ => None,
    };
    Ok(Summary {
        out_dir,
        steps_done: stop_at.max(start_step),
        final_loss: last.0,
        final_val_loss: last.1,
        unigram_entropy: entropy,
        tokens_per_s: tps,
        mfu,
        peak,
    })
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

fn upload<B: Backend>(backend: &B, batch: &Batch) -> Result<(Tensor<B>, Tensor<B>)> {
    let ids = Tensor::from_u32(backend, &batch.inputs, [batch.batch, batch.seq])?;
    let targets: Vec<i32> = batch.targets.iter().map(|&t| t as i32).collect();
    let targets = Tensor::from_i32(backend, &targets, [batch.batch, batch.seq])?;
    Ok((ids, targets))
}

/// Mean loss over the fixed validation batches.
pub fn evaluate<B: Backend>(backend: &B, model: &mut Gpt<B>, val: &[Batch]) -> Result<f32> {
    let mut sum = 0.0;
    for batch in val {
        let (ids, targets) = upload(backend, batch)?;
        sum += model
            .forward_loss(&ids, &targets)?
            .mean_all()?
            .to_scalar_f64()?;
        model.clear_saved();
    }
    Ok((sum / val.len().max(1) as f64) as f32)
}

fn write_config(dir: &Path, cfg: &TrainConfig) -> Result<()> {
    let text = toml::to_string_pretty(cfg)
        .map_err(|e| Error::invalid("train", format!("serialising config: {e}")))?;
    crate::atomic::write_atomic(dir.join(CONFIG_FILE), text.as_bytes())
}

fn parse_meta<T: std::str::FromStr>(ck: &ckpt::Checkpoint, key: &str) -> Result<T> {
    let v = ck.meta(key)?;
    v.parse()
        .map_err(|_| Error::Parse(format!("checkpoint metadata {key}={v:?} is not a number")))
}

/// Saves weights, AdamW moments, the step and the sampler position.
#[allow(clippy::too_many_arguments)]
pub fn save_checkpoint<B: Backend>(
    dir: &Path,
    step: u64,
    cfg: &TrainConfig,
    corpus: &Corpus,
    batcher: &Batcher,
    model: &Gpt<B>,
    opt: &AdamW<B>,
) -> Result<()> {
    let mut tensors: Vec<NamedTensor> = Vec::new();
    let params = model.params();
    for p in &params {
        tensors.push((
            format!("model.{}", p.name),
            brrr_backend::block_on(p.value.to_host())?,
            p.value.dims().to_vec(),
        ));
    }
    for (p, (m, v)) in params.iter().zip(&opt.moments) {
        tensors.push((
            format!("adamw.m.{}", p.name),
            brrr_backend::block_on(m.to_host())?,
            m.dims().to_vec(),
        ));
        tensors.push((
            format!("adamw.v.{}", p.name),
            brrr_backend::block_on(v.to_host())?,
            v.dims().to_vec(),
        ));
    }
    let mut meta = BTreeMap::new();
    meta.insert("format".into(), "brrr-gpt-1".into());
    meta.insert("step".into(), step.to_string());
    meta.insert("adamw_step".into(), opt.step.to_string());
    meta.insert("rng".into(), batcher.state().to_string());
    meta.insert("corpus_fingerprint".into(), corpus.fingerprint());
    meta.insert("tokenizer".into(), cfg.tokenizer.clone());
    meta.insert(
        "config".into(),
        toml::to_string(cfg).map_err(|e| Error::invalid("checkpoint", e.to_string()))?,
    );
    ckpt::save(dir.join(CHECKPOINT_FILE), &tensors, &meta)
}

/// Loads weights (and, when `opt` is given, AdamW state) from a checkpoint into a
/// model of the same configuration.
pub fn restore<B: Backend>(
    ck: &ckpt::Checkpoint,
    model: &mut Gpt<B>,
    opt: &mut AdamW<B>,
) -> Result<()> {
    load_weights(ck, model)?;
    opt.step = parse_meta(ck, "adamw_step")?;
    opt.moments.clear();
    for p in model.params() {
        let m = tensor_from(
            ck,
            &format!("adamw.m.{}", p.name),
            p.value.dims(),
            p.value.backend(),
        )?;
        let v = tensor_from(
            ck,
            &format!("adamw.v.{}", p.name),
            p.value.dims(),
            p.value.backend(),
        )?;
        opt.moments.push((m, v));
    }
    Ok(())
}

/// Loads the weights of a checkpoint into a model of the same configuration.
pub fn load_weights<B: Backend>(ck: &ckpt::Checkpoint, model: &mut Gpt<B>) -> Result<()> {
    for p in model.params_mut() {
        let t = tensor_from(
            ck,
            &format!("model.{}", p.name),
            p.value.dims(),
            p.value.backend(),
        )?;
        if t.dtype() != p.value.dtype() {
            return Err(Error::DType {
                op: "load checkpoint",
                expected: p.value.dtype(),
                got: t.dtype(),
            });
        }
        p.value = t;
    }
    Ok(())
}

fn tensor_from<B: Backend>(
    ck: &ckpt::Checkpoint,
    name: &str,
    dims: &[usize],
    backend: &B,
) -> Result<Tensor<B>> {
    let (_, data, shape) = ck
        .get(name)
        .ok_or_else(|| Error::Parse(format!("checkpoint has no tensor {name:?}")))?;
    if shape.as_slice() != dims {
        return Err(Error::shape(
            "load checkpoint",
            format!("{name}: checkpoint has {shape:?}, model expects {dims:?}"),
        ));
    }
    Tensor::from_host(backend, data, shape.clone())
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
