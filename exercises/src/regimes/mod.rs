//! Chapter "Three regimes and rooflines" (`book/src/regimes.md`).

pub mod classify;
pub mod gemm_cost;
pub mod multi_tensor_chunks;
pub mod op_totals;
pub mod roofline_time;
