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
//!
//! ## Example
//!
//! One f16 training step of a tiny GPT, in PyTorch's order: backward of the loss times
//! the scale `S`, unscale (gradients × `1/S`, and the overflow flag), AdamW (skipped on
//! the device if the flag is up), the scale update, then the step's one read-back.
//!
//! ```
//! use brrr_amp::{DynamicLossScaler, Policy, ScalerConfig, apply_policy, numerics};
//! use brrr_cpu::CpuBackend;
//! use brrr_nn::{AdamW, AdamWConfig, DType, Gpt, GptConfig, Module, Tensor};
//! use rand::SeedableRng;
//!
//! let cpu = CpuBackend::new();
//! let config = GptConfig { vocab_size: 16, block_size: 8, n_layer: 1, n_head: 2, n_embd: 16 };
//! let mut gpt = Gpt::new(&cpu, config, DType::F32, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0))?;
//! apply_policy(&Policy::new(DType::F16)?, &mut gpt)?; // f32 masters, f16 compute copies
//! assert_eq!(gpt.dtype(), DType::F16);
//! let ids = Tensor::from_u32(&cpu, &[1, 2, 3, 4], [1, 4])?;
//! let targets = Tensor::from_i32(&cpu, &[2, 3, 4, 5], [1, 4])?;
//! let mut scaler = DynamicLossScaler::new(&cpu, ScalerConfig::default())?;
//! let mut opt = AdamW::new(AdamWConfig::default());
//! gpt.zero_grad()?;
//! gpt.forward_loss(&ids, &targets)?;
//! gpt.backward(scaler.scale() / 4.0)?; // mean over 4 positions, times S = 2^16
//! scaler.unscale(gpt.params_mut())?;
//! opt.step_scaled(gpt.params_mut(), 1e-3, 1.0, None, Some(scaler.found_inf()))?;
//! scaler.update()?;
//! let (scale, _tracker, found_inf) = brrr_backend::block_on(scaler.read_state())?;
//! let report = scaler.observe(scale, found_inf)?;
//! assert!(!report.skipped && report.scale == 65536.0); // clean step, scale kept
//! // Why the scale: f16's smallest subnormal is 2^-24, and a gradient below it is lost.
//! assert_eq!(numerics::F16.min_subnormal(), 2f64.powi(-24));
//! # Ok::<(), brrr_nn::Error>(())
//! ```
#![warn(missing_docs)]

mod config;
pub mod numerics;
mod policy;
mod scaler;
pub mod svg;

pub use config::{AmpConfig, AmpMode, LossScaling};
pub use policy::{
    OpClass, Policy, Precision, apply_policy, apply_policy_to_params, attention_core_dtype,
};
pub use scaler::{DynamicLossScaler, ScalerConfig, ScalerReport};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
