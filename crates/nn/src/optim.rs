use crate::Param;
use crate::moments::{self, MomentState, Optimizer};
use brrr_backend::{AdamWParams, AdamWTensors, Backend, DType, Error, Result};
use brrr_tensor::Tensor;

/// AdamW hyper-parameters. Defaults are GPT-3's (Brown et al. 2020, App. B):
/// β = (0.9, 0.95), ε = 1e-8, weight decay 0.1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    /// Decay rate of the first moment (the gradient's running mean).
    pub beta1: f32,
    /// Decay rate of the second moment (the squared gradient's running mean).
    pub beta2: f32,
    /// Added to `sqrt(v̂)` in the denominator, against division by zero.
    pub eps: f32,
    /// Decoupled decay: each step subtracts `lr · weight_decay · p` from a matrix
    /// parameter (never from a bias or LayerNorm parameter, see [`AdamW`]).
    pub weight_decay: f32,
    /// How the moments are kept: f32, or 8-bit block-wise ([`Optimizer`]).
    pub optimizer: Optimizer,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            optimizer: Optimizer::AdamW,
        }
    }
}

/// AdamW with decoupled weight decay (Loshchilov & Hutter 2019), its moments in f32 or
/// (with [`Optimizer::AdamW8bit`]) 8-bit block-wise (Dettmers et al. 2022).
///
/// Weight decay applies to matrices (rank ≥ 2: linear weights, embeddings) and not to
/// biases or LayerNorm parameters, as in GPT-2/3 training code: decaying a gain towards
/// zero fights the normalisation it is there to undo.
pub struct AdamW<B: Backend> {
    /// The hyper-parameters every step uses.
    pub config: AdamWConfig,
    /// Updates taken so far (the `t` of the bias correction).
    pub step: u32,
    /// Each parameter's state, in the order `step` receives them.
    pub moments: Vec<MomentState<B>>,
    /// The 8-bit moments' maps, uploaded by the first step that needs them.
    maps: Option<Tensor<B>>,
}

impl<B: Backend> AdamW<B> {
    /// An optimizer with no state yet: the moments are allocated (zeros, f32, one pair
    /// per parameter) by the first step, which fixes the number and order of parameters
    /// every later step must pass.
    pub fn new(config: AdamWConfig) -> Self {
        AdamW {
            config,
            step: 0,
            moments: Vec::new(),
            maps: None,
        }
    }

    /// Bytes of optimizer state held now (0 before the first step).
    pub fn state_bytes(&self) -> usize {
        self.moments.iter().map(MomentState::bytes).sum()
    }

    /// GaLore's SVDs so far over every projected parameter: how many, and the seconds
    /// they took (0 on wasm32, which has no clock here).
    pub fn svd_time(&self) -> (u32, f64) {
        self.moments
            .iter()
            .filter_map(|s| match s {
                MomentState::Projected(p) => Some((p.svd_count(), p.svd_seconds())),
                _ => None,
            })
            .fold((0, 0.0), |(n, t), (c, s)| (n + c, t + s))
    }

    /// Each parameter's f32 moments, or an error naming `op` when a parameter keeps
    /// another state (for code that saves or shards f32 moments only).
    pub fn f32_moments(&self, op: &'static str) -> Result<Vec<(&Tensor<B>, &Tensor<B>)>> {
        self.moments.iter().map(|s| s.f32_moments(op)).collect()
    }

    /// One update of every parameter with learning rate `lr`; `grad_scale` multiplies
    /// every gradient first (gradient clipping folds in here, fused into the kernel).
    pub fn step(&mut self, params: Vec<&mut Param<B>>, lr: f32, grad_scale: f32) -> Result<()> {
        self.step_scaled(params, lr, grad_scale, None, None)
    }

    /// [`AdamW::step`] with factors that live on the device, so the step needs no host
    /// read: `inv_scale` (f32, one element) multiplies every gradient after `grad_scale`
    /// (the AMP inverse loss scale, or the clip coefficient of
    /// [`clip_grad_norm_on_device`] with `grad_scale = 1`, which is bitwise the same
    /// update as passing that coefficient as `grad_scale`), and a non-zero `found_inf`
    /// (f32, one element) skips the whole update, as a GradScaler-managed step does.
    /// A parameter with an f32 master ([`Param::with_master`]) has its master updated
    /// and its compute `value` rewritten from it in the same kernel.
    pub fn step_scaled(
        &mut self,
        params: Vec<&mut Param<B>>,
        lr: f32,
        grad_scale: f32,
        inv_scale: Option<&Tensor<B>>,
        found_inf: Option<&Tensor<B>>,
    ) -> Result<()> {
        self.init_states(&params)?;
        let Some(backend) = params.first().map(|p| p.value.backend().clone()) else {
            self.step += 1;
            return Ok(());
        };
        self.step += 1;
        let hp = AdamWParams {
            lr,
            beta1: self.config.beta1,
            beta2: self.config.beta2,
            eps: self.config.eps,
            weight_decay: self.config.weight_decay,
            step: self.step,
            grad_scale,
            range: None,
        };
        let maps = self.maps.as_ref();
        let mut full = Vec::with_capacity(params.len());
        for (p, state) in params.into_iter().zip(&mut self.moments) {
            match state {
                MomentState::F32(m, v) => full.push((p, m, v)),
                MomentState::Bits8 { codes, absmax } => {
                    let maps = maps.ok_or_else(|| Error::invalid("AdamW::step", "no maps"))?;
                    step_8bit_param(&hp, p, (codes, absmax), maps, inv_scale, found_inf)?;
                }
                MomentState::Projected(proj) => {
                    step_projected(&hp, p, proj, inv_scale, found_inf)?;
                }
            }
        }
        step_f32_params(&backend, &hp, full, inv_scale, found_inf)
    }

    /// Allocates every parameter's state on the first step; checks them on later ones.
    fn init_states(&mut self, params: &[&mut Param<B>]) -> Result<()> {
        let optimizer = self.config.optimizer;
        if self.moments.is_empty() {
            for p in params {
                let backend = p.value.backend();
                let state = MomentState::zeros(backend, optimizer, &p.name, p.value.dims())?;
                if matches!(state, MomentState::Bits8 { .. }) && self.maps.is_none() {
                    self.maps = Some(moments::upload_maps(backend)?);
                }
                self.moments.push(state);
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
        for (p, state) in params.iter().zip(&self.moments) {
            let fits = match state {
                MomentState::F32(m, _) => m.shape() == p.value.shape(),
                MomentState::Bits8 { codes, .. } => {
                    let n = p.value.elem_count();
                    codes.elem_count() == 2 * brrr_backend::quant8::code_words(n)
                }
                // The projector checks its shape on every step.
                MomentState::Projected(_) => true,
            };
            if !fits {
                return Err(Error::shape(
                    "AdamW::step",
                    format!(
                        "{}: the saved state does not fit {}",
                        p.name,
                        p.value.shape()
                    ),
                ));
            }
        }
        // A restored state brings 8-bit moments without the maps they decode with.
        let quantized = self
            .moments
            .iter()
            .any(|s| matches!(s, MomentState::Bits8 { .. }));
        if self.maps.is_none()
            && quantized
            && let Some(p) = params.first()
        {
            self.maps = Some(moments::upload_maps(p.value.backend())?);
        }
        Ok(())
    }
}

/// The f32-moment parameters in one call: a backend that batches the list (brrr-cuda)
/// updates them all in one launch, the others loop over `adamw` / `adamw_master`.
fn step_f32_params<B: Backend>(
    backend: &B,
    hp: &AdamWParams,
    list: Vec<(&mut Param<B>, &mut Tensor<B>, &mut Tensor<B>)>,
    inv_scale: Option<&Tensor<B>>,
    found_inf: Option<&Tensor<B>>,
) -> Result<()> {
    if list.is_empty() {
        return Ok(());
    }
    let inv_scale = inv_scale.map(Tensor::buffer).transpose()?;
    let found_inf = found_inf.map(Tensor::buffer).transpose()?;
    let grads = list
        .iter()
        .map(|(p, _, _)| p.grad.contiguous())
        .collect::<Result<Vec<_>>>()?;
    let mut tensors = Vec::with_capacity(list.len());
    for ((p, m, v), grad) in list.into_iter().zip(&grads) {
        let decay = p.value.rank() >= 2;
        let Param { value, master, .. } = p;
        tensors.push(AdamWTensors {
            param: value.buffer_mut()?,
            master: master.as_mut().map(Tensor::buffer_mut).transpose()?,
            grad: grad.buffer()?,
            m: m.buffer_mut()?,
            v: v.buffer_mut()?,
            decay,
        });
    }
    backend.multi_tensor_adamw(hp, &mut tensors, inv_scale, found_inf)
}

/// One parameter with 8-bit moments: the master (when it has one) takes the step, and
/// the compute copy is rounded from it.
fn step_8bit_param<B: Backend>(
    hp: &AdamWParams,
    p: &mut Param<B>,
    state: (&mut Tensor<B>, &mut Tensor<B>),
    maps: &Tensor<B>,
    inv_scale: Option<&Tensor<B>>,
    found_inf: Option<&Tensor<B>>,
) -> Result<()> {
    let hp = AdamWParams {
        weight_decay: if p.value.rank() >= 2 {
            hp.weight_decay
        } else {
            0.0
        },
        ..*hp
    };
    match &mut p.master {
        None => moments::step_8bit(
            &hp,
            &mut p.value,
            &p.grad,
            state,
            maps,
            inv_scale,
            found_inf,
        ),
        Some(master) => {
            moments::step_8bit(&hp, master, &p.grad, state, maps, inv_scale, found_inf)?;
            p.value = master.to_dtype(p.value.dtype())?;
            Ok(())
        }
    }
}

/// Global L2 norm of all gradients, `sqrt(Σ_p Σ_i g²)`, summed on the device and read
/// back once (the number is logged anyway), as [`clip_grad_norm_on_device`] sums them:
/// no temporary the size of the largest gradient on a backend that fuses the sum of
/// squares (brrr-cpu, brrr-cuda).
#[cfg(not(target_arch = "wasm32"))]
pub fn grad_norm<B: Backend>(params: &[&Param<B>]) -> Result<f64> {
    let Some(first) = params.first() else {
        return Ok(0.0);
    };
    let backend = first.grad.backend().clone();
    Ok(sum_squares_of_grads(&backend, params)?
        .to_scalar_f64()?
        .sqrt())
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

/// [`clip_grad_norm`] without reading anything back: the squared gradients are summed on
/// the device in the same order as [`grad_norm`], and [`Backend::clip_coefficient`]
/// turns the sum into `(norm, coef)`, two one-element f32 tensors. Pass `coef` to
/// [`AdamW::step_scaled`] as `inv_scale` with `grad_scale = 1`; on brrr-cpu the result is
/// bitwise what [`clip_grad_norm`]'s factor passed as `grad_scale` gives. Read `norm`
/// only when it is logged. Works on wasm32 (nothing blocks).
pub fn clip_grad_norm_on_device<B: Backend>(
    params: &[&Param<B>],
    max_norm: f64,
) -> Result<(Tensor<B>, Tensor<B>)> {
    const OP: &str = "clip_grad_norm_on_device";
    if max_norm.is_nan() || max_norm <= 0.0 {
        return Err(Error::invalid(
            OP,
            format!("max_norm must be positive, got {max_norm}"),
        ));
    }
    let Some(first) = params.first() else {
        return Err(Error::invalid(
            OP,
            "no parameters (no device to compute on)",
        ));
    };
    let backend = first.grad.backend().clone();
    let total = sum_squares_of_grads(&backend, params)?;
    let mut norm = Tensor::zeros(&backend, [1], DType::F32)?;
    let mut coef = Tensor::zeros(&backend, [1], DType::F32)?;
    backend.clip_coefficient(
        total.buffer()?,
        max_norm,
        norm.buffer_mut()?,
        coef.buffer_mut()?,
    )?;
    Ok((norm, coef))
}

/// `Σ_p Σ_i g²` over every gradient, a one-element f32 on the device. Where the backend
/// fuses the sum of squares and every gradient is a whole buffer of a float dtype it
/// fuses, the list is one [`Backend::multi_tensor_sum_squares`] call (one launch on
/// brrr-cuda; on brrr-cpu bitwise the loop below); otherwise each gradient's
/// [`Tensor::sum_squares`] is added in order.
fn sum_squares_of_grads<B: Backend>(backend: &B, params: &[&Param<B>]) -> Result<Tensor<B>> {
    let fused = backend.has_fused_sum_squares()
        && params.iter().all(|p| {
            p.grad.is_dense() && matches!(p.grad.dtype(), DType::F32 | DType::F16 | DType::BF16)
        });
    if fused {
        let bufs = params
            .iter()
            .map(|p| p.grad.buffer())
            .collect::<Result<Vec<_>>>()?;
        let mut total = Tensor::alloc(backend, [1], DType::F32)?;
        backend.multi_tensor_sum_squares(&bufs, total.buffer_mut()?)?;
        return Ok(total);
    }
    let mut total: Option<Tensor<B>> = None;
    for p in params {
        let ss = p.grad.sum_squares()?;
        match &mut total {
            None => total = Some(ss),
            Some(t) => t.add_(&ss)?,
        }
    }
    total.ok_or_else(|| Error::invalid("clip_grad_norm_on_device", "no parameters"))
}

/// One GaLore parameter: the master (when it has one) takes the step, and the compute
/// copy is rounded from it. A step the loss scaler skips is read from `found_inf` on the
/// host (GaLore reads the gradient back for its SVD anyway, and an overflowed gradient
/// must not reach the moments).
fn step_projected<B: Backend>(
    hp: &AdamWParams,
    p: &mut Param<B>,
    proj: &mut crate::galore::Projector<B>,
    inv_scale: Option<&Tensor<B>>,
    found_inf: Option<&Tensor<B>>,
) -> Result<()> {
    if let Some(f) = found_inf
        && crate::galore::read_f32(f)?
            .first()
            .is_some_and(|x| *x != 0.0)
    {
        return Ok(());
    }
    match &mut p.master {
        None => proj.step(hp, &mut p.value, &p.grad, inv_scale),
        Some(master) => {
            proj.step(hp, master, &p.grad, inv_scale)?;
            p.value = master.to_dtype(p.value.dtype())?;
            Ok(())
        }
    }
}
