//! Chapter "Choosing a layout" (`book/src/planning.md`).

pub mod fits;
pub mod step_time;
