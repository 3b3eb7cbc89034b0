//! Chapter "Choosing a layout" (`book/src/planning.md`).

pub mod fits;
pub mod micro_batches;
pub mod step_time;
