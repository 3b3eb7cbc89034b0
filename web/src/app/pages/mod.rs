//! One module per page.

pub mod checkpointing;
pub mod collectives;
pub mod kernels;
pub mod landing;
pub mod memory;
pub mod pipeline;
pub mod puzzles;
pub mod roofline;
pub mod train;
