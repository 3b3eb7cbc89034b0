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
//! - `Pipeline` (feature `executor`, native only): runs a schedule on a `brrr-nn`
//!   GPT cut into stages, one rank per stage, over a `brrr-collectives` communicator;
//!   zero-bubble B and W run as separate passes; each stage checkpoints itself
//!   (`pp-stage{s}-of{n}.bin`). A stage may be tensor-parallel
//!   (`PipelineStage::new_tensor_parallel`: brrr-tp's slices of the stage's pieces, the
//!   3D dp × tp × pp layout); brrr-pp's executor depends on brrr-tp, never the reverse.
//!
//! Everything but the executor is plain Rust and compiles for wasm32
//! (`default-features = false`).

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
#[cfg(all(feature = "executor", not(target_arch = "wasm32")))]
pub use parts::{StageBlocks, StageEmbedding, StageHead};
pub use schedule::{Action, Schedule, ScheduleKind};
pub use simulate::{Costs, Deadlock, Span, Timeline, simulate};
pub use validate::{Invalid, Violation, validate, validate_memory};
