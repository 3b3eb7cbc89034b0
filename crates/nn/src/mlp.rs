use crate::{Gelu, Linear, LinearLayer, MicroBatch, Module, Param};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_tensor::Tensor;
use rand::Rng;

/// The transformer's feed-forward network: `c_proj(gelu(c_fc(x)))`, 4× wide inside.
///
/// Built from [`LinearLayer`]s, so a column-parallel `c_fc` and a row-parallel `c_proj`
/// (each holding a slice of the inner width) make a tensor-parallel MLP whose shards'
/// outputs sum to the full one (Megatron-LM, Shoeybi et al. 2019, §3).
pub struct Mlp<B: Backend> {
    /// `[.., C] -> [.., inner]`.
    pub c_fc: Box<dyn LinearLayer<B>>,
    /// The activation between the projections (tanh approximation).
    pub gelu: Gelu<B>,
    /// `[.., inner] -> [.., C]`.
    pub c_proj: Box<dyn LinearLayer<B>>,
}

impl<B: Backend> Mlp<B> {
    /// An MLP of width `n_embd` and inner width `4·n_embd` (GPT-2), parameters named
    /// `{name}.c_fc.*` and `{name}.c_proj.*`; `c_fc`'s weights from `N(0, 0.02²)`,
    /// `c_proj`'s (a residual projection) from `N(0, proj_std²)`, biases zero.
    pub fn new(
        backend: &B,
        name: &str,
        n_embd: usize,
        proj_std: f64,
        dtype: DType,
        rng: &mut impl Rng,
    ) -> Result<Self> {
        let c_fc = Linear::new(
            backend,
            &format!("{name}.c_fc"),
            n_embd,
            4 * n_embd,
            true,
            0.02,
            dtype,
            rng,
        )?;
        let c_proj = Linear::new(
            backend,
            &format!("{name}.c_proj"),
            4 * n_embd,
            n_embd,
            true,
            proj_std,
            dtype,
            rng,
        )?;
        Self::from_parts(Box::new(c_fc), Box::new(c_proj))
    }

    /// An MLP from its two projections; `c_proj` must read what `c_fc` writes.
    pub fn from_parts(
        c_fc: Box<dyn LinearLayer<B>>,
        c_proj: Box<dyn LinearLayer<B>>,
    ) -> Result<Self> {
        if c_fc.out_features() != c_proj.in_features() {
            return Err(Error::invalid(
                "Mlp::from_parts",
                format!(
                    "c_fc writes {} features but c_proj reads {}",
                    c_fc.out_features(),
                    c_proj.in_features()
                ),
            ));
        }
        Ok(Mlp {
            c_fc,
            gelu: Gelu::new(),
            c_proj,
        })
    }

    /// `[.., C] -> [.., C]`, saving under `mb`.
    pub fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        let h = self.c_fc.forward(mb, x)?;
        let h = self.gelu.forward(mb, &h)?;
        self.c_proj.forward(mb, &h)
    }

    /// `dy -> dx` for micro-batch `mb`.
    pub fn backward(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let dh = self.c_proj.backward(mb, dy)?;
        let dh = self.gelu.backward(mb, &dh)?;
        self.c_fc.backward(mb, &dh)
    }

    /// [`Mlp::backward`] without the projections' weight gradients (the zero-bubble
    /// "B"); they wait for [`Mlp::backward_weight`].
    pub fn backward_input(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let dh = self.c_proj.backward_input(mb, dy)?;
        let dh = self.gelu.backward(mb, &dh)?;
        self.c_fc.backward_input(mb, &dh)
    }

    /// The projections' weight gradients of micro-batch `mb` (the zero-bubble "W").
    pub fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        self.c_proj.backward_weight(mb)?;
        self.c_fc.backward_weight(mb)
    }
}

impl<B: Backend> Module<B> for Mlp<B> {
    fn clear_saved(&mut self) {
        self.c_fc.clear_saved();
        self.gelu.clear_saved();
        self.c_proj.clear_saved();
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.c_fc.discard_saved(mb)?;
        self.gelu.discard_saved(mb)?;
        self.c_proj.discard_saved(mb)
    }
    fn params(&self) -> Vec<&Param<B>> {
        let mut v = self.c_fc.params();
        v.extend(self.c_proj.params());
        v
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = self.c_fc.params_mut();
        v.extend(self.c_proj.params_mut());
        v
    }
}
