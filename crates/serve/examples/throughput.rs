//! Why serving batches: the same 32 requests decoded one at a time and with continuous
//! batching, on the CPU, plus the decoder without a KV cache (the whole context
//! recomputed for every token) for a few of them.
//!
//! `cargo run --release -p brrr-serve --example throughput`
//!
//! Decoding one token reads every weight once; one request at a time, that read buys
//! one token, and the step is memory-bound. A batch of 32 decodes turns the weight
//! matrix-vector products into matrix-matrix products that read the weights once for
//! 32 tokens, so until the products become compute-bound the step costs about the same
//! and yields 32 times the tokens.

use brrr_cpu::CpuBackend;
use brrr_nn::{DType, Gpt, GptConfig, Module, Tensor};
use brrr_serve::{EngineConfig, LlmEngine, SamplingParams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

const REQUESTS: usize = 32;
const PROMPT: usize = 32;
const OUTPUT: usize = 64;

fn model() -> brrr_backend::Result<Gpt<CpuBackend>> {
    let config = GptConfig {
        vocab_size: 256,
        block_size: 256,
        n_layer: 4,
        n_head: 8,
        n_embd: 512,
    };
    Gpt::new(
        &CpuBackend::new(),
        config,
        DType::F32,
        &mut ChaCha8Rng::seed_from_u64(0),
    )
}

fn prompts() -> Vec<Vec<u32>> {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    (0..REQUESTS)
        .map(|_| (0..PROMPT).map(|_| rng.random_range(0..256)).collect())
        .collect()
}

/// Tokens per second of `prompts` through an engine running `max_seqs` at once.
fn engine_rate(prompts: &[Vec<u32>], max_seqs: usize) -> brrr_backend::Result<(f64, u64)> {
    let cfg = EngineConfig {
        block_size: 16,
        num_blocks: REQUESTS * (PROMPT + OUTPUT).div_ceil(16),
        max_batch_tokens: 512,
        max_seqs,
        vocab_limit: None,
        prefix_caching: true,
    };
    let mut engine = LlmEngine::new(model()?, cfg)?;
    let t0 = Instant::now();
    let out = engine.generate(prompts, &SamplingParams::greedy(OUTPUT))?;
    let secs = t0.elapsed().as_secs_f64();
    let tokens: usize = out.iter().map(Vec::len).sum();
    Ok((tokens as f64 / secs, engine.stats().steps))
}

/// Tokens per second of greedy decoding that recomputes the whole context each token.
fn recompute_rate(prompts: &[Vec<u32>]) -> brrr_backend::Result<f64> {
    let backend = CpuBackend::new();
    let mut m = model()?;
    let t0 = Instant::now();
    for p in prompts {
        let mut ids = p.clone();
        for _ in 0..OUTPUT {
            let x = Tensor::from_u32(&backend, &ids, [1, ids.len()])?;
            let logits = m.forward(&x)?.to_vec_f32()?;
            m.clear_saved();
            let last = &logits[(ids.len() - 1) * 256..];
            let best = (0..256).fold(0, |b, i| if last[i] > last[b] { i } else { b });
            ids.push(best as u32);
        }
    }
    Ok((prompts.len() * OUTPUT) as f64 / t0.elapsed().as_secs_f64())
}

fn main() -> brrr_backend::Result<()> {
    let prompts = prompts();
    let (one, one_steps) = engine_rate(&prompts, 1)?;
    let (batched, batched_steps) = engine_rate(&prompts, REQUESTS)?;
    let recompute = recompute_rate(&prompts[..2])?;
    println!(
        "{REQUESTS} requests, {PROMPT}-token prompts, {OUTPUT} tokens each (greedy), \
         GPT 4 × 512, CPU\n"
    );
    println!("| decoder | steps | tokens/s | vs one at a time |");
    println!("|---|---:|---:|---:|");
    println!(
        "| no KV cache, one at a time (2 requests) | | {recompute:.0} | {:.2}× |",
        recompute / one
    );
    println!("| KV cache, one at a time | {one_steps} | {one:.0} | 1.00× |");
    println!(
        "| KV cache, continuous batching of {REQUESTS} | {batched_steps} | {batched:.0} | {:.2}× |",
        batched / one
    );
    Ok(())
}
