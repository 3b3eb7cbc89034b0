//! Everything that determines the future of a run, on the host, and its checkpoint file.
//!
//! The file is safetensors ([`crate::ckpt`]) with tensors `model.NAME`, `adamw.m.NAME`
//! and `adamw.v.NAME` per parameter (or another optimizer's state, [`OptimState`]), and string metadata `format` (`brrr-gpt-1`),
//! `step`, `adamw_step`, `rng` (the batch source's position), `corpus_fingerprint`,
//! `tokenizer` and `config` (the [`TrainConfig`] as TOML); with a dynamic loss scaler
//! also `loss_scale`, `loss_scale_growth_tracker` and `loss_scale_hysteresis_tracker`
//! (absent in checkpoints of runs without one, and in files written before they existed).

use crate::ckpt::{Checkpoint, NamedTensor};
use crate::config::TrainConfig;
use brrr_backend::{Error, HostData, Result};
use brrr_nn::galore::{ProjectorState, Side};
use std::collections::BTreeMap;

/// The value of the `format` metadata key.
pub const FORMAT: &str = "brrr-gpt-1";

/// One parameter's saved state.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamState {
    /// Dotted name, as [`brrr_nn::Param::name`] (`h.0.attn.c_attn.weight`).
    pub name: String,
    /// Row-major shape.
    pub shape: Vec<usize>,
    /// The weights.
    pub value: HostData,
    /// AdamW's first and second moments (f32); `None` before the first update.
    pub moments: Option<(HostData, HostData)>,
    /// The optimizer's state when it is not two f32 moments (`--optimizer adamw8bit`
    /// or `galore:RANK`), in place of `moments`.
    pub optim: Option<OptimState>,
}

/// A parameter's optimizer state other than two f32 moments.
#[derive(Clone, Debug, PartialEq)]
pub enum OptimState {
    /// 8-bit moments: both moments' codes (u32, four to a word) and block absmax values
    /// (f32), as `brrr_backend::QuantizedMoments` lays them out. Saved as
    /// `adamw8bit.codes.NAME` and `adamw8bit.absmax.NAME`.
    Bits8 {
        /// Both moments' codes.
        codes: HostData,
        /// Both moments' block maxima.
        absmax: HostData,
    },
    /// GaLore's projection and its moments (`galore.projection.NAME`, `galore.m.NAME`,
    /// `galore.v.NAME`, flat f32; the side is the weight's shape's).
    GaLore(ProjectorState),
}

impl OptimState {
    /// The tensors it is saved as, for the parameter `name`.
    fn tensors(&self, name: &str) -> Vec<NamedTensor> {
        let flat = |key: &str, h: &HostData| (format!("{key}.{name}"), h.clone(), vec![h.len()]);
        let f32s = |key: &str, v: &[f32]| flat(key, &HostData::F32(v.to_vec()));
        match self {
            OptimState::Bits8 { codes, absmax } => vec![
                flat("adamw8bit.codes", codes),
                flat("adamw8bit.absmax", absmax),
            ],
            OptimState::GaLore(p) => vec![
                f32s("galore.projection", &p.projection),
                f32s("galore.m", &p.m),
                f32s("galore.v", &p.v),
            ],
        }
    }

    /// The state saved for the parameter `name` of `shape`, if any.
    fn read(ck: &Checkpoint, name: &str, shape: &[usize]) -> Result<Option<Self>> {
        let get = |key: &str| ck.get(&format!("{key}.{name}")).map(|t| t.1.clone());
        let one_of = |what: &str| {
            Error::Parse(format!(
                "checkpoint has only some of the {what} tensors of {name:?}"
            ))
        };
        match (get("adamw8bit.codes"), get("adamw8bit.absmax")) {
            (Some(codes), Some(absmax)) => return Ok(Some(OptimState::Bits8 { codes, absmax })),
            (None, None) => {}
            _ => return Err(one_of("8-bit moment")),
        }
        match (get("galore.projection"), get("galore.m"), get("galore.v")) {
            (Some(p), Some(m), Some(v)) => {
                let [rows, cols] = shape else {
                    return Err(Error::Parse(format!(
                        "GaLore state for {name:?}, not a matrix"
                    )));
                };
                Ok(Some(OptimState::GaLore(ProjectorState {
                    side: Side::of(*rows, *cols),
                    projection: p.to_f32(),
                    m: m.to_f32(),
                    v: v.to_f32(),
                })))
            }
            (None, None, None) => Ok(None),
            _ => Err(one_of("GaLore")),
        }
    }
}

/// The dynamic loss scaler's state (`--amp fp16`): a resumed run continues with the
/// scale it had, not `init_scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScalerState {
    /// The loss scale the next step uses.
    pub scale: f32,
    /// Clean steps in a row since the last overflow or growth.
    pub growth_tracker: i32,
    /// Overflows since the scale last grew (counted with hysteresis > 1, else 0).
    pub hysteresis_tracker: i32,
}

/// The loss scaler's state in the JSON header of a sharded checkpoint (brrr-dp's rank
/// shards, brrr-pp's stage files): every rank holds the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScalerHeader {
    /// The loss scale the next step uses, as its f32 bits (exact through JSON).
    pub scale_bits: u32,
    /// Clean steps in a row since the last overflow or growth.
    pub growth_tracker: i32,
    /// Overflows since the scale last grew.
    pub hysteresis_tracker: i32,
}

impl ScalerHeader {
    /// From the scale and the trackers `[growth, hysteresis]` as
    /// `brrr_amp::DynamicLossScaler::read_state` returns them.
    pub fn new(scale: f32, trackers: &[i32]) -> Self {
        ScalerHeader {
            scale_bits: scale.to_bits(),
            growth_tracker: trackers.first().copied().unwrap_or(0),
            hysteresis_tracker: trackers.get(1).copied().unwrap_or(0),
        }
    }

    /// The scale the next step uses.
    pub fn scale(self) -> f32 {
        f32::from_bits(self.scale_bits)
    }

    /// The trackers `[growth, hysteresis]`, as `DynamicLossScaler::restore_state` takes them.
    pub fn trackers(self) -> [i32; 2] {
        [self.growth_tracker, self.hysteresis_tracker]
    }

    /// As the one-device checkpoint keeps it.
    pub fn to_state(self) -> LossScalerState {
        LossScalerState {
            scale: self.scale(),
            growth_tracker: self.growth_tracker,
            hysteresis_tracker: self.hysteresis_tracker,
        }
    }
}

/// A run's complete state on the host: enough to continue it bit for bit.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainState {
    /// The run's configuration.
    pub config: TrainConfig,
    /// Optimizer steps completed.
    pub step: u64,
    /// AdamW's update count (the `t` of its bias correction).
    pub adamw_step: u32,
    /// [`BatchSource::position`](crate::BatchSource::position) after the last step.
    pub data_position: String,
    /// [`BatchSource::fingerprint`](crate::BatchSource::fingerprint) of the data.
    pub data_fingerprint: String,
    /// Every parameter, in the model's order.
    pub params: Vec<ParamState>,
    /// The loss scaler's state, when the run has one.
    pub loss_scaler: Option<LossScalerState>,
}

impl TrainState {
    /// The parameter called `name`.
    pub fn param(&self, name: &str) -> Option<&ParamState> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The tensors and metadata of the checkpoint file.
    pub fn to_checkpoint(&self) -> Result<(Vec<NamedTensor>, BTreeMap<String, String>)> {
        let mut tensors: Vec<NamedTensor> = Vec::with_capacity(3 * self.params.len());
        for p in &self.params {
            tensors.push((
                format!("model.{}", p.name),
                p.value.clone(),
                p.shape.clone(),
            ));
        }
        for p in &self.params {
            if let Some((m, v)) = &p.moments {
                tensors.push((format!("adamw.m.{}", p.name), m.clone(), p.shape.clone()));
                tensors.push((format!("adamw.v.{}", p.name), v.clone(), p.shape.clone()));
            }
            if let Some(o) = &p.optim {
                tensors.extend(o.tensors(&p.name));
            }
        }
        let config = toml::to_string(&self.config)
            .map_err(|e| Error::invalid("checkpoint", e.to_string()))?;
        let mut meta = BTreeMap::from([
            ("format".to_string(), FORMAT.to_string()),
            ("step".to_string(), self.step.to_string()),
            ("adamw_step".to_string(), self.adamw_step.to_string()),
            ("rng".to_string(), self.data_position.clone()),
            (
                "corpus_fingerprint".to_string(),
                self.data_fingerprint.clone(),
            ),
            ("tokenizer".to_string(), self.config.tokenizer.clone()),
            ("config".to_string(), config),
        ]);
        if let Some(ls) = &self.loss_scaler {
            // `{}` of an f32 is the shortest text that parses back to the same bits.
            meta.insert("loss_scale".into(), ls.scale.to_string());
            meta.insert(
                "loss_scale_growth_tracker".into(),
                ls.growth_tracker.to_string(),
            );
            meta.insert(
                "loss_scale_hysteresis_tracker".into(),
                ls.hysteresis_tracker.to_string(),
            );
        }
        Ok((tensors, meta))
    }

    /// The checkpoint file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let (tensors, meta) = self.to_checkpoint()?;
        crate::ckpt::to_bytes(&tensors, &meta)
    }

    /// Reads the state back from a checkpoint. Parameters are those of the `model.`
    /// tensors, in name order; a parameter without moments is one AdamW never updated.
    pub fn from_checkpoint(ck: &Checkpoint) -> Result<Self> {
        let config: TrainConfig = toml::from_str(ck.meta("config")?)
            .map_err(|e| Error::Parse(format!("checkpoint metadata config: {e}")))?;
        let mut params = Vec::new();
        for (name, value, shape) in &ck.tensors {
            let Some(pname) = name.strip_prefix("model.") else {
                continue;
            };
            let moment = |kind: &str| {
                ck.get(&format!("adamw.{kind}.{pname}"))
                    .map(|t| t.1.clone())
            };
            let moments = match (moment("m"), moment("v")) {
                (Some(m), Some(v)) => Some((m, v)),
                (None, None) => None,
                _ => {
                    return Err(Error::Parse(format!(
                        "checkpoint has only one of the AdamW moments of {pname:?}"
                    )));
                }
            };
            params.push(ParamState {
                name: pname.to_string(),
                shape: shape.clone(),
                value: value.clone(),
                moments,
                optim: OptimState::read(ck, pname, shape)?,
            });
        }
        let loss_scaler = match ck.meta("loss_scale") {
            Ok(_) => Some(LossScalerState {
                scale: parse_meta(ck, "loss_scale")?,
                growth_tracker: parse_meta(ck, "loss_scale_growth_tracker")?,
                hysteresis_tracker: parse_meta(ck, "loss_scale_hysteresis_tracker")?,
            }),
            // Written by a run without a scaler, or before checkpoints kept it.
            Err(_) => None,
        };
        Ok(TrainState {
            config,
            step: parse_meta(ck, "step")?,
            adamw_step: parse_meta(ck, "adamw_step")?,
            data_position: ck.meta("rng")?.to_string(),
            data_fingerprint: ck.meta("corpus_fingerprint")?.to_string(),
            params,
            loss_scaler,
        })
    }

    /// Writes the checkpoint file atomically: a run killed while saving keeps the
    /// previous file.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let (tensors, meta) = self.to_checkpoint()?;
        crate::ckpt::save(path, &tensors, &meta)
    }

    /// Reads a checkpoint file.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::from_checkpoint(&crate::ckpt::load(path)?)
            .map_err(|e| Error::file(path, e.to_string()))
    }
}

/// Refuses to resume from a saved tensor that is not finite: `values` of parameter
/// `param` (`what` says which tensor: its value or a moment). A NaN or infinity in a
/// checkpoint means the run that wrote it had diverged; resuming would fail at the first
/// step with a loss of NaN, and blame this run's flags for it.
pub fn refuse_non_finite(
    param: &str,
    what: &str,
    values: impl IntoIterator<Item = f64>,
) -> Result<()> {
    match values.into_iter().enumerate().find(|(_, x)| !x.is_finite()) {
        None => Ok(()),
        Some((i, x)) => Err(Error::invalid(
            "resume",
            format!(
                "the checkpoint's {what} of {param:?} holds {x} at element {i}: the run that \
                 saved it had diverged; resume from an earlier checkpoint, or start again \
                 (with a lower --lr)"
            ),
        )),
    }
}

impl TrainState {
    /// [`refuse_non_finite`] over every parameter and both AdamW moments.
    pub fn check_finite(&self) -> Result<()> {
        for p in &self.params {
            refuse_non_finite(&p.name, "value", p.value.to_f64())?;
            if let Some((m, v)) = &p.moments {
                refuse_non_finite(&p.name, "first moment", m.to_f64())?;
                refuse_non_finite(&p.name, "second moment", v.to_f64())?;
            }
            match &p.optim {
                Some(OptimState::Bits8 { absmax, .. }) => {
                    refuse_non_finite(&p.name, "8-bit moments' absmax", absmax.to_f64())?;
                }
                Some(OptimState::GaLore(g)) => {
                    let all = g.projection.iter().chain(&g.m).chain(&g.v);
                    refuse_non_finite(&p.name, "GaLore state", all.map(|x| f64::from(*x)))?;
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// A number from the checkpoint's metadata.
pub fn parse_meta<T: std::str::FromStr>(ck: &Checkpoint, key: &str) -> Result<T> {
    let v = ck.meta(key)?;
    v.parse()
        .map_err(|_| Error::Parse(format!("checkpoint metadata {key}={v:?} is not a number")))
}
