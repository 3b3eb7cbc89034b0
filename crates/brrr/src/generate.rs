//! `brrr generate`: continuations of one or more prompts from a trained run, decoded
//! together by brrr-serve's engine (a paged KV cache and continuous batching), with
//! what the engine did.

use crate::data::ByteTokenizer;
use crate::sample::load_model;
use brrr_backend::{Error, Result};
use brrr_cpu::CpuBackend;
use brrr_nn::Gpt;
use brrr_serve::{
    EngineConfig, EngineStats, LlmEngine, SamplingParams, SpeculativeDecoder, SpeculativeStats,
    WeightFormat, quantize_weights,
};
use brrr_train::TrainConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Flags of `brrr generate`.
#[derive(Clone, Debug, clap::Args)]
pub struct GenerateArgs {
    /// A run directory written by `brrr train`.
    pub dir: PathBuf,
    /// A prompt; give the flag several times to decode several prompts together.
    #[arg(long = "prompt")]
    pub prompts: Vec<String>,
    /// Tokens (bytes) to generate per prompt, at most (the model's context also ends a
    /// request).
    #[arg(long, default_value_t = 200)]
    pub max_tokens: usize,
    /// Softmax temperature; 0 picks the most likely token.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Sample only among the k most likely tokens (0 = all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Sample only among the most likely tokens whose probabilities add up to p.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Seed of the first prompt's random stream (the i-th prompt's is seed + i).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The KV cache, the step budget and the weights' format.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Speculative decoding: a smaller run trained on the same tokenizer proposes
    /// tokens that this run verifies (prompts are then decoded one at a time, each
    /// model with a contiguous cache of its context, so the paged cache's flags are
    /// refused with it).
    #[arg(long, conflicts_with_all = ["block_size", "kv_blocks", "max_batch_tokens", "no_prefix_caching"])]
    pub draft: Option<PathBuf>,
    /// Tokens the draft proposes per step (with `--draft`).
    #[arg(long, default_value_t = 4, requires = "draft")]
    pub speculate: usize,
}

/// The serving engine's flags, shared by `brrr generate` and `brrr serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct EngineArgs {
    /// Token slots per KV-cache block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// KV-cache blocks [default: enough for every request running at once to fill the
    /// model's context].
    #[arg(long)]
    pub kv_blocks: Option<usize>,
    /// Tokens one step computes at most (decodes and prompt chunks together).
    #[arg(long, default_value_t = 512)]
    pub max_batch_tokens: usize,
    /// Compute every prompt in full, even the blocks an earlier prompt with the same
    /// start already put in the KV cache (prefix caching is on by default).
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Store the linear weights as int8, int4 (groups of 32), int4-gN or fp8, and
    /// decode with exactly those values (a draft's too).
    #[arg(long)]
    pub weights: Option<WeightFormat>,
}

impl EngineArgs {
    /// The engine for a model of `context` tokens with `max_seqs` requests running.
    pub fn config(&self, context: usize, max_seqs: usize) -> EngineConfig {
        let per_request = context.div_ceil(self.block_size.max(1));
        EngineConfig {
            block_size: self.block_size,
            num_blocks: self.kv_blocks.unwrap_or(per_request * max_seqs.max(1)),
            max_batch_tokens: self.max_batch_tokens,
            max_seqs: max_seqs.max(1),
            vocab_limit: Some(ByteTokenizer::VOCAB_SIZE),
            prefix_caching: !self.no_prefix_caching,
        }
    }

    /// `model` with its linear weights in `--weights`' format, if given.
    pub fn quantize(&self, model: &mut Gpt<CpuBackend>) -> Result<()> {
        if let Some(format) = self.weights {
            quantize_weights(model, format)?;
        }
        Ok(())
    }
}

/// What `brrr generate` produced.
pub struct Generated {
    /// Each prompt followed by its continuation.
    pub texts: Vec<String>,
    /// The engine's counters (zero with a draft).
    pub stats: EngineStats,
    /// Speculative decoding's counters, with a draft.
    pub speculative: Option<SpeculativeStats>,
    /// Requests preempted (their cache freed and recomputed) for lack of blocks.
    pub preemptions: u64,
    /// Wall time of the decoding.
    pub seconds: f64,
}

impl Generated {
    /// One line on what the engine did.
    pub fn summary(&self) -> String {
        if let Some(s) = &self.speculative {
            return format!(
                "{} prompt(s): {} tokens generated in {} target forwards ({:.2} tokens each) \
                 and {} draft forwards; {:.0}% of proposals accepted (the distributions \
                 predict {:.0}%), {:.1} s, {:.0} tokens/s",
                self.texts.len(),
                s.generated,
                s.target_forwards,
                s.tokens_per_step(),
                s.draft_forwards,
                100.0 * s.acceptance_rate(),
                100.0 * s.predicted_acceptance(),
                self.seconds,
                s.generated as f64 / self.seconds.max(1e-9),
            );
        }
        format!(
            "{} prompt(s): {} tokens generated in {} steps ({} tokens computed), {:.1} s, \
             {:.0} tokens/s, {} preemption(s)",
            self.texts.len(),
            self.stats.tokens_generated,
            self.stats.steps,
            self.stats.tokens_computed,
            self.seconds,
            self.stats.tokens_generated as f64 / self.seconds.max(1e-9),
            self.preemptions
        )
    }
}

/// Runs `brrr generate`.
pub fn run(args: &GenerateArgs) -> Result<Generated> {
    if args.max_tokens > crate::sample::MAX_SAMPLE_TOKENS {
        return Err(Error::invalid(
            "generate",
            format!("--max-tokens {} is too many", args.max_tokens),
        ));
    }
    let (mut model, cfg) = load_model(&args.dir, &mut ChaCha8Rng::seed_from_u64(0))?;
    args.engine.quantize(&mut model)?;
    let tok = ByteTokenizer;
    let prompts: Vec<Vec<u32>> = match args.prompts.is_empty() {
        true => vec![vec![u32::from(b'\n')]],
        false => args
            .prompts
            .iter()
            .map(|p| match tok.encode(p) {
                ids if ids.is_empty() => vec![u32::from(b'\n')],
                ids => ids,
            })
            .collect(),
    };
    let params = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        max_tokens: args.max_tokens,
        stop_tokens: Vec::new(),
        seed: args.seed,
    };
    let t0 = Instant::now();
    let (outputs, stats, speculative, preemptions) = match &args.draft {
        Some(draft) => {
            let (outputs, s) = speculative(model, draft, args, &prompts, &params)?;
            (outputs, EngineStats::default(), Some(s), 0)
        }
        None => {
            let (outputs, stats, preemptions) = batched(model, &cfg, args, &prompts, &params)?;
            (outputs, stats, None, preemptions)
        }
    };
    let seconds = t0.elapsed().as_secs_f64();
    let texts = prompts
        .iter()
        .zip(&outputs)
        .map(|(p, o)| {
            let mut text = tok.decode(p);
            text.push_str(&tok.decode(o));
            text
        })
        .collect();
    Ok(Generated {
        texts,
        stats,
        speculative,
        preemptions,
        seconds,
    })
}

/// The prompts one at a time through a [`SpeculativeDecoder`] with the run at `draft`.
fn speculative(
    target: Gpt<CpuBackend>,
    draft: &Path,
    args: &GenerateArgs,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
) -> Result<(Vec<Vec<u32>>, SpeculativeStats)> {
    let (mut draft, _) = load_model(draft, &mut ChaCha8Rng::seed_from_u64(0))?;
    args.engine.quantize(&mut draft)?;
    let vocab = Some(ByteTokenizer::VOCAB_SIZE);
    let mut dec = SpeculativeDecoder::new(target, draft, args.speculate, vocab)?;
    let outputs = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let seed = params.seed.wrapping_add(i as u64);
            dec.generate(
                p,
                &SamplingParams {
                    seed,
                    ..params.clone()
                },
            )
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((outputs, dec.stats()))
}

/// The prompts together through the serving engine: outputs, counters, preemptions.
fn batched(
    model: Gpt<CpuBackend>,
    cfg: &TrainConfig,
    args: &GenerateArgs,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
) -> Result<(Vec<Vec<u32>>, EngineStats, u64)> {
    let config = args.engine.config(cfg.model.block_size, prompts.len());
    let mut engine = LlmEngine::new(model, config)?;
    let outputs = engine.generate(prompts, params)?;
    let preemptions = engine.scheduler().preemptions;
    Ok((outputs, engine.stats(), preemptions))
}
