use crate::{MicroBatch, Module, Param, Stash};
use brrr_backend::{Backend, DType, Result};
use brrr_tensor::{LayerNormStats, Tensor};

/// LayerNorm over the last dimension (Ba et al. 2016), `gamma = 1`, `beta = 0` at init.
pub struct LayerNorm<B: Backend> {
    /// The scale `γ`, `[dim]`, named `{name}.weight` (PyTorch's and GPT-2's name).
    pub gamma: Param<B>,
    /// The shift `β`, `[dim]`, named `{name}.bias`.
    pub beta: Param<B>,
    /// Added to the variance before the square root: `1e-5`, PyTorch's default.
    pub eps: f32,
    /// The input and its per-row mean and 1/std of each micro-batch in flight, saved
    /// for the backward.
    pub saved: Stash<(Tensor<B>, LayerNormStats<B>)>,
}

impl<B: Backend> LayerNorm<B> {
    /// A LayerNorm over `dim` features with `γ = 1`, `β = 0`, `eps = 1e-5`.
    pub fn new(backend: &B, name: &str, dim: usize, dtype: DType) -> Result<Self> {
        Ok(LayerNorm {
            gamma: Param::new(
                format!("{name}.weight"),
                Tensor::full(backend, [dim], dtype, 1.0)?,
            )?,
            beta: Param::new(
                format!("{name}.bias"),
                Tensor::zeros(backend, [dim], dtype)?,
            )?,
            eps: 1e-5,
            saved: Stash::new(),
        })
    }

    /// `[.., dim] -> [.., dim]`: `(x - mean) / sqrt(var + eps) · γ + β` per row (biased
    /// variance); saves `x` and each row's mean and `1/std` under `mb`.
    pub fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        let (y, stats) = x.layernorm(&self.gamma.value, &self.beta.value, self.eps)?;
        self.saved.put(mb, (x.clone(), stats));
        Ok(y)
    }

    /// Returns `dx` and accumulates into `γ`'s and `β`'s gradients (in f32 when those
    /// are f32 beside 16-bit activations); frees what `mb` saved, and is an error if it
    /// saved nothing.
    pub fn backward(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let (x, stats) = self.saved.take(mb, "LayerNorm")?;
        if self.gamma.grad.dtype() != x.dtype() {
            // f32 gradients beside f32 masters, 16-bit activations: the kernel
            // accumulates in x's dtype, so this micro-batch's part goes through a
            // zeroed buffer and is added in f32.
            let zeros = || Tensor::zeros(x.backend(), self.gamma.grad.shape().clone(), x.dtype());
            let (mut dgamma, mut dbeta) = (zeros()?, zeros()?);
            let dx = x.layernorm_backward(
                dy,
                &self.gamma.value,
                &stats,
                self.eps,
                &mut dgamma,
                &mut dbeta,
            )?;
            self.gamma.accumulate_grad(&dgamma)?;
            self.beta.accumulate_grad(&dbeta)?;
            return Ok(dx);
        }
        x.layernorm_backward(
            dy,
            &self.gamma.value,
            &stats,
            self.eps,
            &mut self.gamma.grad,
            &mut self.beta.grad,
        )
    }
}

impl<B: Backend> Module<B> for LayerNorm<B> {
    fn clear_saved(&mut self) {
        self.saved.clear();
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.saved.discard(mb);
        Ok(())
    }
    fn params(&self) -> Vec<&Param<B>> {
        vec![&self.gamma, &self.beta]
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        vec![&mut self.gamma, &mut self.beta]
    }
}
