//! The computations behind the pages, free of the DOM: each takes the page's inputs and
//! returns what the page shows, calling `brrr-perf` for every number.

pub mod attention;
pub mod chart;
pub mod checkpointing;
pub mod collectives;
pub mod data_loading;
pub mod data_parallel;
pub mod input;
pub mod kernels;
pub mod memory;
pub mod mixed_precision;
pub mod pipeline;
pub mod plan;
pub mod profile;
pub mod puzzles;
pub mod quantization;

pub mod roofline;
pub mod sampling;
pub mod serving;
pub mod speculative;

pub mod site;
pub mod tensor_parallel;
