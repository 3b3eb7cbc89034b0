//! Dynamic loss scaling with PyTorch `GradScaler`'s semantics, on the device.
//!
//! f16's smallest subnormal is 2⁻²⁴ ≈ 6e-8; many gradients of a language model are
//! smaller and would become zero. Multiplying the loss by `S` multiplies every gradient
//! by `S` (the chain rule is linear), lifting them into f16's range; the optimizer
//! divides by `S` again in f32. Too large an `S` overflows to inf: then the step is
//! skipped and `S` halves. After `growth_interval` clean steps `S` doubles, probing for
//! the largest scale that does not overflow (Micikevicius et al. 2018, §3.2;
//! `torch.amp.GradScaler`).
//!
//! The order of one optimizer step, as PyTorch's documented recipe has it:
//! backward of every micro-batch with the *same* scale → [`DynamicLossScaler::unscale`]
//! (all gradients × 1/S, and the overflow flag, once per optimizer step) → clip → AdamW
//! (skipped on the device by the flag) → [`DynamicLossScaler::update`]. None of it reads
//! the device: the scale and the flag come back with the step's one read-back, and
//! [`DynamicLossScaler::observe`] learns them there.

use brrr_backend::{Backend, DType, Error, Result, ScaleUpdateParams};
use brrr_nn::Param;
use brrr_tensor::Tensor;
use serde::{Deserialize, Serialize};

/// The scaler's options. The defaults are `torch.amp.GradScaler`'s; `hysteresis`,
/// `min_scale` and `error_at_min_scale` are Megatron-LM's and DeepSpeed's additions
/// (defaults that leave PyTorch's rule unchanged).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScalerConfig {
    /// The first scale, 2¹⁶.
    pub init_scale: f32,
    /// The scale is multiplied by this after `growth_interval` clean steps in a row.
    pub growth_factor: f32,
    /// ... and by this on an overflow.
    pub backoff_factor: f32,
    /// Clean steps in a row before the scale grows: 2000.
    pub growth_interval: u32,
    /// Overflows since the scale last grew before it backs off (every overflow still
    /// skips its step). 1 is PyTorch's rule; Megatron-LM and DeepSpeed default to 2.
    pub hysteresis: u32,
    /// The scale never backs off below this (0: no floor, as PyTorch).
    pub min_scale: f32,
    /// Fail the run when an overflow happens with the scale already at `min_scale`
    /// (DeepSpeed's `raise_error_at_min_scale`): the model is diverging, and skipping
    /// every step from here on would hide it.
    pub error_at_min_scale: bool,
}

impl Default for ScalerConfig {
    fn default() -> Self {
        let p = ScaleUpdateParams::default();
        ScalerConfig {
            init_scale: 65536.0,
            growth_factor: p.growth_factor,
            backoff_factor: p.backoff_factor,
            growth_interval: p.growth_interval,
            hysteresis: p.hysteresis,
            min_scale: p.min_scale,
            error_at_min_scale: false,
        }
    }
}

impl ScalerConfig {
    /// Checks that the options describe a scaler that can work.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid("loss scaler", m));
        if !(self.init_scale.is_finite() && self.init_scale > 0.0) {
            return bad(format!(
                "init_scale must be positive, got {}",
                self.init_scale
            ));
        }
        if !(self.growth_factor.is_finite() && self.growth_factor > 1.0) {
            return bad(format!(
                "growth_factor must exceed 1, got {}",
                self.growth_factor
            ));
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return bad(format!(
                "backoff_factor must be in (0, 1), got {}",
                self.backoff_factor
            ));
        }
        if self.growth_interval == 0 || self.growth_interval > i32::MAX as u32 {
            return bad(format!(
                "growth_interval must be in 1..=2^31-1, got {}",
                self.growth_interval
            ));
        }
        if self.hysteresis > i32::MAX as u32 {
            return bad(format!("hysteresis too large: {}", self.hysteresis));
        }
        if !(self.min_scale.is_finite() && self.min_scale >= 0.0)
            || self.min_scale > self.init_scale
        {
            return bad(format!(
                "min_scale must be in [0, init_scale {}], got {}",
                self.init_scale, self.min_scale
            ));
        }
        Ok(())
    }

    /// The backend kernel's parameters.
    pub fn update_params(&self) -> ScaleUpdateParams {
        ScaleUpdateParams {
            growth_factor: self.growth_factor,
            backoff_factor: self.backoff_factor,
            growth_interval: self.growth_interval,
            hysteresis: self.hysteresis,
            min_scale: self.min_scale,
        }
    }
}

/// What the host learned about one step from its read-back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalerReport {
    /// The scale after the step's update (what the next step's backward uses).
    pub scale: f32,
    /// Whether the step found an inf/NaN gradient and skipped its update.
    pub skipped: bool,
}

/// The loss scale, its growth tracker and the overflow flag, all on the device.
pub struct DynamicLossScaler<B: Backend> {
    config: ScalerConfig,
    /// `[1]` f32: the current scale.
    scale: Tensor<B>,
    /// `[1]` or `[2]` i32: clean steps in a row (and overflows since the last growth).
    tracker: Tensor<B>,
    /// `[1]` f32: non-zero when this step's gradients had an inf or NaN.
    found_inf: Tensor<B>,
    /// The scale as of the last [`DynamicLossScaler::observe`]: equal to the device's,
    /// since the device's value came back in the step's read-back.
    host_scale: f32,
    /// Steps skipped so far.
    skipped_steps: u64,
}

impl<B: Backend> DynamicLossScaler<B> {
    /// A scaler at `config.init_scale`.
    pub fn new(backend: &B, config: ScalerConfig) -> Result<Self> {
        config.validate()?;
        let p = config.update_params();
        Ok(DynamicLossScaler {
            scale: Tensor::full(backend, [1], DType::F32, f64::from(config.init_scale))?,
            tracker: Tensor::zeros(backend, [p.tracker_len()], DType::I32)?,
            found_inf: Tensor::zeros(backend, [1], DType::F32)?,
            host_scale: config.init_scale,
            skipped_steps: 0,
            config,
        })
    }

    /// The options.
    pub fn config(&self) -> &ScalerConfig {
        &self.config
    }

    /// The scale the next backward multiplies the loss by (known on the host without a
    /// read: it came back with the previous step's results).
    pub fn scale(&self) -> f32 {
        self.host_scale
    }

    /// Steps skipped so far (as observed).
    pub fn skipped_steps(&self) -> u64 {
        self.skipped_steps
    }

    /// The device's scale, `[1]` f32.
    pub fn scale_tensor(&self) -> &Tensor<B> {
        &self.scale
    }

    /// The overflow flag of the current step, `[1]` f32: pass it to
    /// [`brrr_nn::AdamW::step_scaled`] as `found_inf`.
    pub fn found_inf(&self) -> &Tensor<B> {
        &self.found_inf
    }

    /// Clears the overflow flag, then multiplies every gradient by `1/scale` on the
    /// device and raises the flag if any gradient holds an inf or NaN. Call once per
    /// optimizer step, after the last micro-batch's backward and before clipping.
    pub fn unscale(&mut self, params: Vec<&mut Param<B>>) -> Result<()> {
        self.found_inf.fill_(0.0)?;
        let inv = self.scale.unary(brrr_backend::UnaryOp::Recip)?;
        let backend = self.scale.backend().clone();
        for p in params {
            backend.unscale_check_finite(
                p.grad.buffer_mut()?,
                inv.buffer()?,
                self.found_inf.buffer_mut()?,
            )?;
        }
        Ok(())
    }

    /// Replaces the overflow flag with `flag` (non-zero: an overflow). Data-parallel
    /// ranks each unscale their own gradients, all-reduce their flags with MAX and write
    /// the result back here, so that every rank skips the same steps and updates its
    /// scale the same way.
    pub fn set_found_inf(&mut self, flag: f32) -> Result<()> {
        self.found_inf.fill_(f64::from(flag))
    }

    /// The scale update, on the device: back off on an overflow, grow after
    /// `growth_interval` clean steps. Call once per optimizer step, after the update.
    pub fn update(&mut self) -> Result<()> {
        let backend = self.scale.backend().clone();
        backend.update_loss_scale(
            &self.config.update_params(),
            self.scale.buffer_mut()?,
            self.tracker.buffer_mut()?,
            self.found_inf.buffer()?,
        )
    }

    /// [`Self::update`], then reads the scale and the flag back and [`Self::observe`]s
    /// them: the end of a step for an engine that reads them on their own (the parallel
    /// engines, after the ranks agreed on the flag). The one-device trainer reads them
    /// with the rest of its step's read-back instead. Native only: it blocks on the
    /// read-back, which a browser cannot.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn update_and_observe(&mut self) -> Result<ScalerReport> {
        self.update()?;
        let scale = self.scale.to_vec_f32()?[0];
        let found = self.found_inf.to_vec_f32()?[0];
        self.observe(scale, found)
    }

    /// Takes in what the step's read-back said: the scale after [`Self::update`] and the
    /// overflow flag. With `error_at_min_scale`, an overflow while the scale already was
    /// at `min_scale` is an error.
    pub fn observe(&mut self, scale_after: f32, found_inf: f32) -> Result<ScalerReport> {
        let skipped = found_inf != 0.0;
        if skipped {
            self.skipped_steps += 1;
            if self.config.error_at_min_scale && self.host_scale <= self.config.min_scale {
                return Err(Error::invalid(
                    "loss scaler",
                    format!(
                        "gradients overflowed with the loss scale already at its minimum \
                         {}: the run is diverging (lower --lr, or use --amp bf16)",
                        self.config.min_scale
                    ),
                ));
            }
        }
        self.host_scale = scale_after;
        Ok(ScalerReport {
            scale: scale_after,
            skipped,
        })
    }

    /// Continues from a saved scale and growth tracker (as [`Self::read_state`] read
    /// them; a checkpoint keeps them so a resumed run does not restart at
    /// `init_scale`). The tracker is `[clean steps]` or, with hysteresis,
    /// `[clean steps, overflows since the last growth]`; a missing second entry is 0.
    pub fn restore_state(&mut self, scale: f32, tracker: &[i32]) -> Result<()> {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(Error::invalid(
                "loss scaler",
                format!("a saved loss scale must be positive and finite, got {scale}"),
            ));
        }
        let len = self.config.update_params().tracker_len();
        if tracker.is_empty() || tracker.len() > 2 || tracker.iter().any(|&t| t < 0) {
            return Err(Error::invalid(
                "loss scaler",
                format!("a saved growth tracker is 1 or 2 counts >= 0, got {tracker:?}"),
            ));
        }
        let mut t = tracker.to_vec();
        t.resize(len, 0);
        let backend = self.scale.backend().clone();
        self.scale = Tensor::from_f32(&backend, &[scale], [1], DType::F32)?;
        self.tracker = Tensor::from_i32(&backend, &t, [len])?;
        self.host_scale = scale;
        Ok(())
    }

    /// Reads the scale, the tracker and the flag (for tests and checkpoints; a training
    /// step never calls it).
    pub async fn read_state(&self) -> Result<(f32, Vec<i32>, f32)> {
        let scale = self.scale.to_host().await?.to_f64()[0] as f32;
        let tracker = match self.tracker.to_host().await? {
            brrr_backend::HostData::I32(v) => v,
            other => {
                return Err(Error::DType {
                    op: "DynamicLossScaler::read_state",
                    expected: DType::I32,
                    got: other.dtype(),
                });
            }
        };
        let found = self.found_inf.to_host().await?.to_f64()[0] as f32;
        Ok((scale, tracker, found))
    }
}
