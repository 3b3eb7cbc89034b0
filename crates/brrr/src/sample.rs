//! `brrr sample`: text from a trained run.

use crate::ckpt;
use crate::data::ByteTokenizer;
use crate::train::{CHECKPOINT_FILE, load_weights, read_config};
use brrr_backend::{DType, Error, Result};
use brrr_cpu::CpuBackend;
use brrr_nn::{Gpt, Module};
use brrr_tensor::Tensor;
use brrr_train::{EngineKind, TrainConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};

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
    // The model's initialisation draws from the sampling stream first (every weight is
    // then overwritten): kept so that a seed gives the text it always gave.
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let (mut model, cfg) = load_model(&args.dir, &mut rng)?;
    let backend = CpuBackend::new();
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

/// The model a run in `dir` saved, in f32 on the CPU (a LoRA run's adapters merged into
/// its weights), and the run's configuration: its one checkpoint, or a data-parallel or pipeline run's shards put together in memory
/// (`brrr ckpt consolidate` writes the same state to a file). `rng` fills the weights
/// before the checkpoint overwrites every one of them.
pub fn load_model(dir: &Path, rng: &mut impl Rng) -> Result<(Gpt<CpuBackend>, TrainConfig)> {
    let cfg = read_config(dir)?;
    let backend = CpuBackend::new();
    let mut model = Gpt::new(&backend, cfg.model.clone(), DType::F32, rng)?;
    // A LoRA run saved its adapters beside the frozen weights: load both, then fold the
    // adapters in, so the model is a plain one. Their initial values come from a
    // stream of their own, so `rng` goes on as it does for a run without adapters.
    if let Some(lora) = cfg.lora() {
        let mut fill = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0);
        brrr_nn::lora::add_adapters(&mut model, lora, &mut fill)?;
    }
    let whole = dir.join(CHECKPOINT_FILE);
    match cfg.layout.engine() {
        EngineKind::DataParallel | EngineKind::Pipeline if !whole.exists() => {
            let (state, _, _) = crate::ckpt_cmd::consolidated(dir, &cfg, None)?;
            brrr_train::load_params(&backend, &mut model, &state)?;
        }
        _ => load_weights(&ckpt::load(whole)?, &mut model)?,
    }
    brrr_nn::lora::merge_adapters(&mut model)?;
    Ok((model, cfg))
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
/// (`top_k = 0`: all); `temperature = 0` picks the largest logit: brrr-serve's
/// [`brrr_serve::sample_token`] without a top-p cut, the sampler a served request uses.
///
/// Errors (rather than panicking) on empty or non-finite logits, or a negative or NaN
/// temperature: there is no distribution to sample from.
pub fn pick(logits: &[f32], temperature: f32, top_k: usize, rng: &mut impl Rng) -> Result<usize> {
    brrr_serve::sample_token(logits, temperature, top_k, 1.0, rng)
        .map_err(|e| Error::invalid("sample", e))
}
