use crate::region::Region;
use crate::{CausalSelfAttention, LayerNorm, MicroBatch, Mlp, Module, Param};
use brrr_backend::{Backend, DType, Result};
use brrr_tensor::Tensor;
use rand::Rng;

/// A pre-norm transformer block (GPT-2, Radford et al. 2019, §2.3):
/// `x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))`.
pub struct Block<B: Backend> {
    /// The block's name (`h.3`): its parameters' prefix, and the name of its regions
    /// in a profile ([`Backend::begin_region`]).
    pub name: String,
    /// The LayerNorm before attention.
    pub ln_1: LayerNorm<B>,
    /// The attention branch.
    pub attn: CausalSelfAttention<B>,
    /// The LayerNorm before the MLP.
    pub ln_2: LayerNorm<B>,
    /// The feed-forward branch.
    pub mlp: Mlp<B>,
}

impl<B: Backend> Block<B> {
    /// A block of width `n_embd` with `n_head` heads (`n_embd` must divide by it, or
    /// the attention's construction fails), parameters named `{name}.ln_1.weight`,
    /// `{name}.attn.c_attn.weight`, ...; `proj_std` is the init std of the two residual
    /// projections (`attn.c_proj`, `mlp.c_proj`), the other weights get 0.02.
    pub fn new(
        backend: &B,
        name: &str,
        n_embd: usize,
        n_head: usize,
        proj_std: f64,
        dtype: DType,
        rng: &mut impl Rng,
    ) -> Result<Self> {
        Ok(Block {
            name: name.to_string(),
            ln_1: LayerNorm::new(backend, &format!("{name}.ln_1"), n_embd, dtype)?,
            attn: CausalSelfAttention::new(
                backend,
                &format!("{name}.attn"),
                n_embd,
                n_head,
                proj_std,
                dtype,
                rng,
            )?,
            ln_2: LayerNorm::new(backend, &format!("{name}.ln_2"), n_embd, dtype)?,
            mlp: Mlp::new(
                backend,
                &format!("{name}.mlp"),
                n_embd,
                proj_std,
                dtype,
                rng,
            )?,
        })
    }

    /// `[B, T, C] -> [B, T, C]`, saving under `mb`.
    pub fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        let (be, n) = (x.backend(), &self.name);
        let _block = Region::open(be, || format!("{n} forward"));
        // Each branch in a scope: its region closes, and the LayerNorm's output is freed,
        // as soon as the branch is done, as in one expression (brrr-checkpoint counts
        // the memory a block holds, and its test measures it).
        let a = {
            let h = {
                let _r = Region::open(be, || format!("{n}.ln_1 forward"));
                self.ln_1.forward(mb, x)?
            };
            let _r = Region::open(be, || format!("{n}.attn forward"));
            self.attn.forward(mb, &h)?
        };
        let x1 = x.add(&a)?;
        let m = {
            let h = {
                let _r = Region::open(be, || format!("{n}.ln_2 forward"));
                self.ln_2.forward(mb, &x1)?
            };
            let _r = Region::open(be, || format!("{n}.mlp forward"));
            self.mlp.forward(mb, &h)?
        };
        x1.add(&m)
    }

    /// The residual connections pass the gradient straight through and add the
    /// branch's gradient to it.
    pub fn backward(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        self.backward_parts(mb, dout, false)
    }

    /// [`Block::backward`] with the four projections' weight gradients deferred to
    /// [`Block::backward_weight`] (the zero-bubble "B"). The LayerNorms' `γ, β`
    /// gradients stay here: each is a reduction over rows, `O(rows·C)` against the
    /// projections' `O(rows·C²)` GEMMs, too little to fill a bubble, and deferring it
    /// would keep their inputs alive longer for nothing (Qi et al. 2023 split only the
    /// matmuls as well). Returns bitwise the `dx` of [`Block::backward`].
    pub fn backward_input(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        self.backward_parts(mb, dout, true)
    }

    /// The backward, with the projections' weight gradients deferred when `split`.
    fn backward_parts(
        &mut self,
        mb: MicroBatch,
        dout: &Tensor<B>,
        split: bool,
    ) -> Result<Tensor<B>> {
        let (be, n) = (dout.backend(), &self.name);
        let pass = if split { "backward_input" } else { "backward" };
        let _block = Region::open(be, || format!("{n} {pass}"));
        let mut dx1 = {
            let dm = {
                let _r = Region::open(be, || format!("{n}.mlp {pass}"));
                match split {
                    false => self.mlp.backward(mb, dout)?,
                    true => self.mlp.backward_input(mb, dout)?,
                }
            };
            let _r = Region::open(be, || format!("{n}.ln_2 backward"));
            self.ln_2.backward(mb, &dm)?
        };
        dx1.add_(dout)?;
        let mut dx = {
            let da = {
                let _r = Region::open(be, || format!("{n}.attn {pass}"));
                match split {
                    false => self.attn.backward(mb, &dx1)?,
                    true => self.attn.backward_input(mb, &dx1)?,
                }
            };
            let _r = Region::open(be, || format!("{n}.ln_1 backward"));
            self.ln_1.backward(mb, &da)?
        };
        dx.add_(&dx1)?;
        Ok(dx)
    }

    /// The projections' weight gradients of micro-batch `mb` (the zero-bubble "W").
    pub fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        let be = self.ln_1.gamma.value.backend();
        let _block = Region::open(be, || format!("{} backward_weight", self.name));
        self.mlp.backward_weight(mb)?;
        self.attn.backward_weight(mb)
    }
}

impl<B: Backend> Module<B> for Block<B> {
    fn clear_saved(&mut self) {
        self.ln_1.clear_saved();
        self.attn.clear_saved();
        self.ln_2.clear_saved();
        self.mlp.clear_saved();
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.ln_1.discard_saved(mb)?;
        self.attn.discard_saved(mb)?;
        self.ln_2.discard_saved(mb)?;
        self.mlp.discard_saved(mb)
    }
    fn params(&self) -> Vec<&Param<B>> {
        let mut v = self.ln_1.params();
        v.extend(self.attn.params());
        v.extend(self.ln_2.params());
        v.extend(self.mlp.params());
        v
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = self.ln_1.params_mut();
        v.extend(self.attn.params_mut());
        v.extend(self.ln_2.params_mut());
        v.extend(self.mlp.params_mut());
        v
    }
}
