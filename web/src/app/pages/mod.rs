//! One module per page.

pub mod checkpointing;
pub mod collectives;
pub mod data_loading;
pub mod data_parallel;
pub mod kernels;
pub mod landing;
pub mod memory;
pub mod mixed_precision;
pub mod pipeline;
pub mod plan;
pub mod profile;
pub mod puzzles;
pub mod roofline;
pub mod serving;
pub mod tensor_parallel;
pub mod train;
