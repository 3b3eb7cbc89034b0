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
//!
//! Tensors are made on a backend (here `brrr-cpu`'s; `brrr-wgpu` and `brrr-cuda` run the
//! same code on a GPU) and read back with `to_vec_f32` and friends:
//!
//! ```
//! use brrr_cpu::CpuBackend;
//! use brrr_tensor::{DType, Tensor};
//!
//! let cpu = CpuBackend::new();
//! // x: [2, 3], w: [2, 3]; x · wᵀ through a transposed view (no copy) is [2, 2].
//! let x = Tensor::from_f32(&cpu, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3], DType::F32)?;
//! let w = Tensor::from_f32(&cpu, &[1.0, 0.0, 0.0, 0.0, 1.0, 1.0], [2, 3], DType::F32)?;
//! let y = x.matmul(&w.transpose(0, 1)?)?;
//! assert_eq!(y.dims(), [2, 2]);
//! assert_eq!(y.to_vec_f32()?, [1.0, 5.0, 4.0, 11.0]);
//!
//! // A bias of shape [2] broadcasts over the rows; a row sum reduces the last dimension.
//! let b = Tensor::from_f32(&cpu, &[10.0, 20.0], [2], DType::F32)?;
//! let s = y.add(&b)?.sum_dim(-1, false)?;
//! assert_eq!(s.to_vec_f32()?, [36.0, 45.0]);
//!
//! // Shape errors name the op and the shapes.
//! let err = x.matmul(&w).unwrap_err();
//! assert!(err.to_string().contains("matmul"));
//! # Ok::<(), brrr_tensor::Error>(())
//! ```
#![warn(missing_docs)]

mod flat;
mod nn_ops;
mod ops;
mod tensor;

pub use brrr_backend::{self as backend, Backend, DType, Error, HostData, Layout, Result, Shape};
pub use flat::{FlatBuffer, FlatPart};
pub use nn_ops::{AttentionOut, LayerNormStats};
pub use tensor::Tensor;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
