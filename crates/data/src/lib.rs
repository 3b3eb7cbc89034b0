//! Data for training: token shards, a loader that keeps the device fed, packing and
//! balanced batches.
//!
//! - [`shard`]: llm.c's binary shard format (a 256-word header, then `u16` or `u32`
//!   tokens), memory-mapped, every field checked; a writer with the exact layout.
//! - [`corpus`]: a text [`Corpus`] with its byte tokenizer, the [`Batch`] (with an
//!   optional [`DocumentMask`]), the [`BatchSource`] trait every trainer draws from, and
//!   [`Batcher`], random windows of a corpus, resumable to the token.
//! - [`loader`]: [`ShardLoader`], a [`BatchSource`] over shards: shuffled
//!   by a seeded generator, split across data-parallel ranks, resumable to the batch.
//! - [`prefetch`] (native): [`Prefetcher`], any source on a background thread with a
//!   bounded queue.
//! - [`pack`]: documents packed into fixed windows with restarted positions and segment
//!   ids; length-balanced assignment of sequences to ranks.
//! - [`prepare`] (native, feature `prepare`, on by default): text and JSON lines to shards, with the byte tokenizer or
//!   GPT-2's BPE, streamed (memory bounded by a shard, whatever the input's size).
//! - [`data_dir`] (native): a directory of shards and its `data.json`, checked; llm.c's
//!   shards read as they are.
//!
//! # Example
//!
//! A shard built in memory, a loader over it, and a resume from a saved position:
//!
//! ```rust
//! use brrr_data::{Shard, ShardLoader, TokenWidth, shard::shard_bytes};
//! use brrr_data::BatchSource;
//! use std::sync::Arc;
//!
//! // The tokens 0, 1, ..., 100 as an llm.c shard of u16 tokens, kept in memory.
//! let tokens: Vec<u32> = (0..=100).collect();
//! let shard = Shard::from_bytes("toy.bin", shard_bytes(&tokens, TokenWidth::U16)?)?;
//! // Rank 0 of 1: batches of 2 windows of 4 tokens, vocabulary 128, seed 42.
//! let mut loader = ShardLoader::new(Arc::new(vec![shard]), 2, 4, 42, 128, 0, 1)?;
//! assert_eq!(loader.batches_per_epoch(), 12); // (101 - 1) / 4 = 25 windows, 2 a batch
//! let saved = loader.position();
//! assert_eq!(saved, "epoch=0 batch=0 rank=0 world=1");
//! let batch = loader.next_batch()?;
//! assert_eq!((batch.batch, batch.seq, batch.inputs.len()), (2, 4, 8));
//! // The targets are the inputs shifted by one token.
//! for (x, y) in batch.inputs.iter().zip(&batch.targets) {
//!     assert_eq!(x + 1, *y);
//! }
//! // Resuming from the saved position gives the same batch again.
//! loader.set_position(&saved)?;
//! assert_eq!(loader.next_batch()?.inputs, batch.inputs);
//! # Ok::<(), brrr_backend::Error>(())
//! ```
#![warn(missing_docs)]

#[cfg(not(target_arch = "wasm32"))]
pub mod atomic;
pub mod corpus;
#[cfg(not(target_arch = "wasm32"))]
pub mod data_dir;
pub mod loader;
pub mod pack;
#[cfg(not(target_arch = "wasm32"))]
pub mod prefetch;
#[cfg(all(not(target_arch = "wasm32"), feature = "prepare"))]
pub mod prepare;
pub mod shard;
#[cfg(not(target_arch = "wasm32"))]
pub mod spec;

pub use corpus::{
    Batch, BatchSource, Batcher, ByteTokenizer, Corpus, DocumentMask, RngState, SYNTHETIC,
    synthetic_corpus, unigram_entropy_nats, val_batches,
};
pub use loader::{LoaderPosition, ShardLoader, shard_val_batches};
pub use pack::{PackedBatch, balance, imbalance, pack_documents};
#[cfg(not(target_arch = "wasm32"))]
pub use prefetch::Prefetcher;
pub use shard::{Shard, ShardHeader, TokenWidth};
#[cfg(not(target_arch = "wasm32"))]
pub use spec::{DataOptions, DataSpec};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
