//! # brrr-tensor
//!
//! [`Tensor<B>`]: an n-dimensional view of a backend buffer, with shape checks that
//! name the op and the shapes, NumPy broadcasting, free views (reshape, transpose,
//! permute, narrow, broadcast) and the ops that layers need.
//!
//! A tensor is a shared buffer (`Arc`) plus a [`Layout`]: views are free, and a kernel
//! that needs dense data gets it through [`Tensor::contiguous`], which copies only when
//! the layout demands it. In-place ops (`*_` suffix) need the buffer to be unshared,
//! so a view never changes behind someone's back.

mod flat;
mod nn_ops;
mod ops;
mod tensor;

pub use brrr_backend::{self as backend, Backend, DType, Error, HostData, Layout, Result, Shape};
pub use flat::{FlatBuffer, FlatPart};
pub use nn_ops::{AttentionOut, LayerNormStats};
pub use tensor::Tensor;
