//! Checkpoints (named tensors plus string metadata in one safetensors file):
//! [`brrr_train::ckpt`], re-exported.

pub use brrr_train::ckpt::*;
