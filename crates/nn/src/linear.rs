use crate::{MicroBatch, Module, Param, Stash};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_tensor::Tensor;
use rand::Rng;

/// A linear map over the last dimension, as attention and the MLP use it: the plain
/// [`Linear`], or (for tensor parallelism) a column- or row-parallel shard of one, where
/// `in_features`/`out_features` are the shard's local widths (Megatron-LM, Shoeybi et
/// al. 2019, §3: `c_attn` and `c_fc` split by output columns, the two `c_proj` by input
/// rows). Layers built from it read their widths from it, never from a global config.
///
/// `forward` saves what the backward needs under the micro-batch `mb`; `backward` of the
/// same `mb` consumes it, accumulates the parameter gradients and returns `dx`.
pub trait LinearLayer<B: Backend>: Module<B> {
    /// Width of the input's last dimension.
    fn in_features(&self) -> usize;
    /// Width of the output's last dimension.
    fn out_features(&self) -> usize;
    /// `[.., in] -> [.., out]`.
    fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>>;
    /// `dy: [.., out] -> dx: [.., in]`, accumulating parameter gradients.
    fn backward(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>>;

    /// The zero-bubble "B" (Qi et al., "Zero Bubble Pipeline Parallelism", 2023, §2):
    /// only `dx`, keeping what the weight gradient needs under `mb` for a later
    /// [`LinearLayer::backward_weight`]. A layer that does not split its backward keeps
    /// this default, the whole backward, and its weight gradient stays in B.
    fn backward_input(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        self.backward(mb, dy)
    }

    /// The zero-bubble "W": accumulates the parameter gradients of micro-batch `mb`
    /// from what [`LinearLayer::backward_input`] kept, and frees it. The default does
    /// nothing (the default B already accumulated them).
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        let _ = mb;
        Ok(())
    }

    /// The layer as a LoRA layer ([`crate::lora::LoraLinear`]), which answers `Some`:
    /// how [`crate::lora::merge_adapters`] finds the adapters to fold in.
    fn as_lora_mut(&mut self) -> Option<&mut crate::lora::LoraLinear<B>> {
        None
    }
}

/// `y = x Wᵀ + b` with `W: [out, in]` (PyTorch's layout) over the last dimension of x.
pub struct Linear<B: Backend> {
    /// `W: [out, in]`, named `{name}.weight`.
    pub weight: Param<B>,
    /// `b: [out]`, named `{name}.bias`; `None` for a layer built without one.
    pub bias: Option<Param<B>>,
    /// The input `[rows, in]` of each micro-batch in flight, saved by `forward` for the
    /// weight gradient.
    pub saved_input: Stash<Tensor<B>>,
    /// The input `[rows, in]` and output gradient `[rows, out]` of each micro-batch
    /// whose input gradient ([`Linear::backward_input`]) ran and whose weight gradient
    /// ([`Linear::backward_weight`]) has not: the zero-bubble schedules' deferred W.
    pub pending_weight: Stash<(Tensor<B>, Tensor<B>)>,
}

impl<B: Backend> Linear<B> {
    /// Weights from `N(0, std²)`, bias zero (GPT-2's initialisation).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        backend: &B,
        name: &str,
        in_features: usize,
        out_features: usize,
        bias: bool,
        std: f64,
        dtype: DType,
        rng: &mut impl Rng,
    ) -> Result<Self> {
        let w = Tensor::randn(backend, [out_features, in_features], dtype, 0.0, std, rng)?;
        let bias = if bias {
            let b = Tensor::zeros(backend, [out_features], dtype)?;
            Some(Param::new(format!("{name}.bias"), b)?)
        } else {
            None
        };
        Ok(Linear {
            weight: Param::new(format!("{name}.weight"), w)?,
            bias,
            saved_input: Stash::new(),
            pending_weight: Stash::new(),
        })
    }

    /// A layer with the given weight `[out, in]` and optional bias `[out]`, named
    /// `{name}.weight` and `{name}.bias`: how a shard of a larger layer is built.
    pub fn from_weights(name: &str, weight: Tensor<B>, bias: Option<Tensor<B>>) -> Result<Self> {
        if weight.rank() != 2 {
            return Err(Error::shape(
                "Linear::from_weights",
                format!("{name}: weight must be [out, in], got {}", weight.shape()),
            ));
        }
        if let Some(b) = &bias
            && b.dims() != [weight.dims()[0]]
        {
            return Err(Error::shape(
                "Linear::from_weights",
                format!(
                    "{name}: bias {} does not match weight {}",
                    b.shape(),
                    weight.shape()
                ),
            ));
        }
        let bias = match bias {
            Some(b) => Some(Param::new(format!("{name}.bias"), b)?),
            None => None,
        };
        Ok(Linear {
            weight: Param::new(format!("{name}.weight"), weight)?,
            bias,
            saved_input: Stash::new(),
            pending_weight: Stash::new(),
        })
    }

    /// Width of the input's last dimension.
    pub fn in_features(&self) -> usize {
        self.weight.value.dims()[1]
    }
    /// Width of the output's last dimension.
    pub fn out_features(&self) -> usize {
        self.weight.value.dims()[0]
    }

    /// Flattens `[.., in]` to `[rows, in]`.
    fn rows(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let n = *x.dims().last().unwrap_or(&0);
        if n != self.in_features() {
            return Err(Error::shape(
                "Linear::forward",
                format!(
                    "{}: input {} does not end in in_features = {}",
                    self.weight.name,
                    x.shape(),
                    self.in_features()
                ),
            ));
        }
        x.reshape([x.elem_count() / n.max(1), n])
    }

    /// `[.., in] -> [.., out]`, saving the input under `mb`.
    pub fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        let x2 = self.rows(x)?;
        // x Wᵀ: the transpose is a view, passed to the GEMM as a flag.
        let mut y = x2.matmul(&self.weight.value.transpose(0, 1)?)?;
        if let Some(b) = &self.bias {
            y = y.add(&b.value)?;
        }
        let mut dims = x.dims().to_vec();
        *dims.last_mut().expect("rank >= 1") = self.out_features();
        self.saved_input.put(mb, x2);
        y.reshape(dims)
    }

    /// `dW += dyᵀ x`, `db += Σ_rows dy`, returns `dx = dy W`.
    pub fn backward(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let x2 = self.saved_input.take(mb, "Linear")?;
        let out = self.out_features();
        let dy2 = dy.reshape([dy.elem_count() / out.max(1), out])?;
        if dy2.dims()[0] != x2.dims()[0] {
            return Err(Error::shape(
                "Linear::backward",
                format!(
                    "gradient {} does not match the saved input {}",
                    dy.shape(),
                    x2.shape()
                ),
            ));
        }
        Tensor::matmul_into(&mut self.weight.grad, &dy2.transpose(0, 1)?, &x2, 1.0, 1.0)?;
        if let Some(b) = &mut self.bias {
            b.accumulate_grad(&dy2.sum_dim(0, false)?)?;
        }
        let dx = dy2.matmul(&self.weight.value)?;
        let mut dims = dy.dims().to_vec();
        *dims.last_mut().expect("rank >= 1") = self.in_features();
        dx.reshape(dims)
    }

    /// The input gradient only, `dx = dy W` (the zero-bubble "B"): keeps the saved input
    /// and `dy` under `mb` until [`Linear::backward_weight`]. `dx` is bitwise the one
    /// [`Linear::backward`] returns (the same GEMM on the same operands).
    pub fn backward_input(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let x2 = self.saved_input.take(mb, "Linear")?;
        let out = self.out_features();
        let dy2 = dy.reshape([dy.elem_count() / out.max(1), out])?;
        if dy2.dims()[0] != x2.dims()[0] {
            return Err(Error::shape(
                "Linear::backward_input",
                format!(
                    "gradient {} does not match the saved input {}",
                    dy.shape(),
                    x2.shape()
                ),
            ));
        }
        let dx = dy2.matmul(&self.weight.value)?;
        self.pending_weight.put(mb, (x2, dy2));
        let mut dims = dy.dims().to_vec();
        *dims.last_mut().expect("rank >= 1") = self.in_features();
        dx.reshape(dims)
    }

    /// The weight gradient of micro-batch `mb` (the zero-bubble "W"): `dW += dyᵀ x`,
    /// `db += Σ_rows dy` with the kernels [`Linear::backward`] uses, then frees what
    /// [`Linear::backward_input`] kept. An error if B of `mb` has not run (or W already
    /// did).
    pub fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        if !self.pending_weight.contains(mb) {
            return Err(Error::invalid(
                "Linear::backward_weight",
                format!(
                    "{}: no input gradient (B) of {mb} is waiting for its weight gradient \
                     (W before B, or W twice)",
                    self.weight.name
                ),
            ));
        }
        let (x2, dy2) = self.pending_weight.take(mb, "Linear")?;
        Tensor::matmul_into(&mut self.weight.grad, &dy2.transpose(0, 1)?, &x2, 1.0, 1.0)?;
        if let Some(b) = &mut self.bias {
            b.accumulate_grad(&dy2.sum_dim(0, false)?)?;
        }
        Ok(())
    }
}

impl<B: Backend> LinearLayer<B> for Linear<B> {
    fn in_features(&self) -> usize {
        Linear::in_features(self)
    }
    fn out_features(&self) -> usize {
        Linear::out_features(self)
    }
    fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        Linear::forward(self, mb, x)
    }
    fn backward(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        Linear::backward(self, mb, dy)
    }
    fn backward_input(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        Linear::backward_input(self, mb, dy)
    }
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        Linear::backward_weight(self, mb)
    }
}

impl<B: Backend> Module<B> for Linear<B> {
    fn clear_saved(&mut self) {
        self.saved_input.clear();
        self.pending_weight.clear();
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.saved_input.discard(mb);
        self.pending_weight.discard(mb);
        Ok(())
    }
    fn params(&self) -> Vec<&Param<B>> {
        let mut v = vec![&self.weight];
        v.extend(self.bias.as_ref());
        v
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = vec![&mut self.weight];
        v.extend(self.bias.as_mut());
        v
    }
}
