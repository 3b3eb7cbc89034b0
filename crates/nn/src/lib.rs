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
//! - [`gradcheck`]: finite-difference checks in f64 used by every layer's tests.

mod attention;
mod block;
mod embedding;
mod gelu;
mod gpt;
pub mod gradcheck;
mod layernorm;
mod linear;
pub mod loss;
mod mlp;
mod optim;
mod param;
mod region;
mod schedule;
mod stage;
mod stash;

pub use attention::{
    AttentionSaved, CausalSelfAttention, CompositeSaved, attention_probs, merge_heads, split_qkv,
};
pub use block::Block;
pub use embedding::Embedding;
pub use gelu::Gelu;
pub use gpt::{Gpt, GptConfig};
pub use layernorm::LayerNorm;
pub use linear::{Linear, LinearLayer};
pub use mlp::Mlp;
pub use optim::{AdamW, AdamWConfig, clip_grad_norm_on_device};
/// Native only: they read one number back, which blocks (in a browser, read the
/// summed squares with `Tensor::to_host().await`).
#[cfg(not(target_arch = "wasm32"))]
pub use optim::{clip_grad_norm, grad_norm};
pub use param::{Module, Param};
pub use schedule::CosineSchedule;
pub use stage::{BlocksStage, EmbeddingStage, GptStages, HeadStage};
/// Native only: they read tensors back to the host, which blocks.
#[cfg(not(target_arch = "wasm32"))]
pub use stage::{copy_to_backend, move_to_backend, sum_tied_grads};
pub use stash::{MicroBatch, Stash};

pub use brrr_backend::{Backend, DType, Error, Result};
pub use brrr_tensor::Tensor;
