//! GPU puzzles (`book/src/puzzles.md`), in the spirit of Sasha Rush's GPU-Puzzles: small
//! WGSL kernels, each a stub with a marked body to fill in.
//!
//! [`data`] holds the definitions (WGSL sources, workgroup size, dispatch, inputs, CPU
//! reference) as plain data with no GPU dependency, so it compiles for wasm32 and the
//! web app can show the puzzles. Natively, [`gpu`] runs a puzzle's WGSL through wgpu
//! (brrr-wgpu's device) and compares the output with the reference.

pub mod count;
pub mod data;
#[cfg(not(target_arch = "wasm32"))]
pub mod gpu;
pub mod race;

pub use data::{Budget, Puzzle, all};
