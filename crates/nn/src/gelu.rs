use crate::{MicroBatch, Module, Param, Stash};
use brrr_backend::{Backend, Result};
use brrr_tensor::Tensor;

/// GELU, tanh approximation (as GPT-2). Saves its input.
pub struct Gelu<B: Backend> {
    /// The input of each micro-batch in flight.
    pub saved_input: Stash<Tensor<B>>,
}

impl<B: Backend> Gelu<B> {
    /// A GELU with nothing saved.
    pub fn new() -> Self {
        Gelu {
            saved_input: Stash::new(),
        }
    }

    /// `gelu(x)` element by element, any shape; saves `x` (a view, no copy) under `mb`.
    pub fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        let y = x.gelu()?;
        self.saved_input.put(mb, x.clone());
        Ok(y)
    }

    /// `dx = dy · gelu'(x)` from the input saved under `mb`, which it frees; an error if
    /// `mb` has nothing saved.
    pub fn backward(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let x = self.saved_input.take(mb, "Gelu")?;
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
        self.saved_input.clear();
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.saved_input.discard(mb);
        Ok(())
    }
}

impl<B: Backend> Default for Gelu<B> {
    fn default() -> Self {
        Self::new()
    }
}
