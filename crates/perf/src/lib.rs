//! brrr-perf: rooflines, GPU specs, memory/time/MFU estimators, communication rooflines and
//! Chrome traces.
//!
//! Everything here is plain arithmetic over documented formulas, each citing its source, plus a
//! small tracer. It depends on no other brrr crate, compiles for `wasm32-unknown-unknown` (the
//! web calculators use it), and returns [`PerfError`] instead of panicking on bad input.
//!
//! | module | what |
//! |---|---|
//! | [`specs`] | GPU spec table (V100 … B200, L4, RTX 4090) and "this machine" |
//! | [`machine`] | the CPU's theoretical FP32 peak, its measured FMA throughput, and a bandwidth probe |
//! | [`roofline`] | arithmetic intensity of ops, predicted time and regime, measured-time classifier, tile/wave quantization |
//! | [`memory`] | parameters, model states under ZeRO, activations (Korthikanti et al.), per-GPU breakdown |
//! | [`flops`] | 6ND, attention term, Megatron's formula, time-to-train, MFU/HFU, tokens/s ↔ FLOP/s |
//! | [`comms`] | alpha-beta collectives, nccl-tests bus bandwidth, DP/TP/EP/PP rooflines |
//! | [`plan`] | choosing a parallel layout: every `dp × tp × pp` and option that fits, ranked by predicted step time |
//! | [`trace`] | spans → Chrome trace event JSON for Perfetto |
//! | [`table`], [`plot`], [`report`] | text tables, SVG plots, and the CLI's reports |

#![warn(missing_docs)]

pub mod comms;
pub mod error;
pub mod flops;
pub mod machine;
pub mod memory;
pub mod plan;
pub mod plot;
pub mod report;
pub mod roofline;
pub mod serve;
pub mod specs;
pub mod table;
pub mod tensor_parallel;
pub mod trace;

pub use error::{PerfError, Result};
pub use specs::{DType, GpuSpec, Unit};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
