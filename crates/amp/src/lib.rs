//! Automatic mixed precision (AMP) for brrr's GPT, as Micikevicius et al. (2018,
//! "Mixed Precision Training") describe it and PyTorch's `torch.amp` implements it:
//!
//! - [`Policy`]: which classes of ops run in 16 bits (the GEMMs, attention's core) and
//!   which stay f32 (softmax and LayerNorm statistics, the loss, reductions, the
//!   optimizer). [`apply_policy`] turns an f32 model into one that follows it: every
//!   parameter gets an f32 master and a 16-bit compute copy ([`brrr_nn::Param::with_master`]),
//!   gradients stay f32, and the layers' existing dtype-following kernels do the rest.
//! - [`DynamicLossScaler`]: PyTorch `GradScaler`'s rule, with Megatron-LM's hysteresis
//!   and minimum scale, kept on the device ([`brrr_backend::Backend::unscale_check_finite`],
//!   [`brrr_backend::Backend::update_loss_scale`]) so a step reads nothing back for it.
//! - [`numerics`]: what f16 and bf16 can represent, rounding to them, and where a
//!   run's gradients fall against those ranges (the explorer behind `brrr numerics`).

mod config;
pub mod numerics;
mod policy;
mod scaler;
pub mod svg;

pub use config::{AmpConfig, AmpMode, LossScaling};
pub use policy::{OpClass, Policy, Precision, apply_policy};
pub use scaler::{DynamicLossScaler, ScalerConfig, ScalerReport};
