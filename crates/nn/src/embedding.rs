use crate::{Module, Param, no_forward};
use brrr_backend::{Backend, DType, Result};
use brrr_tensor::Tensor;
use rand::Rng;

/// A lookup table `[rows, dim]`: token embeddings (ids are tokens) and learned
/// positional embeddings (ids are positions) are the same layer.
pub struct Embedding<B: Backend> {
    pub weight: Param<B>,
    pub saved_ids: Option<Tensor<B>>,
}

impl<B: Backend> Embedding<B> {
    pub fn new(
        backend: &B,
        name: &str,
        rows: usize,
        dim: usize,
        std: f64,
        dtype: DType,
        rng: &mut impl Rng,
    ) -> Result<Self> {
        let w = Tensor::randn(backend, [rows, dim], dtype, 0.0, std, rng)?;
        Ok(Embedding {
            weight: Param::new(format!("{name}.weight"), w)?,
            saved_ids: None,
        })
    }

    /// `[..] ids -> [.., dim]`.
    pub fn forward(&mut self, ids: &Tensor<B>) -> Result<Tensor<B>> {
        let out = ids.embedding(&self.weight.value)?;
        self.saved_ids = Some(ids.clone());
        Ok(out)
    }

    /// Scatter-adds `dout` into the rows that were read. Returns nothing: ids have no
    /// gradient.
    pub fn backward(&mut self, dout: &Tensor<B>) -> Result<()> {
        let ids = self
            .saved_ids
            .take()
            .ok_or_else(|| no_forward("Embedding"))?;
        ids.embedding_backward(dout, &mut self.weight.grad)
    }
}

impl<B: Backend> Module<B> for Embedding<B> {
    fn clear_saved(&mut self) {
        self.saved_ids = None;
    }
    fn params(&self) -> Vec<&Param<B>> {
        vec![&self.weight]
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        vec![&mut self.weight]
    }
}
