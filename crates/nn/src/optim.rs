use crate::Param;
use brrr_backend::{AdamWParams, Backend, DType, Error, Result};
use brrr_tensor::Tensor;

/// AdamW hyper-parameters. Defaults are GPT-3's (Brown et al. 2020, App. B):
/// β = (0.9, 0.95), ε = 1e-8, weight decay 0.1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
        }
    }
}

/// AdamW with decoupled weight decay (Loshchilov & Hutter 2019) and f32 moments.
///
/// Weight decay applies to matrices (rank ≥ 2: linear weights, embeddings) and not to
/// biases or LayerNorm parameters, as in GPT-2/3 training code: decaying a gain towards
/// zero fights the normalisation it is there to undo.
pub struct AdamW<B: Backend> {
    pub config: AdamWConfig,
    /// Updates taken so far (the `t` of the bias correction).
    pub step: u32,
    /// First and second moments per parameter, in the order `step` receives them.
    pub moments: Vec<(Tensor<B>, Tensor<B>)>,
}

impl<B: Backend> AdamW<B> {
    pub fn new(config: AdamWConfig) -> Self {
        AdamW {
            config,
            step: 0,
            moments: Vec::new(),
        }
    }

    /// One update of every parameter with learning rate `lr`; `grad_scale` multiplies
    /// every gradient first (gradient clipping folds in here, fused into the kernel).
    pub fn step(&mut self, params: Vec<&mut Param<B>>, lr: f32, grad_scale: f32) -> Result<()> {
        if self.moments.is_empty() {
            for p in &params {
                let z = || Tensor::zeros(p.value.backend(), p.value.shape().clone(), DType::F32);
                self.moments.push((z()?, z()?));
            }
        }
        if self.moments.len() != params.len() {
            return Err(Error::invalid(
                "AdamW::step",
                format!(
                    "optimizer holds state for {} parameters, got {}",
                    self.moments.len(),
                    params.len()
                ),
            ));
        }
        self.step += 1;
        for (p, (m, v)) in params.into_iter().zip(&mut self.moments) {
            if m.shape() != p.value.shape() {
                return Err(Error::shape(
                    "AdamW::step",
                    format!(
                        "{}: state {} vs parameter {}",
                        p.name,
                        m.shape(),
                        p.value.shape()
                    ),
                ));
            }
            let hp = AdamWParams {
                lr,
                beta1: self.config.beta1,
                beta2: self.config.beta2,
                eps: self.config.eps,
                weight_decay: if p.value.rank() >= 2 {
                    self.config.weight_decay
                } else {
                    0.0
                },
                step: self.step,
                grad_scale,
            };
            let backend = p.value.backend().clone();
            let grad = p.grad.contiguous()?;
            backend.adamw(
                &hp,
                p.value.buffer_mut()?,
                grad.buffer()?,
                m.buffer_mut()?,
                v.buffer_mut()?,
                None,
                None,
            )?;
        }
        Ok(())
    }
}

/// Global L2 norm of all gradients, `sqrt(Σ_p Σ_i g²)`, summed on the device and read
/// back once (the number is logged anyway).
#[cfg(not(target_arch = "wasm32"))]
pub fn grad_norm<B: Backend>(params: &[&Param<B>]) -> Result<f64> {
    let mut total: Option<Tensor<B>> = None;
    for p in params {
        let ss = p.grad.to_dtype(DType::F32)?.square()?.sum_all()?;
        match &mut total {
            None => total = Some(ss),
            Some(t) => t.add_(&ss)?,
        }
    }
    Ok(match total {
        Some(t) => t.to_scalar_f64()?.sqrt(),
        None => 0.0,
    })
}

/// The factor that clips the global gradient norm to `max_norm`:
/// `min(1, max_norm / (norm + 1e-6))`, as `torch.nn.utils.clip_grad_norm_` computes it.
/// Pass it to [`AdamW::step`] as `grad_scale` rather than rescaling every gradient.
#[cfg(not(target_arch = "wasm32"))]
pub fn clip_grad_norm<B: Backend>(params: &[&Param<B>], max_norm: f64) -> Result<(f64, f32)> {
    if max_norm.is_nan() || max_norm <= 0.0 {
        return Err(Error::invalid(
            "clip_grad_norm",
            format!("max_norm must be positive, got {max_norm}"),
        ));
    }
    let norm = grad_norm(params)?;
    Ok((norm, (max_norm / (norm + 1e-6)).min(1.0) as f32))
}
