//! What `brrr train --amp` stores in a run's configuration.

use crate::{Policy, ScalerConfig};
use brrr_backend::{DType, Error, Result};
use serde::{Deserialize, Serialize};

/// Which low-precision format the GEMMs run in, if any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AmpMode {
    /// Everything in f32 (the default).
    #[default]
    Off,
    /// bfloat16: f32's exponent range, 8 significant bits.
    Bf16,
    /// IEEE half precision: 11 significant bits, largest finite value 65504.
    Fp16,
}

impl AmpMode {
    /// The compute dtype: `None` for [`AmpMode::Off`].
    pub fn dtype(self) -> Option<DType> {
        match self {
            AmpMode::Off => None,
            AmpMode::Bf16 => Some(DType::BF16),
            AmpMode::Fp16 => Some(DType::F16),
        }
    }

    /// Parses `off`, `bf16`, `fp16` (also `f16`).
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "off" => Ok(AmpMode::Off),
            "bf16" => Ok(AmpMode::Bf16),
            "fp16" | "f16" => Ok(AmpMode::Fp16),
            _ => Err(Error::invalid(
                "--amp",
                format!("expected off, bf16 or fp16, got {s:?}"),
            )),
        }
    }

    /// `off`, `bf16`, `fp16`.
    pub fn name(self) -> &'static str {
        match self {
            AmpMode::Off => "off",
            AmpMode::Bf16 => "bf16",
            AmpMode::Fp16 => "fp16",
        }
    }
}

/// Whether the loss is scaled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LossScaling {
    /// Dynamic for fp16, none for bf16. bf16 has f32's exponent range, so gradients
    /// that f16 would flush to zero are representable without scaling; this is what
    /// PyTorch (`GradScaler` is only recommended for f16), Megatron-LM and DeepSpeed do.
    #[default]
    Auto,
    /// [`crate::DynamicLossScaler`] whatever the format.
    Dynamic,
    /// No scaling, whatever the format (fp16 then loses small gradients).
    None,
}

/// A run's mixed-precision settings (`TrainConfig::amp`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AmpConfig {
    /// The format, or off.
    pub mode: AmpMode,
    /// Whether the loss is scaled (see [`LossScaling::Auto`]).
    pub loss_scaling: LossScaling,
    /// The dynamic scaler's options.
    pub scaler: ScalerConfig,
    /// Keep attention's core (`q·kᵀ`, softmax, `att·v`) in f32 while the other GEMMs
    /// run in 16 bits ([`crate::OpClass::AttentionCore`]).
    pub f32_attention: bool,
}

impl AmpConfig {
    /// Mixed precision in `mode` with every other setting at its default.
    pub fn new(mode: AmpMode) -> Self {
        AmpConfig {
            mode,
            ..AmpConfig::default()
        }
    }

    /// Whether a [`crate::DynamicLossScaler`] runs: fp16 by default, bf16 only when asked.
    pub fn scales_loss(&self) -> bool {
        match (self.mode, self.loss_scaling) {
            (AmpMode::Off, _) | (_, LossScaling::None) => false,
            (_, LossScaling::Dynamic) => true,
            (AmpMode::Fp16, LossScaling::Auto) => true,
            (AmpMode::Bf16, LossScaling::Auto) => false,
        }
    }

    /// The autocast policy of `mode` (`None` when off).
    pub fn policy(&self) -> Option<Policy> {
        let mut policy = Policy::new(self.mode.dtype()?).ok()?;
        if self.f32_attention {
            policy
                .set(crate::OpClass::AttentionCore, crate::Precision::F32)
                .ok()?;
        }
        Some(policy)
    }

    /// Checks the scaler's options.
    pub fn validate(&self) -> Result<()> {
        // Asking for a loss scale in f32 would otherwise be ignored without a word.
        if self.mode == AmpMode::Off && self.loss_scaling == LossScaling::Dynamic {
            return Err(Error::invalid(
                "--loss-scaling",
                "dynamic loss scaling needs --amp fp16 or --amp bf16: an f32 run has no loss scale",
            ));
        }
        // Scaler settings in a run without a loss scale would be ignored without a word.
        let (s, d) = (&self.scaler, ScalerConfig::default());
        let set = s.growth_interval != d.growth_interval
            || s.hysteresis != d.hysteresis
            || s.min_scale != d.min_scale;
        if !self.scales_loss() && set {
            return Err(Error::invalid(
                "--scale-growth-interval, --scale-hysteresis, --min-loss-scale",
                "they set the loss scaler, which runs only with --amp fp16 or --loss-scaling dynamic",
            ));
        }
        self.scaler.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_loss_scaling_needs_a_16_bit_mode() {
        let mut cfg = AmpConfig {
            loss_scaling: LossScaling::Dynamic,
            ..AmpConfig::default()
        };
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("--loss-scaling"), "{err}");
        for mode in [AmpMode::Bf16, AmpMode::Fp16] {
            cfg.mode = mode;
            cfg.validate().unwrap();
        }
    }

    #[test]
    fn scaler_settings_need_a_loss_scale() {
        let mut cfg = AmpConfig::new(AmpMode::Bf16);
        cfg.scaler.hysteresis = 2;
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("--scale-hysteresis"), "{err}");
        cfg.mode = AmpMode::Fp16;
        cfg.validate().unwrap();
    }
}
