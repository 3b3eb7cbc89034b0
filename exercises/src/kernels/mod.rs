//! Chapter "Kernels: from naive to tiled, and fusion" (`book/src/kernels.md`).

pub mod attention_row;
pub mod fusion_bytes;
pub mod tiled_matmul;
