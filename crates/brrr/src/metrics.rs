//! Training metrics and the loss plot: [`brrr_train::metrics`], re-exported.

pub use brrr_train::metrics::*;
