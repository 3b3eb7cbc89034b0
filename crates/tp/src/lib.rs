//! # brrr-tp
//!
//! Tensor parallelism as Megatron-LM does it (Shoeybi et al. 2019): every layer's
//! matrices split over the `n` ranks of a tensor-parallel group, so each rank holds
//! `1/n` of the weights and does `1/n` of the matmul work, and the ranks all-reduce
//! twice per block in the forward and twice in the backward.
//!
//! - [`ColumnParallelLinear`] (output features split) and [`RowParallelLinear`] (input
//!   features split, partial outputs reduced): both brrr-nn [`brrr_nn::LinearLayer`]s, so
//!   brrr-nn's attention (heads split: [`shard::qkv_shard`]) and MLP (column → GELU →
//!   row) are built from them unchanged;
//! - [`RegionEntry`] / [`RegionExit`]: the conjugate operators `f` (identity forward,
//!   all-reduce backward) and `g` (all-reduce forward, identity backward), and with
//!   sequence parallelism (Korthikanti et al. 2022) their all-gather / reduce-scatter
//!   pairs;
//! - [`VocabParallelEmbedding`] and [`vocab_parallel_cross_entropy`]: the vocabulary
//!   split, the loss computed from per-position maxima and sums, never the full logits;
//! - [`TpGpt`]: a rank's shard sliced from a single-device `Gpt`, and [`TpTrainer`],
//!   the training step over a `dp × tp` grid ([`brrr_collectives::ParallelGroups`],
//!   Megatron's rank order, tensor-parallel ranks adjacent);
//! - [`TpEmbeddingStage`], [`TpBlocksStage`] ([`shard_blocks`]), [`TpHeadStage`]:
//!   brrr-nn's pipeline stages sliced over a tensor-parallel group (with zero-bubble
//!   B/W split), brrr-nn's `EmbeddingPart`, `BlockPart` and `HeadPart`, the pieces
//!   `brrr-pp` runs for `--pp P --tp T`;
//! - [`TpConfig`], [`validate_layout`]: what may be split how, with errors that name
//!   what does not divide.
//!
//! Collectives go through a [`brrr_collectives::Communicator`] on host buffers (the
//! tensors make a round trip through the host): simple and the same on every backend.
//!
//! ## Example
//!
//! Two ranks (threads here; processes under `brrr launch`) each slice their half of every
//! matrix from the same seeded GPT, with sequence parallelism, and compute the same loss
//! as one device holding the whole model.
//!
//! ```
//! use brrr_collectives::{ParallelGroups, ParallelLayout, run_in_process};
//! use brrr_cpu::CpuBackend;
//! use brrr_nn::{DType, Gpt, GptConfig, MicroBatch, Tensor};
//! use rand::SeedableRng;
//! use std::sync::Arc;
//!
//! let config = GptConfig { vocab_size: 16, block_size: 8, n_layer: 1, n_head: 2, n_embd: 16 };
//! let seed = || rand_chacha::ChaCha8Rng::seed_from_u64(0);
//! let (ids, targets) = ([1u32, 2, 3, 4, 5, 6, 7, 8], [2u32, 3, 4, 5, 6, 7, 8, 9]);
//! let cpu = CpuBackend::new();
//! let mut gpt = Gpt::new(&cpu, config.clone(), DType::F32, &mut seed())?;
//! let ids_t = Tensor::from_u32(&cpu, &ids, [1, 8])?;
//! let targets_t = Tensor::from_i32(&cpu, &targets.map(|t| t as i32), [1, 8])?;
//! let one_device = gpt.forward_loss(&ids_t, &targets_t)?.mean_all()?.to_scalar_f64()?;
//!
//! let per_rank = run_in_process(2, |world| {
//!     let tp = ParallelGroups::new(world, ParallelLayout { dp: 1, tp: 2, pp: 1 })?.tp;
//!     let cpu = CpuBackend::new();
//!     let gpt = Gpt::new(&cpu, config.clone(), DType::F32, &mut seed())?;
//!     let mut shard = brrr_tp::TpGpt::from_gpt(&gpt, Arc::new(tp), true)?; // sp = true
//!     assert_eq!(shard.wte.weight.value.dims(), [8, 16]); // half of the vocabulary rows
//!     let losses = shard.forward_loss_mb(MicroBatch(0), &ids, &targets, (1, 8))?;
//!     Ok(losses.mean_all()?.to_scalar_f64()?)
//! });
//! for loss in per_rank {
//!     assert!((loss? - one_device).abs() < 1e-5);
//! }
//! # Ok::<(), brrr_nn::Error>(())
//! ```
#![warn(missing_docs)]

pub mod comm;
mod config;
mod ends;
mod layers;
pub mod memory;
mod model;
mod replica;
mod run;
pub mod shard;
mod stage;
pub mod theory;
mod trainer;
mod vocab;

pub use comm::{RegionEntry, RegionExit};
pub use config::{TpConfig, check_model, validate_layout};
pub use layers::{ColumnParallelLinear, RowParallelLinear};
pub use model::{TpBlock, TpGpt};
pub use replica::data_parallel;
pub use stage::{TpBlocksStage, TpEmbeddingStage, TpHeadStage, shard_blocks};
pub use trainer::{TpStep, TpTrainer};
pub use vocab::{VocabParallelEmbedding, VocabParallelLoss, vocab_parallel_cross_entropy};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
