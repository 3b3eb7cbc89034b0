//! Chapter "What a GPU is" (`book/src/gpu.md`).

pub mod compute_ceiling;
pub mod wave_quantization;
