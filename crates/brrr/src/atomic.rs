//! Atomic file replacement: [`brrr_train::atomic`], re-exported where the CLI's files
//! (metrics, the loss plot) use it.

pub use brrr_train::atomic::*;
