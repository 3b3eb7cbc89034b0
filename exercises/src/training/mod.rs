//! Chapter "Training a GPT with an explicit backward" (`book/src/training.md`).

pub mod adamw_step;
pub mod cross_entropy_backward;
pub mod gelu_backward;
pub mod layernorm_backward;
