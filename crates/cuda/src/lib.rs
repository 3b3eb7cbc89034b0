//! # brrr-cuda
//!
//! The CUDA backend of brrr: every [`brrr_backend::Backend`] op on an NVIDIA GPU.
//!
//! - **Kernels** are CUDA C in the workspace's `kernels/` directory, one file per family
//!   ([`kernels::Family`]), compiled at run time by NVRTC for the device's architecture
//!   and cached on disk. Building this crate needs no CUDA toolkit. f16, bf16, f32 (and
//!   f64) are native: 16-bit data is stored as such and computed in f32.
//! - **GEMM two ways** ([`gemm`]): cuBLAS (and cuBLASLt with fused bias/GELU epilogues)
//!   as the production path, and brrr's own numbered kernels as the lesson: v1 naive,
//!   v2 shared-memory tiled, v3 register-blocked, v4 tensor cores (`mma.sync`).
//! - **Memory and streams**: a caching allocator ([`AllocatorStats`]), pinned staging
//!   buffers with host-to-device copies on their own stream, CUDA events for timing
//!   ([`CudaBackend::time`]). Out of memory is [`brrr_backend::Error::OutOfMemory`] with
//!   the requested and free sizes.
//! - **No GPU, no panic**: cudarc panics when libcuda is missing, so
//!   [`CudaBackend::new`] checks first and returns
//!   `Error::NoDevice { backend: "cuda", reason: "no CUDA driver (libcuda not found)" }`.
//! - **A CPU emulator** ([`emu`], [`CudaBackend::emulated`]) runs the same CUDA C
//!   kernels with one OS thread per CUDA thread, so the kernels and all host code above
//!   the driver calls are tested on machines without a GPU.
//! - **Benchmarks** as data ([`bench`](mod@bench)): GEMM TFLOP/s per implementation and memory
//!   bandwidth of the memory-bound kernels against a device-to-device copy.
//!
//! On `wasm32` the crate is empty apart from [`kernels`] (the sources, for display).
//!
//! # Example
//!
//! A GEMM on GPU 0 through cuBLAS, read back and checked. Where there is no GPU (or no
//! driver, or no NVRTC) [`CudaBackend::new`] returns an error and the example says so
//! instead of failing:
//!
//! ```rust
//! use brrr_backend::{Backend, DType, GemmSpec, HostData, block_on};
//! use brrr_cuda::{CudaBackend, GemmImpl};
//!
//! fn main() -> brrr_backend::Result<()> {
//!     let cuda = match CudaBackend::new(0) {
//!         Ok(cuda) => cuda,
//!         Err(e) => {
//!             println!("SKIPPED: {e}");
//!             return Ok(());
//!         }
//!     };
//!     // Row-major C (2×4) = A (2×3) · B (3×4); with all ones every entry of C is 3.
//!     let a = cuda.upload(&HostData::F32(vec![1.0; 6]))?;
//!     let b = cuda.upload(&HostData::F32(vec![1.0; 12]))?;
//!     let mut c = cuda.zeros(DType::F32, 8)?;
//!     assert_eq!(cuda.gemm_impl(), GemmImpl::Cublas);
//!     cuda.gemm(&GemmSpec::new(2, 4, 3), &a, &b, &mut c)?;
//!     assert_eq!(block_on(cuda.read(&c))?, HostData::F32(vec![3.0; 8]));
//!     Ok(())
//! }
//! ```
#![warn(missing_docs)]

pub mod kernels;

#[cfg(not(target_arch = "wasm32"))]
mod alloc;
#[cfg(not(target_arch = "wasm32"))]
mod backend;
#[cfg(not(target_arch = "wasm32"))]
pub mod bench;
#[cfg(not(target_arch = "wasm32"))]
mod device;
#[cfg(not(target_arch = "wasm32"))]
mod driver;
#[cfg(not(target_arch = "wasm32"))]
pub mod emu;
#[cfg(not(target_arch = "wasm32"))]
pub mod gemm;
#[cfg(not(target_arch = "wasm32"))]
mod multi;
#[cfg(not(target_arch = "wasm32"))]
mod ops;
#[cfg(not(target_arch = "wasm32"))]
mod reduce;

#[cfg(not(target_arch = "wasm32"))]
pub use alloc::{AllocatorStats, rounded_size};
#[cfg(not(target_arch = "wasm32"))]
pub use backend::{CudaBackend, CudaBuffer};
#[cfg(not(target_arch = "wasm32"))]
pub use driver::{device_count, driver_present};
#[cfg(not(target_arch = "wasm32"))]
pub use gemm::GemmImpl;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
