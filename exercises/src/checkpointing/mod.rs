//! Chapter "Activation recomputation" (`book/src/checkpointing.md`).

pub mod dp_step;
pub mod schedule_memory;
pub mod sqrt_segments;
