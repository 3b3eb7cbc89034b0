//! # brrr-profile
//!
//! Where a training step's milliseconds go, op by op.
//!
//! [`ProfiledBackend`] wraps any [`Backend`](brrr_backend::Backend): every method is
//! forwarded to the wrapped backend, and every op is timed (natively, after waiting for
//! the device, like `CUDA_LAUNCH_BLOCKING=1`) and costed from its spec: FLOPs and minimum
//! bytes moved ([`cost`]). Each call becomes a span in a Chrome trace
//! ([`brrr_perf::trace::Tracer`]) with its shape, dtype, FLOPs and bytes as arguments, and
//! adds to running totals per op kind ([`Profile`]). [`Profile::table`] prints them as
//! PyTorch's `prof.key_averages().table()` does, with each kind's achieved GFLOP/s and GB/s
//! and its regime (compute, memory or overhead) from brrr-perf's roofline classifier.
//!
//! ```
//! # #[cfg(not(target_arch = "wasm32"))] {
//! use brrr_backend::{Backend, DType, GemmSpec, HostData};
//! use brrr_profile::ProfiledBackend;
//!
//! let backend = ProfiledBackend::new(brrr_cpu::CpuBackend::new());
//! let a = backend.upload(&HostData::from_f32(DType::F32, &[1.0; 64 * 32])).unwrap();
//! let b = backend.upload(&HostData::from_f32(DType::F32, &[1.0; 32 * 16])).unwrap();
//! let mut c = backend.zeros(DType::F32, 64 * 16).unwrap();
//! backend.gemm(&GemmSpec::new(64, 16, 32), &a, &b, &mut c).unwrap();
//!
//! let profile = backend.profile();
//! let gemm = profile.get("gemm").unwrap();
//! assert_eq!((gemm.calls, gemm.flops), (1, 2 * 64 * 16 * 32));
//! let roofline = brrr_perf::roofline::Roofline::new("example", 100e9, 10e9).unwrap();
//! let wall_us = profile.total_us();
//! println!("{}", profile.table(wall_us, "example", Some(&roofline)));
//! assert!(backend.tracer().to_chrome_json().contains("\"flops\":65536"));
//! # }
//! ```
//!
//! When the ops' spans share a tracer with the code around them (the trainer's
//! `forward`, `backward`, `adamw`, ... spans: `brrr_train::Trainer::set_shared_tracer`),
//! the trace itself can be cut up: [`Profile::from_chrome_trace`] totals the ops inside
//! chosen spans (the steps after a warm-up), [`Profile::from_chrome_trace_by_shape`] per
//! op and shape, and [`Profile::phases_from_chrome_trace`] per phase. The `brrr` CLI prints
//! all three for `brrr train --profile`.

#![warn(missing_docs)]

pub mod cost;
mod profiled;
mod table;

pub use cost::OpCall;
pub use profiled::ProfiledBackend;
pub use table::{OpRow, OpStats, Profile};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
