//! # brrr-backend
//!
//! The vocabulary every brrr backend shares: [`DType`], [`Shape`] and [`Layout`],
//! host-side data ([`HostData`]), one error type ([`Error`]) and the [`Backend`] trait.
//!
//! The trait is deliberately *coarse*: one method per kernel that training needs
//! (GEMM, element-wise, reductions, softmax, layernorm, GELU, embedding, cross-entropy,
//! casts, AdamW and the two AMP kernels). A backend owns device memory and launches
//! kernels; it knows nothing of layers or autograd. Shapes and strides live in the
//! tensor crate; here they arrive as plain numbers in small spec structs, already
//! checked. Backends still validate buffer lengths and dtypes, because a wrong length
//! on a GPU is memory corruption, not an exception.
//!
//! Work is *enqueued*, as on a GPU. The one call that waits is reading a buffer back
//! to the host, and it is `async` because in a browser nothing may block. Native
//! callers use [`block_on`].
//!
//! This crate has no kernels of its own: code written against [`Backend`] runs on any
//! implementation (brrr-cpu, brrr-wgpu, brrr-cuda). What it does compute, it computes
//! on the host, before a launch: views, broadcasting and checked buffer sizes.
//!
//! ```rust
//! use brrr_backend::{Backend, DType, GemmSpec, HostData, Layout, Result, Shape};
//!
//! /// `a · b` for row-major f32 matrices `m × k` and `k × n`, on any backend.
//! fn matmul<B: Backend>(
//!     dev: &B, a: Vec<f32>, b: Vec<f32>, m: usize, n: usize, k: usize,
//! ) -> Result<Vec<f32>> {
//!     let (a, b) = (dev.upload(&HostData::F32(a))?, dev.upload(&HostData::F32(b))?);
//!     let mut c = dev.alloc(DType::F32, m * n)?; // overwritten whole: no need to zero it
//!     dev.gemm(&GemmSpec::new(m, n, k), &a, &b, &mut c)?;
//!     brrr_backend::block_on(dev.read(&c))?.into_vec()
//! }
//!
//! // A batch of 4 products [2 × 5] · [5 × 3]: how many elements each buffer needs.
//! let spec = GemmSpec::batched(4, 2, 3, 5);
//! assert_eq!(spec.required_lens()?, (40, 60, 24));
//! // A bias of shape [3] added to a [2, 3] tensor: a stride-0 view, no copy.
//! let out = Shape::broadcast("add", &Shape::new([2, 3]), &Shape::new([3]))?;
//! let bias = Layout::contiguous([3]).broadcast_to("add", &out)?;
//! assert_eq!(bias.offsets().collect::<Vec<_>>(), [0, 1, 2, 0, 1, 2]);
//! // Host data rounds once into bf16 and knows its bytes.
//! let h = HostData::from_f64(DType::BF16, &[1.0, 0.1]);
//! assert_eq!((h.len(), h.as_bytes().len()), (2, 4));
//! assert!((h.to_f64()[1] - 0.1).abs() <= 0.1 * DType::BF16.epsilon());
//! # Ok::<(), brrr_backend::Error>(())
//! ```
#![warn(missing_docs)]

mod backend;
mod device;
mod dtype;
mod error;
mod host;
mod layout;
pub mod multi_tensor;
mod ops;
pub mod quant8;
pub mod skip;

pub use backend::{Backend, BackendInfo};
pub use device::{DeviceLocation, MemoryCounter, MemoryStats, WasmNotSendSync};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use host::{HostData, bf16_from_f64, f16_from_f64, f64_to_f32_round_odd};
pub use layout::{Layout, MAX_RANK, Shape};
pub use ops::{
    AdamWParams, AdamWTensors, AttentionSpec, BinaryOp, ElemRange, EmbeddingSpec, GemmSpec,
    LayerNormSpec, ReduceOp, ScaleUpdateParams, SegmentMask, SoftmaxSpec, UnaryOp, axpy_range,
};
pub use quant8::QuantizedMoments;

/// Waits for a future on native targets (the backend's readback is async).
///
/// Not available on `wasm32`, where blocking the main thread is not allowed:
/// there, `.await` the readback instead.
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
