//! `brrr sample`: text from a trained run.

use crate::ckpt;
use crate::data::ByteTokenizer;
use crate::train::{CHECKPOINT_FILE, load_weights, read_config};
use brrr_backend::{DType, Error, Result};
use brrr_cpu::CpuBackend;
use brrr_nn::{Gpt, Module};
use brrr_tensor::Tensor;
use brrr_train::EngineKind;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;

/// Flags of `brrr sample`.
#[derive(Clone, Debug, clap::Args)]
pub struct SampleArgs {
    /// A run directory written by `brrr train`.
    pub dir: PathBuf,
    /// Text to continue.
    #[arg(long, default_value = "\n")]
    pub prompt: String,
    /// Tokens (bytes) to generate, at most 1048576.
    #[arg(long, default_value_t = 400)]
    pub tokens: usize,
    /// Softmax temperature; lower is more conservative. 0 picks the most likely token.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Sample only among the k most likely tokens (0 = all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Seed of the sampling random stream.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Most tokens one `brrr sample` generates: each is a forward pass over up to the whole
/// context on the CPU, so a million already takes hours; more is a typo, not a request.
pub const MAX_SAMPLE_TOKENS: usize = 1 << 20;

/// Generates text; returns the prompt followed by the continuation.
pub fn run(args: &SampleArgs) -> Result<String> {
    if !(args.temperature >= 0.0 && args.temperature.is_finite()) {
        return Err(Error::invalid(
            "sample",
            format!("--temperature must be >= 0, got {}", args.temperature),
        ));
    }
    if args.tokens > MAX_SAMPLE_TOKENS {
        return Err(Error::invalid(
            "sample",
            format!(
                "--tokens {} is more than the {MAX_SAMPLE_TOKENS} one run generates",
                args.tokens
            ),
        ));
    }
    let cfg = read_config(&args.dir)?;
    let backend = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut model = Gpt::new(&backend, cfg.model.clone(), DType::F32, &mut rng)?;
    let whole = args.dir.join(CHECKPOINT_FILE);
    match cfg.layout.engine() {
        // A data-parallel or pipeline run saved shards: put them together in memory
        // (`brrr ckpt consolidate` writes the same state to a file).
        EngineKind::DataParallel | EngineKind::Pipeline if !whole.exists() => {
            let (state, _, _) = crate::ckpt_cmd::consolidated(&args.dir, &cfg, None)?;
            brrr_train::load_params(&backend, &mut model, &state)?;
        }
        _ => load_weights(&ckpt::load(whole)?, &mut model)?,
    }
    let tok = ByteTokenizer;
    let mut ids = tok.encode(&args.prompt);
    if ids.is_empty() {
        ids.push(u32::from(b'\n'));
    }
    let prompt_len = ids.len();
    for _ in 0..args.tokens {
        let ctx = &ids[ids.len().saturating_sub(cfg.model.block_size)..];
        let x = Tensor::from_u32(&backend, ctx, [1, ctx.len()])?;
        let logits = model.forward(&x)?;
        model.clear_saved();
        let v = cfg.model.vocab_size;
        let all = logits.to_vec_f32()?;
        // Only the byte range is meaningful; padded vocabulary rows are never targets.
        let last = &all[(ctx.len() - 1) * v..(ctx.len() - 1) * v + ByteTokenizer::VOCAB_SIZE];
        if last.iter().any(|x| !x.is_finite()) {
            return Err(non_finite_logits(&mut model, ids.len()));
        }
        ids.push(pick(last, args.temperature, args.top_k, &mut rng)? as u32);
    }
    let mut text = tok.decode(&ids[..prompt_len]);
    text.push_str(&tok.decode(&ids[prompt_len..]));
    Ok(text)
}

/// The error for NaN/inf logits at `position`, naming the first checkpoint weight that is
/// not finite (the usual cause: a run that diverged and saved its NaNs).
fn non_finite_logits(model: &mut Gpt<CpuBackend>, position: usize) -> Error {
    let culprit = model.params_mut().into_iter().find_map(|p| {
        let values = p.value.to_vec_f32().ok()?;
        let bad = values.iter().position(|x| !x.is_finite())?;
        Some(format!(
            "the checkpoint's weights are not finite: model.{}[{bad}] = {}",
            p.name, values[bad]
        ))
    });
    Error::invalid(
        "sample",
        format!(
            "non-finite logits at position {position}; {}",
            culprit.unwrap_or_else(|| {
                "every weight is finite, so the forward pass overflowed".to_string()
            })
        ),
    )
}

/// Samples an index from `softmax(logits / temperature)` restricted to the top `k`
/// (`top_k = 0`: all); `temperature = 0` picks the largest logit.
///
/// Errors (rather than panicking) on empty or non-finite logits, or a negative or NaN
/// temperature: there is no distribution to sample from.
pub fn pick(logits: &[f32], temperature: f32, top_k: usize, rng: &mut impl Rng) -> Result<usize> {
    if logits.is_empty() || logits.iter().any(|x| !x.is_finite()) {
        return Err(Error::invalid(
            "sample",
            "logits are empty or not finite: no distribution to sample from",
        ));
    }
    if !(temperature >= 0.0 && temperature.is_finite()) {
        return Err(Error::invalid(
            "sample",
            format!("temperature must be finite and >= 0, got {temperature}"),
        ));
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if temperature == 0.0 {
        return Ok(order[0]);
    }
    let k = if top_k == 0 {
        logits.len()
    } else {
        top_k.min(logits.len())
    };
    let max = logits[order[0]];
    let weights: Vec<f64> = order[..k]
        .iter()
        .map(|&i| f64::from((logits[i] - max) / temperature).exp())
        .collect();
    // The largest logit has weight exp(0) = 1, so total >= 1 and the range is never empty.
    let total: f64 = weights.iter().sum();
    let mut r = rng.random_range(0.0..total);
    for (w, &i) in weights.iter().zip(&order) {
        if r < *w {
            return Ok(i);
        }
        r -= w;
    }
    Ok(order[k - 1])
}
