//! `brrr bench quant`: a trained run's validation perplexity with its linear weights
//! stored in each weight-only format (brrr-serve's `quantize_weights`), next to the
//! weights' bytes, in one table against the unquantized model.

use crate::data::DEFAULT_CORPUS;
use crate::sample::load_model;
use brrr_backend::{Error, Result};
use brrr_cpu::CpuBackend;
use brrr_nn::{Gpt, Module, Tensor};
use brrr_serve::{QuantReport, WeightFormat, quantize_weights};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// Flags of `brrr bench quant`.
#[derive(Clone, Debug, clap::Args)]
pub struct QuantBenchArgs {
    /// A run directory written by `brrr train`.
    pub dir: PathBuf,
    /// Formats to measure: int8, int4 (groups of 32), int4-gN, fp8.
    #[arg(long, value_delimiter = ',', default_values_t = vec!["int8".to_string(), "int4-g32".to_string(), "fp8".to_string()])]
    pub formats: Vec<String>,
    /// Validation tokens scored (windows of the model's context from the corpus's last
    /// tenth, its validation split).
    #[arg(long, default_value_t = 65_536)]
    pub tokens: usize,
    /// The text to score (default: the shipped corpus).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
}

/// One format's figures.
#[derive(Clone, Debug)]
pub struct QuantRow {
    /// `None`: the model as trained.
    pub format: Option<WeightFormat>,
    /// What the quantization did (zero for the baseline).
    pub report: QuantReport,
    /// Mean validation cross-entropy, nats/token.
    pub loss: f64,
}

/// Mean cross-entropy of `model` over `text`'s windows of `ctx + 1` bytes, 8 at a time.
fn mean_loss(model: &mut Gpt<CpuBackend>, text: &[u8], ctx: usize) -> Result<f64> {
    let be = CpuBackend::new();
    let windows: Vec<&[u8]> = text.chunks_exact(ctx + 1).collect();
    let (mut sum, mut n) = (0.0f64, 0usize);
    for batch in windows.chunks(8) {
        let ids: Vec<u32> = batch
            .iter()
            .flat_map(|w| w[..ctx].iter().map(|&b| u32::from(b)))
            .collect();
        let targets: Vec<i32> = batch
            .iter()
            .flat_map(|w| w[1..].iter().map(|&b| i32::from(b)))
            .collect();
        let shape = [batch.len(), ctx];
        let losses = model.forward_loss(
            &Tensor::from_u32(&be, &ids, shape)?,
            &Tensor::from_i32(&be, &targets, shape)?,
        );
        model.clear_saved();
        let losses = losses?.to_vec_f32()?;
        sum += losses.iter().map(|&l| f64::from(l)).sum::<f64>();
        n += losses.len();
    }
    Ok(sum / n.max(1) as f64)
}

fn validation(corpus: &Path, tokens: usize, ctx: usize) -> Result<Vec<u8>> {
    let text =
        std::fs::read(corpus).map_err(|e| Error::io(format!("reading {}", corpus.display()), e))?;
    let val = &text[text.len() * 9 / 10..];
    let windows = tokens.div_ceil(ctx).min(val.len() / (ctx + 1));
    if windows == 0 {
        return Err(Error::invalid(
            "bench quant",
            format!(
                "the validation tenth of {} has no window of {} bytes",
                corpus.display(),
                ctx + 1
            ),
        ));
    }
    Ok(val[..windows * (ctx + 1)].to_vec())
}

/// Runs `brrr bench quant`: the baseline, then each format.
pub fn run(args: &QuantBenchArgs, progress: &mut dyn FnMut(&str)) -> Result<Vec<QuantRow>> {
    let formats = args
        .formats
        .iter()
        .map(|f| {
            f.parse::<WeightFormat>()
                .map_err(|e| Error::invalid("bench quant", e))
        })
        .collect::<Result<Vec<_>>>()?;
    let corpus = args.corpus.clone().unwrap_or_else(|| DEFAULT_CORPUS.into());
    let mut rows = Vec::new();
    for format in std::iter::once(None).chain(formats.into_iter().map(Some)) {
        progress(&format.map_or("the model as trained".into(), |f| f.to_string()));
        let (mut model, cfg) = load_model(&args.dir, &mut ChaCha8Rng::seed_from_u64(0))?;
        let text = validation(&corpus, args.tokens, cfg.model.block_size)?;
        let report = match format {
            Some(f) => quantize_weights(&mut model, f)?,
            None => QuantReport::default(),
        };
        let loss = mean_loss(&mut model, &text, cfg.model.block_size)?;
        rows.push(QuantRow {
            format,
            report,
            loss,
        });
    }
    Ok(rows)
}

/// The table: bytes of the linear weights, loss and perplexity against the baseline.
pub fn table(rows: &[QuantRow]) -> String {
    let Some(base) = rows.first() else {
        return String::new();
    };
    let f32_bytes = rows
        .iter()
        .map(|r| r.report.bytes_before)
        .max()
        .unwrap_or(0);
    let mut out = String::from(
        "| weights | linear-weight bytes | of f32 | largest change | val loss | perplexity | vs f32 |\n\
         |:--|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let (name, bytes) = match r.format {
            Some(f) => (f.to_string(), r.report.bytes_after),
            None => ("f32 (as trained)".to_string(), f32_bytes),
        };
        let _ = writeln!(
            out,
            "| {name} | {bytes} | {:.3} | {:.2e} | {:.4} | {:.3} | {:+.2}% |",
            bytes as f64 / f32_bytes.max(1) as f64,
            r.report.max_abs_error,
            r.loss,
            r.loss.exp(),
            100.0 * ((r.loss - base.loss).exp() - 1.0)
        );
    }
    out
}
