//! Losses.

use brrr_backend::{Backend, Result};
use brrr_tensor::Tensor;

/// Mean cross-entropy of `[.., V]` logits against i32 targets, as a one-element
/// tensor (stays on the device), and the per-position losses.
pub fn cross_entropy<B: Backend>(
    logits: &Tensor<B>,
    targets: &Tensor<B>,
) -> Result<(Tensor<B>, Tensor<B>)> {
    let losses = logits.cross_entropy(targets)?;
    Ok((losses.mean_all()?, losses))
}

/// `log(V)`: the loss of a model that predicts the uniform distribution, the value a
/// freshly initialised model should start near.
pub fn uniform_loss(vocab_size: usize) -> f64 {
    (vocab_size as f64).ln()
}
