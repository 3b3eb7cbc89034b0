//! Data for training: token shards, a loader that keeps the device fed, packing and
//! balanced batches.
//!
//! - [`shard`]: llm.c's binary shard format (a 256-word header, then `u16` or `u32`
//!   tokens), memory-mapped, every field checked; a writer with the exact layout.
//! - [`loader`]: [`ShardLoader`], a [`brrr_train::BatchSource`] over shards: shuffled
//!   by a seeded generator, split across data-parallel ranks, resumable to the batch.
//! - [`prefetch`] (native): [`Prefetcher`], any source on a background thread with a
//!   bounded queue.
//! - [`pack`]: documents packed into fixed windows with restarted positions and segment
//!   ids; length-balanced assignment of sequences to ranks.
//! - [`prepare`] (native): text and JSON lines to shards, with the byte tokenizer or
//!   GPT-2's BPE, streamed (memory bounded by a shard, whatever the input's size).
//! - [`data_dir`] (native): a directory of shards and its `data.json`, checked; llm.c's
//!   shards read as they are.

#[cfg(not(target_arch = "wasm32"))]
pub mod data_dir;
pub mod loader;
pub mod pack;
#[cfg(not(target_arch = "wasm32"))]
pub mod prefetch;
#[cfg(not(target_arch = "wasm32"))]
pub mod prepare;
pub mod shard;
#[cfg(not(target_arch = "wasm32"))]
pub mod spec;

pub use loader::{LoaderPosition, ShardLoader, shard_val_batches};
pub use pack::{PackedBatch, balance, imbalance, pack_documents};
#[cfg(not(target_arch = "wasm32"))]
pub use prefetch::Prefetcher;
pub use shard::{Shard, ShardHeader, TokenWidth};
#[cfg(not(target_arch = "wasm32"))]
pub use spec::DataSpec;
