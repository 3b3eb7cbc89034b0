//! Neural-network kernels: softmax, fused attention, LayerNorm, GELU, embedding,
//! cross-entropy.
//!
//! All are row-wise: rows are independent, so tasks are blocks of whole rows, and
//! each row is loaded once into the compute type, worked on in SIMD-friendly loops,
//! and stored once.

mod activation;
pub(crate) mod attention;
mod embedding;
mod layernorm;
mod loss;
mod softmax;

pub(crate) use activation::{gelu, gelu_backward};
pub(crate) use attention::{attention, attention_backward};
pub(crate) use embedding::{embedding, embedding_backward, scatter_rows};
pub(crate) use layernorm::{layernorm, layernorm_backward};
pub(crate) use loss::{cross_entropy, cross_entropy_backward};
pub(crate) use softmax::{softmax, softmax_backward, softmax_segmented};
