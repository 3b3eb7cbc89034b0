//! What [`AdamW`](crate::AdamW) keeps per parameter, and the optimizers that differ only
//! in that: plain f32 moments, 8-bit block-wise moments (Dettmers et al. 2022), or (with
//! [`crate::galore`]) moments of a low-rank projection of the gradient.

use brrr_backend::quant8::{adam_maps, blocks, code_words};
use brrr_backend::{AdamWParams, Backend, DType, Error, QuantizedMoments, Result};
use brrr_tensor::Tensor;
use std::fmt;
use std::str::FromStr;

/// Which optimizer a run uses: AdamW with its states kept one way or another.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Optimizer {
    /// AdamW with f32 moments: 8 bytes of state per parameter.
    #[default]
    AdamW,
    /// AdamW with 8-bit block-wise quantised moments: about 2 bytes per parameter.
    /// Parameters under [`MIN_8BIT_NUMEL`] elements keep f32 moments (bitsandbytes'
    /// `min_8bit_size`): quantising a LayerNorm gain saves nothing worth its error.
    AdamW8bit,
}

/// Parameters smaller than this keep f32 moments under [`Optimizer::AdamW8bit`].
pub const MIN_8BIT_NUMEL: usize = 4096;

impl Optimizer {
    /// The state a parameter of `numel` elements gets.
    pub fn quantizes(&self, numel: usize) -> bool {
        matches!(self, Optimizer::AdamW8bit) && numel >= MIN_8BIT_NUMEL
    }

    /// Bytes of optimizer state for a parameter of `numel` elements (no allocation):
    /// what [`MomentState::bytes`] will report.
    pub fn state_bytes(&self, numel: usize) -> usize {
        match self.quantizes(numel) {
            true => 2 * (4 * code_words(numel) + 4 * blocks(numel)),
            false => 8 * numel,
        }
    }
}

impl fmt::Display for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Optimizer::AdamW => "adamw",
            Optimizer::AdamW8bit => "adamw8bit",
        })
    }
}

impl FromStr for Optimizer {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "adamw" => Ok(Optimizer::AdamW),
            "adamw8bit" => Ok(Optimizer::AdamW8bit),
            other => Err(format!(
                "unknown optimizer {other:?}: expected adamw or adamw8bit"
            )),
        }
    }
}

/// One parameter's optimizer state.
pub enum MomentState<B: Backend> {
    /// The two moments, f32, the parameter's shape.
    F32(Tensor<B>, Tensor<B>),
    /// 8-bit moments ([`QuantizedMoments`]'s layout): `codes` (u32, both moments' codes
    /// four to a word) and `absmax` (f32, both moments' block maxima).
    Bits8 {
        /// Both moments' codes.
        codes: Tensor<B>,
        /// Both moments' absmax per block.
        absmax: Tensor<B>,
    },
}

impl<B: Backend> MomentState<B> {
    /// Zero state for a parameter of `shape` under `optimizer`.
    pub fn zeros(backend: &B, optimizer: Optimizer, shape: &[usize]) -> Result<Self> {
        let numel = shape.iter().product();
        if optimizer.quantizes(numel) {
            // Absmax 0 decodes every code to 0; the codes are those of 0 from the first
            // step on (an all-zero block is encoded against 1).
            return Ok(MomentState::Bits8 {
                codes: Tensor::zeros(backend, [2 * code_words(numel)], DType::U32)?,
                absmax: Tensor::zeros(backend, [2 * blocks(numel)], DType::F32)?,
            });
        }
        let z = || Tensor::zeros(backend, shape.to_vec(), DType::F32);
        Ok(MomentState::F32(z()?, z()?))
    }

    /// Bytes this state occupies.
    pub fn bytes(&self) -> usize {
        let b = |t: &Tensor<B>| t.size_in_bytes();
        match self {
            MomentState::F32(m, v) => b(m) + b(v),
            MomentState::Bits8 { codes, absmax } => b(codes) + b(absmax),
        }
    }

    /// The f32 moments, or an error naming `op` for any other state: for code that
    /// saves or shards f32 moments only.
    pub fn f32_moments(&self, op: &'static str) -> Result<(&Tensor<B>, &Tensor<B>)> {
        match self {
            MomentState::F32(m, v) => Ok((m, v)),
            _ => Err(Error::invalid(
                op,
                "the optimizer keeps 8-bit moments, which this path cannot save or shard \
                 (use --optimizer adamw)",
            )),
        }
    }
}

/// The two maps of the 8-bit moments, uploaded once per optimizer.
pub(crate) fn upload_maps<B: Backend>(backend: &B) -> Result<Tensor<B>> {
    Tensor::from_f32(backend, &adam_maps(), [512], DType::F32)
}

/// One 8-bit AdamW step of `value` (a parameter, or its f32 master) from `grad`.
pub(crate) fn step_8bit<B: Backend>(
    hp: &AdamWParams,
    value: &mut Tensor<B>,
    grad: &Tensor<B>,
    (codes, absmax): (&mut Tensor<B>, &mut Tensor<B>),
    maps: &Tensor<B>,
    inv_scale: Option<&Tensor<B>>,
    found_inf: Option<&Tensor<B>>,
) -> Result<()> {
    let backend = value.backend().clone();
    let grad = match grad.dtype() == value.dtype() {
        true => grad.contiguous()?,
        false => grad.to_dtype(value.dtype())?,
    };
    let mut state = QuantizedMoments {
        codes: codes.buffer_mut()?,
        absmax: absmax.buffer_mut()?,
        maps: maps.buffer()?,
    };
    backend.adamw_8bit(
        hp,
        value.buffer_mut()?,
        grad.buffer()?,
        &mut state,
        inv_scale.map(Tensor::buffer).transpose()?,
        found_inf.map(Tensor::buffer).transpose()?,
    )
}
