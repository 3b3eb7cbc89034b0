use brrr_backend::{Backend, Result};
use brrr_tensor::Tensor;

/// A trainable tensor and its gradient (same shape and dtype). Gradients accumulate
/// across backward calls until [`Param::zero_grad`].
pub struct Param<B: Backend> {
    pub name: String,
    pub value: Tensor<B>,
    pub grad: Tensor<B>,
}

impl<B: Backend> Param<B> {
    pub fn new(name: impl Into<String>, value: Tensor<B>) -> Result<Self> {
        let grad = Tensor::zeros(value.backend(), value.shape().clone(), value.dtype())?;
        Ok(Param {
            name: name.into(),
            value,
            grad,
        })
    }

    pub fn zero_grad(&mut self) -> Result<()> {
        self.grad.fill_(0.0)
    }

    pub fn numel(&self) -> usize {
        self.value.elem_count()
    }
}

/// Anything with parameters. Names are dotted paths (`h.0.attn.c_attn.weight`), the
/// same as GPT-2's checkpoints use.
pub trait Module<B: Backend> {
    fn params(&self) -> Vec<&Param<B>>;
    fn params_mut(&mut self) -> Vec<&mut Param<B>>;

    /// Drops everything `forward` saved for the backward (its activations), for a
    /// forward that no backward follows: evaluation, sampling. Each layer clears its own
    /// fields and calls its sublayers, so a new layer that saves something cannot be
    /// forgotten by its parent.
    fn clear_saved(&mut self);

    fn zero_grad(&mut self) -> Result<()> {
        for p in self.params_mut() {
            p.zero_grad()?;
        }
        Ok(())
    }

    fn num_params(&self) -> usize {
        self.params().iter().map(|p| p.numel()).sum()
    }
}
