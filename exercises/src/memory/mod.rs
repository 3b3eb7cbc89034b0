//! Chapter "What fills GPU memory" (`book/src/memory.md`).

pub mod activations;
pub mod gpt_params;
pub mod model_states;
pub mod train_time;
