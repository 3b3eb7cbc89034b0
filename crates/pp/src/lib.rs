//! # brrr-pp
//!
//! Pipeline parallelism: the model cut into pieces, one (or `v`) per stage, and
//! micro-batches streamed through them.
//!
//! - [`Schedule`]: per stage, the list of [`Action`]s it runs (F, B, W, fused BW,
//!   sends and receives); [`generate`] builds GPipe, 1F1B, interleaved 1F1B and the
//!   zero-bubble ZB-H1/ZB-H2.
//! - [`validate`]: checks any schedule and names the stage and action at fault.
//! - [`simulate`]: the timeline on given F/B/W costs, its bubble fraction and the
//!   micro-batches in flight per stage; [`theory`] has the closed forms to compare.
//! - [`svg`]: the timeline drawn (stages × time, F/B/W coloured, bubbles blank).
//! - `PipelineStage` and `PipelineEngine` (feature `executor`, native only): run a
//!   schedule on a `brrr-nn` GPT cut into stages, one rank per stage, over a
//!   `brrr-collectives` communicator; `PipelineEngine` is a `brrr_train::Engine`, so the
//!   one training loop drives it;
//!   zero-bubble B and W run as separate passes; each stage checkpoints itself
//!   (`pp-stage{s}-of{n}.bin`). A stage may be tensor-parallel
//!   (`PipelineStage::new_tensor_parallel`: brrr-tp's slices of the stage's pieces, the
//!   3D dp × tp × pp layout); brrr-pp's executor depends on brrr-tp, never the reverse.
//!
//! Everything but the executor is plain Rust and compiles for wasm32
//! (`default-features = false`).
//!
//! # Example
//!
//! 1F1B and ZB-H1 on 4 stages and 8 micro-batches: generated, validated, simulated with
//! F = B = W = 1, and their bubbles compared with the closed forms of [`theory`]:
//!
//! ```rust
//! use brrr_pp::{Costs, ScheduleKind, generate, simulate, theory, validate};
//!
//! let (p, m) = (4, 8);
//! let one_f_one_b = generate(ScheduleKind::OneFOneB, p, m)?;
//! validate(&one_f_one_b)?; // each F/B/W once, every send received, no deadlock
//! // Stage 0 warms up with p - 1 = 3 extra forwards, then alternates.
//! assert!(one_f_one_b.compute_line(0).starts_with("F0 F1 F2 F3 BW0 F4 BW1"));
//! let t = simulate(&one_f_one_b, Costs::unit()).expect("a valid schedule runs");
//! assert_eq!(t.peak_in_flight[0], p); // 1F1B's memory: p micro-batches on stage 0
//! // The bubble is (p - 1) / (m + p - 1) = 3/11 of the step, as the paper derives.
//! let want = theory::bubble_fraction(ScheduleKind::OneFOneB, p, m, Costs::unit()).unwrap();
//! assert!((t.bubble_fraction() - 3.0 / 11.0).abs() < 1e-9 && (want - 3.0 / 11.0).abs() < 1e-9);
//! // Splitting the backward into B and W lets W fill the bubbles (ZB-H1).
//! let zb = generate(ScheduleKind::ZbH1, p, m)?;
//! validate(&zb)?;
//! let zb_t = simulate(&zb, Costs::unit()).expect("a valid schedule runs");
//! assert!(zb_t.bubble_fraction() < t.bubble_fraction());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
mod ckpt;
mod config;
#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
mod consolidate;
#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
mod engine;
#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
mod executor;
mod generate;
#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
mod parts;
#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
mod recompute;
mod schedule;
mod simulate;
pub mod svg;
pub mod theory;
mod validate;

#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
pub use ckpt::{StageHeader, read_stage_file, read_stage_header, stage_path, stage_shard_path};
pub use config::{PpConfig, split_layers};
#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
pub use consolidate::consolidate;
#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
pub use engine::{PIPELINE_PLAN_FILE, PIPELINE_TIMELINE_FILE, PipelineEngine, planned};
#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
pub use executor::*;
pub use generate::{
    PlanError, generate, gpipe, interleaved, one_f_one_b, with_communication, zb_h1_limits,
    zb_h2_limits, zero_bubble,
};
pub use schedule::{Action, Schedule, ScheduleKind};
pub use simulate::{Costs, Deadlock, Span, Timeline, simulate};
pub use validate::{Invalid, Violation, validate, validate_memory};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
