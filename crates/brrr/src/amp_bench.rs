//! `brrr bench amp`: step time, tokens/s and memory of the same training step in f32,
//! bf16 and fp16 (`--amp`), on any backend. The model is trained on the synthetic
//! corpus (throughput does not depend on the text); the first steps are warmup.

use crate::data::synthetic_corpus;
use crate::train::{BackendKind, Preset};
use brrr_amp::{AmpConfig, AmpMode};
use brrr_backend::{Backend, Result};
use brrr_train::{Batcher, TrainConfig, Trainer, val_batches};
use std::fmt::Write;

/// `brrr bench amp`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct AmpBenchArgs {
    /// Where to run.
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: BackendKind,
    /// The model's shape [default: tiny].
    #[arg(long, value_enum)]
    pub preset: Option<Preset>,
    /// Override the preset's layer count.
    #[arg(long)]
    pub n_layer: Option<usize>,
    /// Override the preset's width (heads stay the preset's).
    #[arg(long)]
    pub n_embd: Option<usize>,
    /// Sequences per step [default: 16].
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Tokens per sequence [default: the model's context].
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// Timed steps per mode (the median step is reported).
    #[arg(long, default_value_t = 10)]
    pub steps: u64,
    /// Untimed steps before them.
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
}

/// One mode's measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct AmpBenchRow {
    /// The precision mode measured (off: f32 throughout).
    pub mode: AmpMode,
    /// Median seconds per step.
    pub step_s: f64,
    /// Tokens per second at the median step.
    pub tokens_per_s: f64,
    /// Bytes held before a step: weights (and masters), gradients, AdamW's moments.
    pub resident_bytes: u64,
    /// The peak during a step above `resident_bytes`: activations and temporaries.
    pub activation_peak_bytes: u64,
}

/// The configuration the flags describe for `mode`.
pub fn config(args: &AmpBenchArgs, mode: AmpMode) -> TrainConfig {
    let mut model = args.preset.unwrap_or(Preset::Tiny).model();
    if let Some(v) = args.n_layer {
        model.n_layer = v;
    }
    if let Some(v) = args.n_embd {
        model.n_embd = v;
    }
    let seq_len = args.seq_len.unwrap_or(model.block_size);
    TrainConfig {
        model,
        steps: args.warmup + args.steps,
        batch_size: args.batch_size,
        seq_len,
        warmup_steps: 1,
        eval_every: u64::MAX,
        eval_batches: 1,
        corpus: brrr_train::data::SYNTHETIC.into(),
        amp: AmpConfig::new(mode),
        ..TrainConfig::default()
    }
}

/// Times each mode on `backend`.
pub fn run_on<B: Backend>(backend: &B, args: &AmpBenchArgs) -> Result<Vec<AmpBenchRow>> {
    let mut rows = Vec::new();
    for mode in [AmpMode::Off, AmpMode::Bf16, AmpMode::Fp16] {
        let cfg = config(args, mode);
        let corpus = synthetic_corpus(cfg.seed)?;
        let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
        let val = val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, 1)?;
        let mut t = Trainer::new(backend, cfg.clone(), Box::new(data), val)?;
        let mut times = Vec::new();
        let (mut resident, mut act) = (0u64, 0u64);
        for i in 0..cfg.steps {
            let before = backend.memory_stats().bytes_in_use;
            let s = t.step_blocking()?;
            let peak = backend.memory_stats().peak_bytes;
            if i >= args.warmup {
                times.push(s.seconds.unwrap_or(f64::NAN));
                resident = before;
                act = act.max(peak.saturating_sub(before));
            }
        }
        times.sort_by(f64::total_cmp);
        let step_s = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
        rows.push(AmpBenchRow {
            mode,
            step_s,
            tokens_per_s: cfg.tokens_per_step() as f64 / step_s,
            resident_bytes: resident,
            activation_peak_bytes: act,
        });
    }
    Ok(rows)
}

/// The rows as a Markdown table, ratios against f32.
pub fn table(rows: &[AmpBenchRow]) -> String {
    let base = rows.first().cloned();
    let mut s = String::from(
        "| mode | step (ms) | tokens/s | × f32 | resident (MiB) | activation peak (MiB) | × f32 |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    for r in rows {
        let (sp, mem) = match &base {
            Some(b) => (
                r.tokens_per_s / b.tokens_per_s,
                r.activation_peak_bytes as f64 / b.activation_peak_bytes.max(1) as f64,
            ),
            None => (f64::NAN, f64::NAN),
        };
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.0} | {sp:.2} | {:.2} | {:.2} | {mem:.2} |",
            r.mode.name(),
            1e3 * r.step_s,
            r.tokens_per_s,
            mib(r.resident_bytes),
            mib(r.activation_peak_bytes)
        );
    }
    s
}
