use crate::{Module, Param, no_forward};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_tensor::Tensor;
use rand::Rng;

/// `y = x Wᵀ + b` with `W: [out, in]` (PyTorch's layout) over the last dimension of x.
pub struct Linear<B: Backend> {
    pub weight: Param<B>,
    pub bias: Option<Param<B>>,
    /// The input, saved by `forward` for the weight gradient.
    pub saved_input: Option<Tensor<B>>,
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
            saved_input: None,
        })
    }

    pub fn in_features(&self) -> usize {
        self.weight.value.dims()[1]
    }
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

    pub fn forward(&mut self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let x2 = self.rows(x)?;
        // x Wᵀ: the transpose is a view, passed to the GEMM as a flag.
        let mut y = x2.matmul(&self.weight.value.transpose(0, 1)?)?;
        if let Some(b) = &self.bias {
            y = y.add(&b.value)?;
        }
        let mut dims = x.dims().to_vec();
        *dims.last_mut().expect("rank >= 1") = self.out_features();
        self.saved_input = Some(x2);
        y.reshape(dims)
    }

    /// `dW += dyᵀ x`, `db += Σ_rows dy`, returns `dx = dy W`.
    pub fn backward(&mut self, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let x2 = self
            .saved_input
            .take()
            .ok_or_else(|| no_forward("Linear"))?;
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
            b.grad.add_(&dy2.sum_dim(0, false)?)?;
        }
        let dx = dy2.matmul(&self.weight.value)?;
        let mut dims = dy.dims().to_vec();
        *dims.last_mut().expect("rank >= 1") = self.in_features();
        dx.reshape(dims)
    }
}

impl<B: Backend> Module<B> for Linear<B> {
    fn clear_saved(&mut self) {
        self.saved_input = None;
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
