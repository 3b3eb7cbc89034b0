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

mod backend;
mod device;
mod dtype;
mod error;
mod host;
mod layout;
mod ops;
pub mod skip;

pub use backend::{Backend, BackendInfo};
pub use device::{DeviceLocation, MemoryCounter, MemoryStats, WasmNotSendSync};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use host::{HostData, bf16_from_f64, f16_from_f64, f64_to_f32_round_odd};
pub use layout::{Layout, MAX_RANK, Shape};
pub use ops::{
    AdamWParams, AttentionSpec, BinaryOp, ElemRange, EmbeddingSpec, GemmSpec, LayerNormSpec,
    ReduceOp, ScaleUpdateParams, SegmentMask, SoftmaxSpec, UnaryOp, axpy_range,
};

/// Waits for a future on native targets (the backend's readback is async).
///
/// Not available on `wasm32`, where blocking the main thread is not allowed:
/// there, `.await` the readback instead.
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}
