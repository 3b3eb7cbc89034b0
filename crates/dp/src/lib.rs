//! # brrr-dp
//!
//! Data parallelism: every rank holds a replica of the GPT (or, with ZeRO, a shard of
//! its states), trains on its rows of the global batch, and the ranks agree on the
//! gradients through a [`brrr_collectives::Communicator`].
//!
//! - [`DataParallel`] with [`DpConfig::zero`] = 0 is DDP (Li et al., "PyTorch
//!   Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020):
//!   parameters broadcast from rank 0; gradients grouped in [`Bucket`]s in reverse
//!   parameter order ([`assign_buckets`], 25 MiB with a 1 MiB first bucket); each bucket's
//!   all-reduce starts on the communicator's thread as soon as the backward has finished
//!   its gradients, while the backward goes on; gradient accumulation communicates only
//!   on the last micro-batch (`no_sync`).
//! - Stages 1-3 are ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
//!   Training Trillion Parameter Models", SC 2020): every bucket is a flat buffer padded to
//!   a multiple of the world size and rank `r` owns chunk `r` ([`shard_range`]). Stage 1
//!   keeps only its chunk of AdamW's moments: gradients are reduce-scattered to their
//!   owner, who updates its chunk with the backend's fused AdamW kernel, in place: the
//!   chunk, its gradient and the moments are flat buffers and each parameter segment is
//!   one launch on its [`brrr_backend::AdamWParams::range`]; then the parameters are
//!   all-gathered. Stage 2 also frees each bucket's full gradients once
//!   reduced. Stage 3 (FSDP) keeps only its chunk of the parameters too: each part of
//!   the model (embeddings, every block, the final LayerNorm) is one bucket, gathered
//!   before its forward and its backward and freed after. A gathered bucket is uploaded
//!   once, as one flat buffer, and each parameter is a view into it (GEMMs, LayerNorm
//!   and the embedding read the views in place, through the offsets in their specs). The next unit's all-gather is
//!   prefetched: it runs on the communicator's thread while the current unit computes
//!   ([`DataParallel::set_prefetch`]), so at most two blocks' parameters are gathered at
//!   once and the peak grows by one block's parameters; the results are bitwise those
//!   without prefetching.
//! - [`DataParallel::save_shard`] / [`DataParallel::load_shard`]: sharded checkpoints;
//!   [`consolidate`] turns a run's shards into one single-device [`brrr_train::TrainState`]
//!   ([`write_consolidated`] writes it, atomically), which `brrr sample` and a one-device
//!   `brrr train --resume` read.
//! - [`estimate_model_states`]: what `brrr-perf` predicts each rank holds.

#[cfg(not(target_arch = "wasm32"))]
mod amp;
mod bucket;
// The engine, its checkpoints and its flat layout run a model on a backend and write files
// (brrr-train's atomic writes and brrr-tensor's host copies are native-only); the bucket
// assignment, the memory estimate and the overlap measure are pure, so the web page uses
// them on wasm32.
#[cfg(not(target_arch = "wasm32"))]
mod ckpt;
mod config;
#[cfg(not(target_arch = "wasm32"))]
mod consolidate;
#[cfg(not(target_arch = "wasm32"))]
mod engine;
#[cfg(not(target_arch = "wasm32"))]
mod layout;
mod memory;
mod overlap;
#[cfg(not(target_arch = "wasm32"))]
mod run;

pub use bucket::{
    Bucket, DEFAULT_BUCKET_BYTES, DEFAULT_FIRST_BUCKET_BYTES, assign_buckets, chunk_len,
    flat_offsets, padded_len, shard_range,
};
#[cfg(not(target_arch = "wasm32"))]
pub use ckpt::{ScalerHeader, ShardHeader, shard_path};
pub use config::DpConfig;
#[cfg(not(target_arch = "wasm32"))]
pub use consolidate::{
    consolidate, read_shard, read_shard_header, shard_worlds, write_consolidated,
};
#[cfg(not(target_arch = "wasm32"))]
pub use engine::{DataParallel, StepReport};
#[cfg(not(target_arch = "wasm32"))]
pub use layout::{FlatLayout, ParamSlot, Pieces, Segment, segments};
pub use memory::{estimate_model_states, padded_elems};
pub use overlap::hidden_fraction;
