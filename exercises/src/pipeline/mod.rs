//! Chapter "Pipeline parallelism" (`book/src/pipeline-parallel.md`).

pub mod bubble;
pub mod fix_schedule;
pub mod one_f_one_b;
