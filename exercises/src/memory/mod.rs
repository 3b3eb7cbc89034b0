//! Chapter "What fills GPU memory" (`book/src/memory.md`).

pub mod activations;
pub mod blockwise_quantize;
pub mod galore_project;
pub mod gpt_params;
pub mod lora_forward_backward;
pub mod model_states;
pub mod train_time;
