//! Chapter "Mixed precision" (`book/src/mixed-precision.md`).

pub mod bf16_round;
pub mod policy;
pub mod scaler_update;
