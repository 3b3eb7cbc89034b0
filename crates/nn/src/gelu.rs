use crate::{Module, Param, no_forward};
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

/// No parameters; a module so that its saved input is cleared like everyone else's.
impl<B: Backend> Module<B> for Gelu<B> {
    fn params(&self) -> Vec<&Param<B>> {
        Vec::new()
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        Vec::new()
    }
    fn clear_saved(&mut self) {
        self.saved_input = None;
    }
}

impl<B: Backend> Default for Gelu<B> {
    fn default() -> Self {
        Self::new()
    }
}
