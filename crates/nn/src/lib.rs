//! # brrr-nn
//!
//! Layers with an explicit `forward` (which saves what the backward needs, in fields
//! you can point at) and `backward` (which returns the input gradient and *accumulates*
//! parameter gradients). No tape: the memory a model holds between the passes is
//! visible, which is what activation checkpointing, pipeline stages, ZeRO and tensor
//! parallelism all manipulate. The style follows llm.c.
//!
//! ## Micro-batches in flight
//!
//! Every `forward` and `backward` takes a [`MicroBatch`] id, and each layer keeps what
//! its forwards saved in a [`Stash`], one entry per micro-batch. A pipeline schedule
//! runs several forwards before the matching backwards (GPipe: all forwards, then all
//! backwards; 1F1B: interleaved), so a single `saved` slot would hand a backward the
//! activations of the wrong micro-batch. The keyed stash was chosen over returning a
//! context value to the caller because the activations stay where the rest of this
//! crate keeps them, in the layer's own fields, where a reader (and activation
//! checkpointing) can find and drop them; the caller only carries a small id. A backward
//! of a micro-batch with nothing saved is an error naming the layer and the micro-batch;
//! [`Module::clear_saved`] drops every micro-batch's entries.
//!
//! - layers: [`Linear`], [`Embedding`], [`LayerNorm`], [`Gelu`],
//!   [`CausalSelfAttention`], [`Mlp`], [`Block`], and the [`Gpt`] with a weight-tied head;
//! - [`LinearLayer`]: what attention and the MLP are built from, so that tensor-parallel
//!   shards of their projections can stand in for [`Linear`];
//! - pipeline stages: [`Gpt::into_stages`] cuts the model into an [`EmbeddingStage`],
//!   [`BlocksStage`]s and a [`HeadStage`], each owning only its layers;
//! - training: [`cross_entropy`](loss), [`AdamW`], [`clip_grad_norm`],
//!   [`CosineSchedule`]; gradient accumulation is a loss scale of `1/k` on each of `k`
//!   micro-batches, because every backward accumulates;
//! - [`galore`]: GaLore's per-matrix optimizer state ([`Projector`]), AdamW in a
//!   low-rank projection of the gradient refreshed by an SVD every few hundred steps;
//! - [`lora`]: LoRA fine-tuning, a trained low-rank update beside each frozen linear
//!   layer ([`LoraLinear`], [`add_adapters`](lora::add_adapters)), folded into the weight
//!   afterwards ([`merge_adapters`](lora::merge_adapters));
//! - [`gradcheck`]: finite-difference checks in f64 used by every layer's tests.
//!
//! ## Example
//!
//! A tiny GPT learns to repeat a token sequence: forward to per-position losses, backward
//! from their mean (`dloss = 1/n`), one AdamW step, and the loss falls.
//!
//! ```
//! use brrr_cpu::CpuBackend;
//! use brrr_nn::{AdamW, AdamWConfig, DType, Gpt, GptConfig, Module, Tensor};
//! use rand::SeedableRng;
//!
//! let cpu = CpuBackend::new();
//! let config = GptConfig { vocab_size: 16, block_size: 8, n_layer: 1, n_head: 2, n_embd: 16 };
//! let mut gpt = Gpt::new(&cpu, config, DType::F32, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0))?;
//! let ids = Tensor::from_u32(&cpu, &[1, 2, 3, 4, 5, 6, 7, 8], [1, 8])?; // [B, T]
//! let targets = Tensor::from_i32(&cpu, &[2, 3, 4, 5, 6, 7, 8, 9], [1, 8])?; // the next token
//! let mut opt = AdamW::new(AdamWConfig::default());
//! let mut losses = Vec::new();
//! for _ in 0..20 {
//!     gpt.zero_grad()?; // backwards accumulate
//!     let loss = gpt.forward_loss(&ids, &targets)?.mean_all()?.to_scalar_f64()?;
//!     gpt.backward(1.0 / 8.0)?; // the mean over 8 positions
//!     opt.step(gpt.params_mut(), 1e-2, 1.0)?;
//!     losses.push(loss);
//! }
//! assert!((losses[0] - brrr_nn::loss::uniform_loss(16)).abs() < 0.1); // ln(V) at init
//! assert!(losses[19] < 0.5 * losses[0], "{losses:?}");
//! # Ok::<(), brrr_nn::Error>(())
//! ```
#![warn(missing_docs)]

mod attention;
mod block;
mod embedding;
pub mod galore;
mod gelu;
mod gpt;
pub mod gradcheck;
mod layernorm;
mod linear;
pub mod lora;
pub mod loss;
mod mlp;
mod moments;
mod optim;
mod param;
mod parts;
mod region;
mod schedule;
mod segments;
mod stage;
mod stash;

pub use attention::{
    AttentionSaved, CachedAttention, CausalSelfAttention, CompositeSaved, attention_probs,
    merge_heads, split_qkv,
};
pub use block::Block;
pub use embedding::Embedding;
pub use galore::{GaLoreConfig, Projector};
pub use gelu::Gelu;
pub use gpt::{Gpt, GptConfig};
pub use layernorm::LayerNorm;
pub use linear::{Linear, LinearLayer};
pub use lora::{LoraConfig, LoraLinear};
pub use mlp::Mlp;
pub use moments::{MIN_8BIT_NUMEL, MomentState, Optimizer};
pub use optim::{AdamW, AdamWConfig, clip_grad_norm_on_device};
/// Native only: they read one number back, which blocks (in a browser, read the
/// summed squares with `Tensor::to_host().await`).
#[cfg(not(target_arch = "wasm32"))]
pub use optim::{clip_grad_norm, grad_norm};
pub use param::{Module, Param, zero_grads};
pub use parts::{
    BlockPart, EmbeddingPart, HeadPart, backward_blocks, backward_weight_blocks, forward_blocks,
};
pub use schedule::CosineSchedule;
pub use segments::{SegmentId, Segments, forward_selective};
/// The plain walks over a [`Segments`] chain.
pub mod walk {
    pub use crate::segments::{backward_to_input, forward_loss};
}
pub use stage::{BlocksStage, EmbeddingStage, GptStages, HeadStage};
/// Native only: they read tensors back to the host, which blocks.
#[cfg(not(target_arch = "wasm32"))]
pub use stage::{copy_to_backend, move_to_backend, sum_tied_grads, with_segments};
pub use stash::{MicroBatch, Stash};

pub use brrr_backend::{Backend, DType, Error, Result};
pub use brrr_tensor::Tensor;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
