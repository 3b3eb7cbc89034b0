//! # brrr-nn
//!
//! Layers with an explicit `forward` (which saves what the backward needs, in fields
//! you can point at) and `backward` (which returns the input gradient and *accumulates*
//! parameter gradients). No tape: the memory a model holds between the passes is
//! visible, which is what activation checkpointing, pipeline stages, ZeRO and tensor
//! parallelism all manipulate. The style follows llm.c.
//!
//! - layers: [`Linear`], [`Embedding`], [`LayerNorm`], [`Gelu`],
//!   [`CausalSelfAttention`], [`Mlp`], [`Block`], and the [`Gpt`] with a weight-tied head;
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
mod schedule;

pub use attention::CausalSelfAttention;
pub use block::Block;
pub use embedding::Embedding;
pub use gelu::Gelu;
pub use gpt::{Gpt, GptConfig};
pub use layernorm::LayerNorm;
pub use linear::Linear;
pub use mlp::Mlp;
pub use optim::{AdamW, AdamWConfig, clip_grad_norm_on_device};
/// Native only: they read one number back, which blocks (in a browser, read the
/// summed squares with `Tensor::to_host().await`).
#[cfg(not(target_arch = "wasm32"))]
pub use optim::{clip_grad_norm, grad_norm};
pub use param::{Module, Param};
pub use schedule::CosineSchedule;

pub use brrr_backend::{Backend, DType, Error, Result};
pub use brrr_tensor::Tensor;

/// Error for a backward called without a forward that saved its inputs.
pub(crate) fn no_forward(layer: &'static str) -> Error {
    Error::invalid(layer, "backward called before forward (nothing saved)")
}
