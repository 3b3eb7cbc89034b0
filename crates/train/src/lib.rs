//! # brrr-train
//!
//! The training step of a GPT as a library, on any brrr backend, natively and in a
//! browser:
//!
//! - [`TrainConfig`]: the model's shape and the hyper-parameters, validated, with a
//!   [memory estimate](memory::estimate) that is checked before anything is allocated;
//! - [`BatchSource`]: where batches come from, resumably; [`Batcher`] samples random
//!   windows of a [`Corpus`];
//! - [`MicroBatchSchedule`]: the forwards and backwards of one optimizer step as a list
//!   of [`Action`]s (gradient accumulation is `F0 B0 F1 B1 …`);
//! - [`Trainer`]: `async fn step` (one read back per optimizer step: the loss and the
//!   gradient norm), `evaluate`, `run` with an [`Observer`], and [`TrainState`]
//!   save/restore in safetensors ([`ckpt`]);
//! - file I/O (loading a corpus, writing checkpoints atomically) on native targets only.
//!
//! A few steps on the CPU:
//!
//! ```
//! use brrr_cpu::CpuBackend;
//! use brrr_train::{Batcher, Corpus, TrainConfig, Trainer, val_batches};
//!
//! # fn main() -> brrr_backend::Result<()> {
//! let text = "the quick brown fox jumps over the lazy dog. ".repeat(50);
//! let corpus = Corpus::from_text("fox.txt", text)?;
//! let mut config = TrainConfig::default();
//! config.model.n_layer = 1;
//! config.model.n_embd = 32;
//! config.model.n_head = 2;
//! (config.batch_size, config.seq_len, config.steps, config.warmup_steps) = (4, 16, 5, 1);
//! config.lr = 1e-2;
//!
//! let data = Batcher::for_corpus(&corpus, config.batch_size, config.seq_len, config.seed)?;
//! let val = val_batches(corpus.val(), config.batch_size, config.seq_len, 1)?;
//! let mut trainer = Trainer::new(&CpuBackend::new(), config, Box::new(data), val)?;
//! let first = trainer.step_blocking()?;
//! let mut last = first.clone();
//! while !trainer.is_finished() {
//!     last = trainer.step_blocking()?;
//! }
//! assert_eq!(last.step, 5);
//! assert!(last.loss < first.loss, "{} -> {}", first.loss, last.loss);
//! let val_loss = trainer.evaluate_blocking()?;
//! assert!(val_loss.is_finite());
//! # Ok(())
//! # }
//! ```
//!
//! In a browser, `.await` [`Trainer::step`] instead (see `tests/web.rs`).

#![warn(missing_docs)]

pub mod ckpt;
pub mod config;
pub mod engine;
pub mod layout;
pub mod memory;
#[cfg(not(target_arch = "wasm32"))]
pub mod metrics;
pub mod offload;
#[cfg(not(target_arch = "wasm32"))]
pub mod run_dir;
pub mod schedule;
pub mod state;
pub mod trainer;

/// Atomic file replacement (brrr-data's [`brrr_data::atomic`], re-exported).
#[cfg(not(target_arch = "wasm32"))]
pub use brrr_data::atomic;
/// The corpus, its tokenizer and reproducible batches (brrr-data's
/// [`brrr_data::corpus`], re-exported: the data types live below the training library).
pub use brrr_data::corpus as data;
pub use config::{Finetune, TrainConfig};
pub use data::{
    Batch, BatchSource, Batcher, ByteTokenizer, Corpus, DocumentMask, RngState, SYNTHETIC,
    synthetic_corpus, unigram_entropy_nats, val_batches,
};
#[cfg(not(target_arch = "wasm32"))]
pub use engine::run_blocking;
pub use engine::{CHECKPOINT_FILE, Engine, Evaluation, Observer, RunStart, StepStats, run};
pub use layout::{EngineKind, Layout};
pub use memory::MemoryNeed;
#[cfg(not(target_arch = "wasm32"))]
pub use run_dir::RunDir;
pub use schedule::{Action, MicroBatchSchedule};
pub use state::{
    LossScalerState, OptimState, ParamState, ScalerHeader, TrainState, refuse_non_finite,
};
pub use trainer::{Trainer, load_params, load_state, save_state, upload, upload_mask};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
