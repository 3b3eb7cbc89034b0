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
//! - A replica need not be a whole GPT: [`DataParallel`] is generic over the model it
//!   holds, a [`ReplicaModel`]. brrr-tp's tensor-parallel shard is one
//!   (`brrr_tp::data_parallel`: `--dp × --tp` at every ZeRO stage); its hooks agree the
//!   gradient norm and the fp16 overflow flag over the tensor-parallel group as well,
//!   complete sequence-parallel gradients before the replicas average them, and save the
//!   whole model put together from the shards.
//! - [`DataParallel::save_shard`] / [`DataParallel::load_shard`]: sharded checkpoints;
//!   [`consolidate`] turns a run's shards into one single-device [`brrr_train::TrainState`]
//!   ([`write_consolidated`] writes it, atomically), which `brrr sample` and a one-device
//!   `brrr train --resume` read.
//! - [`estimate_model_states`]: what `brrr-perf` predicts each rank holds.
//!
//! ## Example
//!
//! Two ranks (threads here; processes under `brrr launch`) train with ZeRO stage 2, each
//! on half of every global batch, and their losses follow one device's.
//!
//! ```
//! use brrr_collectives::run_in_process;
//! use brrr_cpu::CpuBackend;
//! use brrr_dp::{DataParallel, DpConfig};
//! use brrr_nn::GptConfig;
//! use brrr_train::{Batcher, TrainConfig, Trainer};
//!
//! let mut config = TrainConfig { batch_size: 4, seq_len: 16, lr: 1e-2, ..TrainConfig::default() };
//! config.model = GptConfig { vocab_size: 256, block_size: 16, n_layer: 1, n_head: 2, n_embd: 16 };
//! let text = b"It is a truth universally acknowledged, that a single man in possession".repeat(4);
//! let data = || Batcher::new(&text, config.batch_size, config.seq_len, config.seed).map(Box::new);
//!
//! let mut one = Trainer::new(&CpuBackend::new(), config.clone(), data()?, Vec::new())?;
//! let one_device = [one.step_blocking()?.loss, one.step_blocking()?.loss];
//! let ranks = run_in_process(2, |comm| {
//!     let zero2 = DpConfig::new(2, 2); // 2 ranks, moments and gradients sharded
//!     let mut dp = DataParallel::new(&CpuBackend::new(), config.clone(), zero2, comm, data()?)?;
//!     Ok([dp.step()?.loss, dp.step()?.loss])
//! });
//! for losses in ranks {
//!     for (a, b) in losses?.iter().zip(&one_device) {
//!         assert!((a - b).abs() < 1e-5, "rank {a} vs one device {b}");
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

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
#[cfg(not(target_arch = "wasm32"))]
mod model;
mod overlap;
#[cfg(not(target_arch = "wasm32"))]
mod recompute;
#[cfg(not(target_arch = "wasm32"))]
mod replica;
#[cfg(not(target_arch = "wasm32"))]
mod run;
#[cfg(not(target_arch = "wasm32"))]
mod walk;

pub use bucket::{
    Bucket, DEFAULT_BUCKET_BYTES, DEFAULT_FIRST_BUCKET_BYTES, assign_buckets, chunk_len,
    flat_offsets, padded_len, shard_range,
};
#[cfg(not(target_arch = "wasm32"))]
pub use ckpt::{ScalerHeader, ShardHeader, shard_path};
pub use config::{DpConfig, bucket_bytes};
#[cfg(not(target_arch = "wasm32"))]
pub use consolidate::{
    consolidate, read_shard, read_shard_header, shard_worlds, write_consolidated,
};
#[cfg(not(target_arch = "wasm32"))]
pub use engine::{DataParallel, StepReport};
#[cfg(not(target_arch = "wasm32"))]
pub use layout::{FlatLayout, ParamSlot, Pieces, Segment, segments};
pub use memory::{estimate_model_states, padded_elems};
#[cfg(not(target_arch = "wasm32"))]
pub use model::{DeviceMask, ReplicaModel};
pub use overlap::hidden_fraction;
#[cfg(not(target_arch = "wasm32"))]
pub use replica::{ParamOwners, average_grads};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
