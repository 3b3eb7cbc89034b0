use crate::{MicroBatch, Module, Param, Stash};
use brrr_backend::{Backend, DType, Result};
use brrr_tensor::Tensor;
use rand::Rng;

/// A lookup table `[rows, dim]`: token embeddings (ids are tokens) and learned
/// positional embeddings (ids are positions) are the same layer.
pub struct Embedding<B: Backend> {
    /// The table `[rows, dim]`, named `{name}.weight`.
    pub weight: Param<B>,
    /// The ids of each micro-batch in flight, for the scatter-add.
    pub saved_ids: Stash<Tensor<B>>,
}

impl<B: Backend> Embedding<B> {
    /// A `[rows, dim]` table drawn from `N(0, std²)` with `rng`.
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
            saved_ids: Stash::new(),
        })
    }

    /// `[..] ids -> [.., dim]`.
    pub fn forward(&mut self, mb: MicroBatch, ids: &Tensor<B>) -> Result<Tensor<B>> {
        let out = ids.embedding(&self.weight.value)?;
        self.saved_ids.put(mb, ids.clone());
        Ok(out)
    }

    /// Scatter-adds `dout` into the rows that were read. Returns nothing: ids have no
    /// gradient.
    pub fn backward(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<()> {
        let ids = self.saved_ids.take(mb, "Embedding")?;
        if dout.dtype() != self.weight.grad.dtype() {
            // A 16-bit gradient scatter-added into an f32 gradient (beside an f32
            // master): widen it first, so repeated ids add up in f32.
            let wide = dout.to_dtype(self.weight.grad.dtype())?;
            return ids.embedding_backward(&wide, &mut self.weight.grad);
        }
        ids.embedding_backward(dout, &mut self.weight.grad)
    }
}

impl<B: Backend> Module<B> for Embedding<B> {
    fn clear_saved(&mut self) {
        self.saved_ids.clear();
    }
    fn params(&self) -> Vec<&Param<B>> {
        vec![&self.weight]
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        vec![&mut self.weight]
    }
}
