//! # brrr
//!
//! The `brrr` command-line tool and a facade over the workspace's crates, so that one
//! dependency brings everything:
//!
//! - `backend` — `DType`, `Shape`, `Error` and the `Backend` trait;
//! - `cpu` — the reference backend;
//! - `tensor` — `Tensor<B>`;
//! - `nn` — layers, the GPT, AdamW;
//! - `perf` — rooflines and estimators.
//!
//! The modules below are the training program's parts: the corpus and batches
//! ([`data`]), metrics and the loss picture ([`metrics`]), checkpoints ([`ckpt`]) written
//! atomically ([`atomic`]), and the training loop ([`train`]).
//!
//! ```
//! // One dependency, every layer: a tensor on the CPU backend and brrr-perf's estimate
//! // of what training a model of its size would hold.
//! use brrr::perf::memory::{Optimizer, Precision, model_state_bytes};
//! use brrr::tensor::Tensor;
//! use brrr::{backend::DType, cpu::CpuBackend};
//!
//! let cpu = CpuBackend::new();
//! let w = Tensor::from_f32(&cpu, &[1.0, 2.0, 3.0, 4.0], [2, 2], DType::F32)?;
//! assert_eq!(w.elem_count(), 4);
//! let states = model_state_bytes(4.0, Precision::Fp32, Optimizer::Adam, 0, 1)?;
//! // fp32 AdamW: weights, gradients and two moments, 4 bytes each.
//! assert_eq!(states.total(), 4.0 * 16.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub use brrr_backend as backend;
pub use brrr_collectives as collectives;
pub use brrr_cpu as cpu;
pub use brrr_nn as nn;
pub use brrr_perf as perf;
pub use brrr_tensor as tensor;

pub mod amp_bench;
pub mod atomic;
pub mod bench;
pub mod bench_collectives;
pub mod ckpt;
pub mod ckpt_cmd;
pub mod data;
pub mod decode_bench;
pub mod finetune;
pub mod generate;
pub mod launch;
pub mod metrics;
pub mod numerics;
pub mod peak_bench;
pub mod pipeline_cmd;
pub mod profile_cmd;
pub mod quant_bench;
pub mod recompute;
pub mod sample;
pub mod serve_bench;
pub mod serve_cmd;
pub mod spec_bench;
pub mod train;
