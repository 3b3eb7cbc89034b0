use brrr_backend::{Backend, DType, Error, Result};
use brrr_tensor::Tensor;

/// A trainable tensor and its gradient (same shape). Gradients accumulate across
/// backward calls until [`Param::zero_grad`].
///
/// Mixed-precision training keeps an f32 `master` beside a low-precision `value`
/// ([`Param::with_master`]): layers compute with `value`, the optimizer updates `master`
/// and rewrites `value` from it (rounded once), so updates smaller than `value`'s
/// precision still add up (Micikevicius et al. 2018, "Mixed Precision Training", §3.1).
pub struct Param<B: Backend> {
    /// Dotted path such as `h.0.attn.c_attn.weight` (GPT-2's checkpoint names).
    pub name: String,
    /// The values layers compute with (the compute dtype).
    pub value: Tensor<B>,
    /// The gradient: `value`'s dtype, or f32 beside a master copy.
    pub grad: Tensor<B>,
    /// The f32 master copy that [`crate::AdamW`] updates, when there is one.
    pub master: Option<Tensor<B>>,
}

impl<B: Backend> Param<B> {
    /// A parameter trained in its own dtype; the gradient has the same dtype.
    pub fn new(name: impl Into<String>, value: Tensor<B>) -> Result<Self> {
        let grad = Tensor::zeros(value.backend(), value.shape().clone(), value.dtype())?;
        Ok(Param {
            name: name.into(),
            value,
            grad,
            master: None,
        })
    }

    /// A parameter with an f32 master copy: `value_f32` becomes the master, `value` its
    /// copy in `compute_dtype` (f16, bf16 or f32, rounded to nearest even), and the
    /// gradient is zeros in `grad_dtype` (f32, or `compute_dtype`).
    pub fn with_master(
        name: impl Into<String>,
        value_f32: Tensor<B>,
        compute_dtype: DType,
        grad_dtype: DType,
    ) -> Result<Self> {
        const OP: &str = "Param::with_master";
        let name = name.into();
        if value_f32.dtype() != DType::F32 {
            return Err(Error::invalid(
                OP,
                format!("{name}: the master must be f32, got {}", value_f32.dtype()),
            ));
        }
        if !matches!(compute_dtype, DType::F16 | DType::BF16 | DType::F32)
            || !(grad_dtype == DType::F32 || grad_dtype == compute_dtype)
        {
            return Err(Error::invalid(
                OP,
                format!(
                    "{name}: compute dtype must be f16, bf16 or f32 and the gradient f32 or \
                     the compute dtype; got {compute_dtype} and {grad_dtype}"
                ),
            ));
        }
        // A private buffer for the master (the optimizer writes it in place), and a
        // private compute copy even when the dtypes agree.
        let master = value_f32.contiguous()?.deep_clone()?;
        let value = if compute_dtype == DType::F32 {
            master.deep_clone()?
        } else {
            master.to_dtype(compute_dtype)?
        };
        let grad = Tensor::zeros(master.backend(), master.shape().clone(), grad_dtype)?;
        Ok(Param {
            name,
            value,
            grad,
            master: Some(master),
        })
    }

    /// `grad += g`, converting `g` to the gradient's dtype first when they differ: a
    /// layer computing in f16/bf16 adds its 16-bit partial gradient into the f32 gradient
    /// that sits beside an f32 master, so accumulation across micro-batches is f32.
    pub fn accumulate_grad(&mut self, g: &Tensor<B>) -> Result<()> {
        if g.dtype() == self.grad.dtype() {
            self.grad.add_(g)
        } else {
            self.grad.add_(&g.to_dtype(self.grad.dtype())?)
        }
    }

    /// Sets the gradient to zero, in place (its buffer must not be shared).
    pub fn zero_grad(&mut self) -> Result<()> {
        self.grad.fill_(0.0)
    }

    /// Number of elements of the parameter.
    pub fn numel(&self) -> usize {
        self.value.elem_count()
    }
}

/// Anything with parameters. Names are dotted paths (`h.0.attn.c_attn.weight`), the
/// same as GPT-2's checkpoints use.
pub trait Module<B: Backend> {
    /// Every parameter, in a fixed order (the order optimizers and checkpoints rely on).
    fn params(&self) -> Vec<&Param<B>>;
    /// Every parameter, writable, in the same order as [`Module::params`].
    fn params_mut(&mut self) -> Vec<&mut Param<B>>;

    /// Drops everything `forward` saved for the backward (its activations), for a
    /// forward that no backward follows: evaluation, sampling. Each layer clears its own
    /// fields and calls its sublayers, so a new layer that saves something cannot be
    /// forgotten by its parent.
    fn clear_saved(&mut self);

    /// Drops what `forward` saved for micro-batch `mb` only (nothing if it saved
    /// nothing): how activation recomputation runs a forward that keeps nothing, or
    /// drops a stash to recompute it later. Other micro-batches in flight keep theirs.
    /// Layers that save nothing may keep the default, an error naming the layer, so that
    /// a layer that saves activations but cannot drop them is caught, not leaked.
    fn discard_saved(&mut self, mb: crate::MicroBatch) -> Result<()> {
        Err(Error::invalid(
            "Module::discard_saved",
            format!("this layer cannot drop what it saved for {mb}"),
        ))
    }

    /// Zeroes every parameter's gradient (before a step's first backward: backwards
    /// accumulate), with [`zero_grads`].
    fn zero_grad(&mut self) -> Result<()> {
        zero_grads(self.params_mut())
    }

    /// Total number of parameter elements.
    fn num_params(&self) -> usize {
        self.params().iter().map(|p| p.numel()).sum()
    }
}

/// Zeroes these gradients: one [`Backend::multi_tensor_fill`] over all of them when each
/// is a whole buffer of its own (one launch on brrr-cuda), else [`Param::zero_grad`] on
/// each (a gradient that is a view into a larger buffer).
pub fn zero_grads<B: Backend>(mut params: Vec<&mut Param<B>>) -> Result<()> {
    let Some(backend) = params.first().map(|p| p.grad.backend().clone()) else {
        return Ok(());
    };
    if params.iter().all(|p| p.grad.is_dense()) {
        // A gradient whose buffer another tensor shares fails here, as `fill_` would.
        let mut bufs = params
            .iter_mut()
            .map(|p| p.grad.buffer_mut())
            .collect::<Result<Vec<_>>>()?;
        return backend.multi_tensor_fill(&mut bufs, 0.0);
    }
    for p in params {
        p.zero_grad()?;
    }
    Ok(())
}
