use crate::no_forward;
use brrr_backend::{Backend, Result};
use brrr_tensor::Tensor;

/// GELU, tanh approximation (as GPT-2). Saves its input.
pub struct Gelu<B: Backend> {
    pub saved_input: Option<Tensor<B>>,
}

impl<B: Backend> Gelu<B> {
    pub fn new() -> Self {
        Gelu { saved_input: None }
    }

    pub fn forward(&mut self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let y = x.gelu()?;
        self.saved_input = Some(x.clone());
        Ok(y)
    }

    pub fn backward(&mut self, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let x = self.saved_input.take().ok_or_else(|| no_forward("Gelu"))?;
        x.gelu_backward(dy)
    }
}

impl<B: Backend> Default for Gelu<B> {
    fn default() -> Self {
        Self::new()
    }
}
