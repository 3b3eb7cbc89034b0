//! What [`AdamW`](crate::AdamW) keeps per parameter, and the optimizers that differ only
//! in that: plain f32 moments, 8-bit block-wise moments (Dettmers et al. 2022), or (with
//! [`crate::galore`]) moments of a low-rank projection of the gradient.

use crate::galore::{GaLoreConfig, Projector};
use brrr_backend::quant8::{adam_maps, blocks, code_words};
use brrr_backend::{AdamWParams, Backend, DType, Error, QuantizedMoments, Result};
use brrr_tensor::Tensor;
use std::fmt;
use std::str::FromStr;

/// Which optimizer a run uses: AdamW with its states kept one way or another. Written
/// and parsed as `adamw`, `adamw8bit` or `galore:RANK[:REFRESH_EVERY]` (a run's
/// `config.toml` holds that text).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Optimizer {
    /// AdamW with f32 moments: 8 bytes of state per parameter.
    #[default]
    AdamW,
    /// AdamW with 8-bit block-wise quantised moments: about 2 bytes per parameter.
    /// Parameters under [`MIN_8BIT_NUMEL`] elements keep f32 moments (bitsandbytes'
    /// `min_8bit_size`): quantising a LayerNorm gain saves nothing worth its error.
    AdamW8bit,
    /// GaLore (Zhao et al. 2024): the attention and MLP weight matrices take AdamW steps
    /// in a rank-`r` projection of their gradient ([`Projector`]), the moments `r/min(m,n)`
    /// of their full size; every other parameter (embeddings, biases, LayerNorms, and a
    /// matrix not larger than the rank) keeps f32 moments.
    GaLore(GaLoreConfig),
}

/// Parameters smaller than this keep f32 moments under [`Optimizer::AdamW8bit`].
pub const MIN_8BIT_NUMEL: usize = 4096;

impl Optimizer {
    /// Whether a parameter of `numel` elements gets 8-bit moments.
    pub fn quantizes(&self, numel: usize) -> bool {
        matches!(self, Optimizer::AdamW8bit) && numel >= MIN_8BIT_NUMEL
    }

    /// GaLore's settings when the parameter called `name` of shape `dims` is projected:
    /// a matrix of a block's attention or MLP (not the embeddings, whose gradients are
    /// sparse rows, as GaLore's own code projects only `attn` and `mlp` modules) with
    /// both sides larger than the rank.
    pub fn projects(&self, name: &str, dims: &[usize]) -> Option<GaLoreConfig> {
        let Optimizer::GaLore(c) = self else {
            return None;
        };
        let in_block = name.contains("attn") || name.contains("mlp");
        (dims.len() == 2 && in_block && dims[0].min(dims[1]) > c.rank).then_some(*c)
    }

    /// Bytes of optimizer state for the parameter `name` of shape `dims` (no
    /// allocation): what [`MomentState::bytes`] reports once it has stepped.
    pub fn state_bytes(&self, name: &str, dims: &[usize]) -> usize {
        let numel = dims.iter().product();
        if let Some(c) = self.projects(name, dims) {
            return c.state_bytes(dims[0], dims[1]);
        }
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
            Optimizer::GaLore(c) => return write!(f, "galore:{}:{}", c.rank, c.update_every),
        })
    }
}

impl From<Optimizer> for String {
    fn from(o: Optimizer) -> String {
        o.to_string()
    }
}

impl TryFrom<String> for Optimizer {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Self, String> {
        s.parse()
    }
}

impl FromStr for Optimizer {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || {
            format!(
                "unknown optimizer {s:?}: expected adamw, adamw8bit, galore:RANK or \
                 galore:RANK:REFRESH_EVERY"
            )
        };
        match s {
            "adamw" => Ok(Optimizer::AdamW),
            "adamw8bit" => Ok(Optimizer::AdamW8bit),
            _ => {
                let rest = s.strip_prefix("galore:").ok_or_else(bad)?;
                let mut parts = rest.split(':');
                let mut num = |what: &str| -> std::result::Result<Option<usize>, String> {
                    match parts.next() {
                        None => Ok(None),
                        Some(x) => match x.parse::<usize>() {
                            Ok(n) if n > 0 => Ok(Some(n)),
                            _ => Err(format!(
                                "galore: {what} must be a positive integer, got {x:?}"
                            )),
                        },
                    }
                };
                let rank = num("the rank")?.ok_or_else(bad)?;
                let every = num("the refresh interval")?;
                if parts.next().is_some() {
                    return Err(bad());
                }
                let defaults = GaLoreConfig::default();
                let update_every = match every {
                    Some(e) => u32::try_from(e).map_err(|_| bad())?,
                    None => defaults.update_every,
                };
                Ok(Optimizer::GaLore(GaLoreConfig {
                    rank,
                    update_every,
                    ..defaults
                }))
            }
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
    /// GaLore: the projection and the moments in its space.
    Projected(Box<Projector<B>>),
}

impl<B: Backend> MomentState<B> {
    /// Zero state for the parameter `name` of `shape` under `optimizer`.
    pub fn zeros(backend: &B, optimizer: Optimizer, name: &str, shape: &[usize]) -> Result<Self> {
        let numel = shape.iter().product();
        if let Some(c) = optimizer.projects(name, shape) {
            return Ok(MomentState::Projected(Box::new(Projector::new(
                c, shape[0], shape[1],
            )?)));
        }
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
            MomentState::Projected(p) => p.state_bytes(),
        }
    }

    /// The f32 moments, or an error naming `op` for any other state: for code that
    /// saves or shards f32 moments only.
    pub fn f32_moments(&self, op: &'static str) -> Result<(&Tensor<B>, &Tensor<B>)> {
        match self {
            MomentState::F32(m, v) => Ok((m, v)),
            _ => Err(Error::invalid(
                op,
                "the optimizer keeps 8-bit or GaLore moments, which this path cannot save \
                 or shard (use --optimizer adamw)",
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
