//! # brrr-serve
//!
//! Serving a trained brrr GPT: a paged KV cache, continuous batching with chunked
//! prefill, and sampling, in the shape of nano-vllm (a scheduler, a block manager, a
//! model runner) and small enough to read in one sitting.
//!
//! - [`BlockAllocator`], [`BlockTable`]: the cache's memory as fixed-size blocks with a
//!   free list and reference counts (PagedAttention, Kwon et al. 2023), and prefix
//!   caching: full blocks kept under their contents ([`block::block_hash`]) for the
//!   next prompt that starts the same way.
//! - [`Scheduler`]: which tokens each step computes: every running request's next
//!   token, then new prompts in chunks, under a token budget; requests join and leave
//!   every step; preemption by recomputation when blocks run out, never a crash.
//! - [`sample_token`], [`SamplingParams`]: greedy, temperature, top-k, top-p, stop
//!   tokens, a seed per request.
//! - [`speculative::verify`] and [`SpeculativeDecoder`]: speculative decoding, a draft
//!   model's proposals kept or replaced by the exact acceptance rule (Leviathan et al.
//!   2023), so the tokens follow the target's distribution; the expected speed-up
//!   against `k` ([`expected_speedup`]).
//! - [`Quantized`], [`WeightFormat`] and [`quantize_weights`]: weight-only int8 (per
//!   channel), int4 (group-wise) and fp8 (E4M3) storage, and a model computing with
//!   exactly those values (emulated: the product still runs in the model's dtype).
//! - [`KvCache`] and [`LlmEngine`] (feature `engine`, the default): the cache on the
//!   backend, attended through `brrr_nn::CausalSelfAttention::cache`, so the model is
//!   the training code's, walked by the same `Block::forward`; one forward per step
//!   over every scheduled token, flattened into one row with its positions.
//!
//! - [`server`] (feature `http`): an OpenAI-compatible HTTP server (axum on tokio)
//!   with streaming, `/health` and Prometheus `/metrics`, limits answered with 4xx
//!   JSON, cancellation when a client leaves, and a graceful stop.
//!
//! The bookkeeping (blocks, scheduler, sampling, the speculative rule, the quantization
//! formats) has no backend and compiles for wasm32 (`default-features = false`).
//!
//! ## Example
//!
//! Two prompts of different lengths decoded together through a cache of 4-token
//! blocks: each gets its tokens, and every block is free again at the end.
//!
//! ```
//! # #[cfg(not(target_arch = "wasm32"))]
//! # fn main() -> brrr_backend::Result<()> {
//! use brrr_cpu::CpuBackend;
//! use brrr_nn::{DType, Gpt, GptConfig};
//! use brrr_serve::{EngineConfig, LlmEngine, SamplingParams};
//! use rand::SeedableRng;
//!
//! let config = GptConfig { vocab_size: 64, block_size: 32, n_layer: 2, n_head: 2, n_embd: 32 };
//! let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
//! let model = Gpt::new(&CpuBackend::new(), config, DType::F32, &mut rng)?;
//! let mut engine =
//!     LlmEngine::new(model, EngineConfig { block_size: 4, num_blocks: 32, ..EngineConfig::default() })?;
//! let out = engine.generate(&[vec![1, 2, 3], vec![4, 5, 6, 7, 8]], &SamplingParams::greedy(6))?;
//! assert!(out.iter().all(|tokens| tokens.len() == 6));
//! assert_eq!(engine.scheduler().allocator().num_used(), 0);
//! # Ok(())
//! # }
//! # #[cfg(target_arch = "wasm32")]
//! # fn main() {}
//! ```
#![warn(missing_docs)]

pub mod block;
#[cfg(all(feature = "engine", not(target_arch = "wasm32")))]
pub mod engine;
#[cfg(feature = "engine")]
pub mod kv;
pub mod quant;
#[cfg(feature = "engine")]
pub mod quantize_model;
pub mod sampling;
pub mod scheduler;
#[cfg(all(feature = "http", not(target_arch = "wasm32")))]
pub mod server;
pub mod speculative;
#[cfg(all(feature = "engine", not(target_arch = "wasm32")))]
pub mod speculative_decoder;

pub use block::{BlockAllocator, BlockTable, OutOfBlocks};
#[cfg(all(feature = "engine", not(target_arch = "wasm32")))]
pub use engine::{EngineConfig, EngineStats, LlmEngine, StepOutput};
#[cfg(feature = "engine")]
pub use kv::{BatchSeq, KvCache, LayerCache, kv_bytes_per_token};
pub use quant::{Quantized, WeightFormat};
#[cfg(feature = "engine")]
pub use quantize_model::{QuantReport, quantize_weights};
pub use sampling::{SamplingParams, probabilities, sample_token};
pub use scheduler::{
    FinishReason, Refused, Scheduled, Scheduler, SchedulerConfig, SeqId, Sequence,
};
pub use speculative::{Verdict, expected_speedup, expected_tokens_per_step, verify};
#[cfg(all(feature = "engine", not(target_arch = "wasm32")))]
pub use speculative_decoder::{SpeculativeDecoder, SpeculativeStats};
