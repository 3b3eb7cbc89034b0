//! Chapter "Tensor parallelism" (`book/src/tensor-parallel.md`).

pub mod column_row_split;
pub mod rank_grid;
pub mod tp_mlp;
pub mod vocab_cross_entropy;
