//! # brrr-exercises
//!
//! The exercises of the brrr book, in the book's order. Each exercise is one file: its
//! statement (the module doc, with a `## Hint`), a stub marked `YOUR CODE` for the
//! reader, and a `check` that compares the stub with brrr's own crates on fresh random
//! inputs. Its `solution` module lives in `src/solutions/`, out of the reader's way; the
//! cargo feature `solutions` swaps every stub for its solution.
//!
//! ```text
//! cargo run -p brrr-exercises                  # every exercise, pass/fail, in book order
//! cargo run -p brrr-exercises -- gemm_cost     # the ones whose name contains gemm_cost
//! cargo test -p brrr-exercises -- --include-ignored regimes::
//! ```
//!
//! On the stubs the tests are `#[ignore]`d, so that `cargo test --workspace` stays green
//! on an untouched checkout; `--include-ignored` (or the runner) runs them.
//!
//! The [`puzzles`] are GPU kernels in WGSL: their definitions are plain data that
//! compile for wasm32 (the web app shows them); natively, `puzzles::gpu::Checker` checks one on
//! a wgpu adapter.

// The exercises' checks compare with brrr's crates through blocking reads, which only
// native targets have; on wasm32 the crate is the puzzle definitions (for the web app).
#[cfg(not(target_arch = "wasm32"))]
pub mod amp;
pub mod check;
#[cfg(not(target_arch = "wasm32"))]
pub mod checkpointing;
pub mod collectives;
#[cfg(not(target_arch = "wasm32"))]
pub mod data;
#[cfg(not(target_arch = "wasm32"))]
pub mod data_parallel;
#[cfg(not(target_arch = "wasm32"))]
pub mod gpu;
#[cfg(not(target_arch = "wasm32"))]
pub mod kernels;
#[cfg(not(target_arch = "wasm32"))]
pub mod memory;
#[cfg(not(target_arch = "wasm32"))]
pub mod pipeline;
#[cfg(not(target_arch = "wasm32"))]
pub mod planning;
pub mod puzzles;
#[cfg(not(target_arch = "wasm32"))]
pub mod regimes;
#[cfg(not(target_arch = "wasm32"))]
mod registry;
#[cfg(not(target_arch = "wasm32"))]
pub mod serving;
#[cfg(not(target_arch = "wasm32"))]
pub mod tensor_parallel;
#[cfg(not(target_arch = "wasm32"))]
pub mod training;
#[cfg(not(target_arch = "wasm32"))]
pub use registry::{Exercise, all};
