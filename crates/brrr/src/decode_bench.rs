//! `brrr bench decode`: the serving engine's decode speed at several batch sizes on any
//! backend, next to the bound memory bandwidth sets.
//!
//! Each batch size gets a fresh [`LlmEngine`] over a model of a preset's shape with
//! random weights (speed does not depend on their values), `b` prompts of random tokens,
//! greedy sampling. The prompts' prefill is timed alone; then, after a few untimed decode
//! steps (a GPU compiles and allocates on first use), `new_tokens` steps in which every
//! request decodes one token. Each step ends with the logits on the host, so a step's
//! wall time is the device's time plus sampling.
//!
//! A decode step reads every weight once and every request's keys and values
//! ([`brrr_perf::serve::decode_step`]); at the device's memory bandwidth that sets a
//! floor on the step's time, and so a ceiling on tokens/s that rises with the batch
//! until compute takes over. The table shows both and the bandwidth the step achieved.

use crate::train::{BackendKind, Preset};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_nn::{Gpt, GptConfig};
use brrr_perf::specs::GpuSpec;
use brrr_serve::{EngineConfig, LlmEngine, SamplingParams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt::Write as _;
use std::time::Instant;

/// `brrr bench decode`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct DecodeBenchArgs {
    /// Where to run.
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: BackendKind,
    /// The model's shape [default: tiny]; weights are random.
    #[arg(long, value_enum)]
    pub preset: Option<Preset>,
    /// The weights' and the KV cache's dtype: f32 or bf16.
    #[arg(long, default_value = "f32", value_parser = parse_dtype)]
    pub dtype: DType,
    /// Requests decoding together, one engine per value.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 8, 64])]
    pub batches: Vec<usize>,
    /// Tokens in each prompt.
    #[arg(long, default_value_t = 64)]
    pub prompt_len: usize,
    /// Timed decode steps per batch size.
    #[arg(long, default_value_t = 32)]
    pub new_tokens: usize,
    /// Untimed decode steps before them.
    #[arg(long, default_value_t = 4)]
    pub warmup: usize,
    /// The GPU whose bandwidth bounds the steps (a `brrr estimate` name) [default: the
    /// device's own, by its driver's name; this machine's measured bandwidth on the CPU].
    #[arg(long)]
    pub gpu: Option<String>,
}

fn parse_dtype(s: &str) -> std::result::Result<DType, String> {
    match s {
        "f32" | "fp32" => Ok(DType::F32),
        "bf16" => Ok(DType::BF16),
        other => Err(format!("unknown dtype {other:?}: f32 or bf16")),
    }
}

/// One batch size's measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeRow {
    /// Requests decoding together.
    pub batch: usize,
    /// Seconds until every request had its first token (the prompts' prefill, in one
    /// or more forwards).
    pub prefill_s: f64,
    /// Median seconds of one decode step.
    pub step_s: f64,
    /// Generated tokens per second at the median step: `batch / step_s`.
    pub tokens_per_s: f64,
    /// Bytes one step reads at the timed steps' mean context (weights and caches).
    pub bytes_per_step: f64,
    /// The bandwidth bound's tokens/s ([`brrr_perf::serve::decode_step`]).
    pub bound_tokens_per_s: f64,
    /// Whether memory (rather than compute) sets that bound.
    pub memory_bound: bool,
}

/// What `brrr bench decode` measured.
#[derive(Clone, Debug)]
pub struct DecodeBench {
    /// The device as its backend names it.
    pub device: String,
    /// The spec whose bandwidth and peak bound the steps.
    pub bound_by: String,
    /// Memory bandwidth of that spec, bytes/s.
    pub bandwidth: f64,
    /// The model's parameters.
    pub params: usize,
    /// Weights' and cache's dtype.
    pub dtype: DType,
    /// One row per batch size.
    pub rows: Vec<DecodeRow>,
}

/// Runs the benchmark on `backend`; `progress` hears each batch size before it runs.
pub fn run_on<B: Backend>(
    backend: &B,
    args: &DecodeBenchArgs,
    progress: &mut dyn FnMut(&str),
) -> Result<DecodeBench> {
    check(args)?;
    let model = args.preset.unwrap_or(Preset::Tiny).model();
    let info = backend.info();
    let gpu = bound_spec(&info, args.gpu.as_deref())?;
    // A CPU computes 16-bit values in f32 (and publishes no bf16 peak); a GPU's tensor
    // cores take bf16.
    let compute = match (info.name, args.dtype) {
        ("cpu", _) | (_, DType::F32) => brrr_perf::DType::F32,
        _ => brrr_perf::DType::Bf16,
    };
    let mut rows = Vec::new();
    for &b in &args.batches {
        progress(&format!("batch {b}"));
        rows.push(one_batch(backend, &model, args, (&gpu, compute), b)?);
    }
    Ok(DecodeBench {
        device: info.device,
        bound_by: gpu.name.clone(),
        bandwidth: gpu.memory_bandwidth,
        params: model.num_params(),
        dtype: args.dtype,
        rows,
    })
}

fn check(args: &DecodeBenchArgs) -> Result<()> {
    let bad = |what: &str| Err(Error::invalid("bench decode", what.to_string()));
    if args.batches.is_empty() || args.batches.contains(&0) {
        return bad("--batches needs sizes of at least 1");
    }
    if args.prompt_len == 0 || args.new_tokens == 0 {
        return bad("--prompt-len and --new-tokens must be at least 1");
    }
    Ok(())
}

/// The spec that bounds the steps: `--gpu`, else the GPU the driver names, else (on the
/// CPU) this machine with its bandwidth measured now.
fn bound_spec(info: &brrr_backend::BackendInfo, named: Option<&str>) -> Result<GpuSpec> {
    let perf = |e: brrr_perf::PerfError| Error::invalid("bench decode", e.to_string());
    if let Some(name) = named {
        return brrr_perf::specs::gpu(name).map_err(perf);
    }
    if info.name == "cpu" {
        return Ok(brrr_perf::specs::this_machine());
    }
    let name = info.device.split(" (").next().unwrap_or_default();
    brrr_perf::specs::gpu_for_device(name).ok_or_else(|| {
        Error::invalid(
            "bench decode",
            format!("no bandwidth known for \"{name}\": name a GPU with --gpu (e.g. h100)"),
        )
    })
}

/// One engine, `b` requests: the prefill, then the timed decode steps.
fn one_batch<B: Backend>(
    backend: &B,
    model_cfg: &GptConfig,
    args: &DecodeBenchArgs,
    (gpu, compute): (&GpuSpec, brrr_perf::DType),
    b: usize,
) -> Result<DecodeRow> {
    // The prompts take `prefill_steps` forwards at most; a request whose prompt went in
    // the first one decodes in each later one, so it may need that many extra tokens.
    let budget = (b * args.prompt_len).clamp(b, 8192);
    let prefill_steps = (b * args.prompt_len).div_ceil(budget) + 1;
    let total = args.prompt_len + prefill_steps + args.warmup + args.new_tokens;
    if total > model_cfg.block_size {
        return Err(Error::invalid(
            "bench decode",
            format!(
                "prompt ({}) + prefill steps ({prefill_steps}) + warm-up ({}) + timed tokens ({}) \
                 exceed the model's context of {}",
                args.prompt_len, args.warmup, args.new_tokens, model_cfg.block_size
            ),
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(b as u64);
    let model = Gpt::new(backend, model_cfg.clone(), args.dtype, &mut rng)?;
    let block_size = 16;
    let mut engine = LlmEngine::new(
        model,
        EngineConfig {
            block_size,
            num_blocks: b * total.div_ceil(block_size),
            max_batch_tokens: budget,
            max_seqs: b,
            vocab_limit: None,
            prefix_caching: false,
        },
    )?;
    let params = SamplingParams {
        temperature: 0.0,
        max_tokens: total - args.prompt_len,
        ..SamplingParams::default()
    };
    let vocab = model_cfg.vocab_size as u32;
    for _ in 0..b {
        let prompt = (0..args.prompt_len)
            .map(|_| rng.random_range(0..vocab))
            .collect();
        engine.add_request(prompt, params.clone())?;
    }
    // Prefill: until every request has its first token (when the prompts exceed one
    // step's token budget, the first ones already decode while the last are prefilled).
    let t0 = Instant::now();
    let mut started = std::collections::HashSet::new();
    while started.len() < b {
        let out = engine.step()?;
        if out.is_empty() {
            return Err(Error::invalid(
                "bench decode",
                "the engine scheduled nothing",
            ));
        }
        started.extend(out.iter().map(|o| o.id));
    }
    let prefill_s = t0.elapsed().as_secs_f64();
    let mut times = Vec::with_capacity(args.new_tokens);
    for i in 0..args.warmup + args.new_tokens {
        let t = Instant::now();
        let out = engine.step()?;
        if out.len() != b {
            return Err(Error::invalid(
                "bench decode",
                format!(
                    "a decode step produced {} tokens for {b} requests",
                    out.len()
                ),
            ));
        }
        if i >= args.warmup {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let step_s = times[times.len() / 2];
    // The timed steps' mean context: prompt, first token, warm-up, half the timed ones.
    let context = (args.prompt_len + 1 + args.warmup + args.new_tokens / 2) as u64;
    let bound = bound_row(model_cfg, (gpu, compute), args.dtype, context, b)?;
    Ok(DecodeRow {
        batch: b,
        prefill_s,
        step_s,
        tokens_per_s: b as f64 / step_s,
        bytes_per_step: bound.bytes,
        bound_tokens_per_s: bound.tokens_per_s,
        memory_bound: bound.memory_bound,
    })
}

/// brrr-perf's decode step for this model (GPT-2's tied embedding and learned
/// positions), weights and cache in `dtype`, products at `compute`'s peak.
fn bound_row(
    cfg: &GptConfig,
    (gpu, compute): (&GpuSpec, brrr_perf::DType),
    dtype: DType,
    context: u64,
    b: usize,
) -> Result<brrr_perf::serve::DecodeRow> {
    let t = brrr_perf::memory::TransformerConfig {
        layers: cfg.n_layer as u64,
        hidden: cfg.n_embd as u64,
        heads: cfg.n_head as u64,
        seq_len: cfg.block_size as u64,
        vocab: cfg.vocab_size as u64,
        ffn_hidden: 4 * cfg.n_embd as u64,
        tied_embeddings: true,
        learned_positions: true,
    };
    let bytes = dtype.size_in_bytes() as f64;
    let setup = brrr_perf::serve::ServeSetup {
        weight_bytes: bytes,
        kv_bytes: bytes,
        context,
        memory_fraction: 1.0,
        compute,
    };
    brrr_perf::serve::decode_step(&t, gpu, &setup, b as u64)
        .map_err(|e| Error::invalid("bench decode", e.to_string()))
}

/// The measurements as a header line and a Markdown table.
pub fn table(d: &DecodeBench) -> String {
    let mut s = format!(
        "decode on {}: {:.1}M parameters in {}, bound by {} ({:.0} GB/s)\n\n",
        d.device,
        d.params as f64 / 1e6,
        d.dtype,
        d.bound_by,
        d.bandwidth / 1e9
    );
    s.push_str(
        "| batch | prefill (ms) | step (ms) | tokens/s | bound tokens/s | × bound | GB/s achieved | bound by |\n\
         |---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in &d.rows {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.2} | {:.0} | {:.0} | {:.2} | {:.0} | {} |",
            r.batch,
            1e3 * r.prefill_s,
            1e3 * r.step_s,
            r.tokens_per_s,
            r.bound_tokens_per_s,
            r.tokens_per_s / r.bound_tokens_per_s,
            r.bytes_per_step / r.step_s / 1e9,
            if r.memory_bound { "memory" } else { "compute" },
        );
    }
    s
}
