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
//! - [`TpEmbeddingStage`], [`TpBlocksStage`], [`TpHeadStage`]: brrr-nn's pipeline
//!   stages sliced over a tensor-parallel group (with zero-bubble B/W split), the
//!   pieces `brrr-pp` runs for `--pp P --tp T`;
//! - [`TpConfig`], [`validate_layout`]: what may be split how, with errors that name
//!   what does not divide.
//!
//! Collectives go through a [`brrr_collectives::Communicator`] on host buffers (the
//! tensors make a round trip through the host): simple and the same on every backend.

pub mod comm;
mod config;
mod layers;
pub mod memory;
mod model;
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
pub use stage::{TpBlocksStage, TpEmbeddingStage, TpHeadStage};
pub use trainer::{TpStep, TpTrainer};
pub use vocab::{VocabParallelEmbedding, VocabParallelLoss, vocab_parallel_cross_entropy};
