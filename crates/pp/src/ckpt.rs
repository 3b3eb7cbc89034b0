//! Pipeline checkpoints: every stage writes its own parameters and AdamW state to its
//! own file, atomically (a temporary file, fsynced, renamed over the old one), and a run resumes
//! with the same layout (stages, chunks) bit for bit.
//!
//! File `pp-stage{s}-of{n}.bin` (with tensor parallelism one per tensor rank,
//! `pp-stage{s}-of{n}-tp{r}-of{t}.bin`, each holding that rank's shards): the magic `BRRRPP1\n`, a little-endian `u64` header
//! length, the header as JSON ([`StageHeader`]), then for each parameter in
//! [`PipelineStage::params`] order its values as little-endian f32, and, when the
//! optimizer has stepped, each parameter's first and then second moments the same way.
//! f32 only: the executor trains in f32. The header records a checksum of the floats
//! (FNV-1a, 64 bits), checked on every read; a parameter or moment that is not finite
//! (a run that had diverged) is refused on load, by name.

use crate::executor::PipelineStage;
use brrr_backend::{Backend, DType, Error, Result};
use brrr_nn::MomentState;
use brrr_nn::Param;
use brrr_tensor::Tensor;
use brrr_train::data::fingerprint;
use brrr_train::{ScalerHeader, refuse_non_finite};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"BRRRPP1\n";

/// What a stage file says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageHeader {
    /// Optimizer steps completed.
    pub step: u64,
    /// AdamW's update count.
    pub adamw_step: u32,
    /// The stage that wrote it, of `stages`, each with `chunks` model chunks.
    pub stage: usize,
    /// Stages of the pipeline that wrote it; resuming needs the same.
    pub stages: usize,
    /// Model chunks per stage (`v`) of the pipeline that wrote it; resuming needs the
    /// same.
    pub chunks: usize,
    /// Each parameter's name and element count, in file order.
    pub params: Vec<(String, usize)>,
    /// Whether the moments follow the parameters.
    pub has_moments: bool,
    /// The caller's note on where its data stream stands (empty if it has none).
    pub data_position: String,
    /// The tensor rank that wrote it, of `tp` (0 of 1 in files without tensor
    /// parallelism, and in files written before it existed).
    #[serde(default)]
    pub tp_rank: usize,
    /// Tensor ranks per stage when it was written (1 when absent from the header).
    #[serde(default = "one")]
    pub tp: usize,
    /// [`brrr_train::data::fingerprint`] of the floats after the header, checked on
    /// every read (absent only in files written before it was kept, read unchecked).
    #[serde(default)]
    pub checksum: Option<String>,
    /// With `--amp fp16`: the loss scale the next step uses and the scaler's growth and
    /// hysteresis trackers, so a resumed run goes on with them (absent otherwise).
    #[serde(default)]
    pub loss_scaler: Option<ScalerHeader>,
}

fn one() -> usize {
    1
}

/// The file of stage `stage` of `stages` in `dir`.
pub fn stage_path(dir: &Path, stage: usize, stages: usize) -> PathBuf {
    dir.join(format!("pp-stage{stage}-of{stages}.bin"))
}

/// The file of tensor rank `tp_rank` of `tp` of stage `stage` in `dir`: the name
/// carries the tensor rank, so the shards of one stage never collide, and a run with
/// another `--tp` finds no file rather than a wrong one; [`stage_path`]'s name when
/// `tp` is 1.
pub fn stage_shard_path(
    dir: &Path,
    stage: usize,
    stages: usize,
    tp_rank: usize,
    tp: usize,
) -> PathBuf {
    if tp <= 1 {
        return stage_path(dir, stage, stages);
    }
    dir.join(format!("pp-stage{stage}-of{stages}-tp{tp_rank}-of{tp}.bin"))
}

/// The header of the stage file at `path`, without reading its tensors.
pub fn read_stage_header(path: &Path) -> Result<StageHeader> {
    use std::io::Read;
    let bad = |m: String| Error::file(path, m);
    let mut f = std::fs::File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
    let size = f.metadata().map_err(|e| bad(e.to_string()))?.len();
    let mut head = [0u8; 16];
    f.read_exact(&mut head)
        .map_err(|_| bad("not a brrr pipeline stage file".into()))?;
    if &head[..8] != MAGIC {
        return Err(bad("not a brrr pipeline stage file".into()));
    }
    let len = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    if len > size.saturating_sub(16) {
        return Err(bad(format!("header length {len} exceeds the file")));
    }
    let mut json = vec![0u8; len as usize];
    f.read_exact(&mut json)
        .map_err(|e| bad(format!("reading the header: {e}")))?;
    serde_json::from_slice(&json).map_err(|e| bad(format!("header: {e}")))
}

/// The stage file at `path`: its header and its floats (the parameters in header
/// order, then, when `has_moments`, every first moment, then every second), checked
/// against each other.
pub fn read_stage_file(path: &Path) -> Result<(StageHeader, Vec<f32>)> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(format!("{}: reading", path.display()), e))?;
    let bad = |msg: String| Error::file(path, msg);
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err(bad("not a brrr pipeline stage file".into()));
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    // A header length beyond the file (a corrupt or hostile file) is an error, not an
    // overflow.
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= bytes.len() - 16)
        .ok_or_else(|| bad(format!("header length {len} exceeds the file")))?;
    let header: StageHeader =
        serde_json::from_slice(&bytes[16..16 + len]).map_err(|e| bad(format!("header: {e}")))?;
    let total = header
        .params
        .iter()
        .try_fold(0usize, |acc, p| acc.checked_add(p.1))
        .ok_or_else(|| bad("parameter sizes overflow".into()))?;
    let arrays = if header.has_moments { 3 } else { 1 };
    let body = &bytes[16 + len..];
    if Some(body.len()) != total.checked_mul(4 * arrays) {
        return Err(bad(format!(
            "{} bytes of data, the header says {arrays} × {total} f32",
            body.len()
        )));
    }
    if let Some(recorded) = &header.checksum {
        let read = fingerprint(body);
        if read != *recorded {
            return Err(bad(format!(
                "checksum mismatch: the header records {recorded}, the data reads {read}; \
                 the file changed after it was written (a flipped bit, a bad copy)"
            )));
        }
    }
    let floats = body
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok((header, floats))
}

fn bytes_of(v: &[f32], out: &mut Vec<u8>) {
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

impl<B: Backend> PipelineStage<B> {
    /// Writes this stage's parameters and optimizer state after `step` steps to
    /// [`PipelineStage::checkpoint_path`] in `dir` (created if missing); returns the path.
    pub fn save_checkpoint(&self, dir: &Path, step: u64, data_position: &str) -> Result<PathBuf> {
        self.save_checkpoint_scaled(dir, step, data_position, None)
    }

    /// [`PipelineStage::save_checkpoint`] with the loss scaler's state (`--amp fp16`):
    /// the scale and its trackers. Under mixed precision the file holds each
    /// parameter's f32 master, the run's weights.
    pub fn save_checkpoint_scaled(
        &self,
        dir: &Path,
        step: u64,
        data_position: &str,
        loss_scaler: Option<ScalerHeader>,
    ) -> Result<PathBuf> {
        let moments = self
            .opt
            .f32_moments("pipeline checkpoint")?
            .into_iter()
            .map(|(m, v)| Ok((m.to_vec_f32()?, v.to_vec_f32()?)))
            .collect::<Result<Vec<_>>>()?;
        self.save_checkpoint_with(dir, step, data_position, loss_scaler, &moments)
    }

    /// [`PipelineStage::save_checkpoint_scaled`] with every parameter's moments given
    /// (`PipelineStage::gather_moments`: under `--zero 1` the replicas keep a part
    /// each; empty before the first step).
    pub fn save_checkpoint_with(
        &self,
        dir: &Path,
        step: u64,
        data_position: &str,
        loss_scaler: Option<ScalerHeader>,
        moments: &[(Vec<f32>, Vec<f32>)],
    ) -> Result<PathBuf> {
        let params = self.params();
        let weights = |p: &Param<B>| p.master.clone().unwrap_or_else(|| p.value.clone());
        if let Some(p) = params.iter().find(|p| weights(p).dtype() != DType::F32) {
            return Err(Error::invalid(
                "PipelineStage::save_checkpoint",
                format!(
                    "{} is {}; pipeline checkpoints hold f32",
                    p.name,
                    p.value.dtype()
                ),
            ));
        }
        let header = StageHeader {
            step,
            adamw_step: self.opt.step,
            stage: self.rank,
            stages: self.p,
            chunks: self.v,
            params: params.iter().map(|p| (p.name.clone(), p.numel())).collect(),
            has_moments: !moments.is_empty(),
            data_position: data_position.to_string(),
            tp_rank: self.tp_rank(),
            tp: self.tp_size(),
            checksum: None,
            loss_scaler,
        };
        let mut data = Vec::new();
        for p in &params {
            bytes_of(&weights(p).to_vec_f32()?, &mut data);
        }
        if !moments.is_empty() && moments.len() != params.len() {
            return Err(Error::invalid(
                "PipelineStage::save_checkpoint",
                format!(
                    "moments of {} parameters for {}",
                    moments.len(),
                    params.len()
                ),
            ));
        }
        for (m, _) in moments {
            bytes_of(m, &mut data);
        }
        for (_, v) in moments {
            bytes_of(v, &mut data);
        }
        let header = StageHeader {
            checksum: Some(fingerprint(&data)),
            ..header
        };
        let json = serde_json::to_vec(&header)
            .map_err(|e| Error::invalid("PipelineStage::save_checkpoint", e.to_string()))?;
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        out.extend_from_slice(&data);
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("{}: creating the directory", dir.display()), e))?;
        let path = self.checkpoint_path(dir);
        // The run directory's one writer: a temporary file, fsynced, renamed into place.
        brrr_train::atomic::write_atomic(&path, &out)?;
        Ok(path)
    }

    /// This rank's checkpoint file in `dir` ([`stage_shard_path`]).
    pub fn checkpoint_path(&self, dir: &Path) -> PathBuf {
        stage_shard_path(dir, self.rank, self.p, self.tp_rank(), self.tp_size())
    }

    /// Restores this stage from its file in `dir`, written by a run with the same
    /// stages, chunks and model; returns the header (its `step` is where to go on).
    pub fn load_checkpoint(&mut self, dir: &Path) -> Result<StageHeader> {
        const OP: &str = "PipelineStage::load_checkpoint";
        let path = self.checkpoint_path(dir);
        let (header, floats) = read_stage_file(&path)?;
        let bad = |msg: String| Error::invalid(OP, format!("{}: {msg}", path.display()));
        let want: Vec<(String, usize)> = self
            .params()
            .iter()
            .map(|p| (p.name.clone(), p.numel()))
            .collect();
        if (header.stage, header.stages, header.chunks) != (self.rank, self.p, self.v)
            || (header.tp_rank, header.tp) != (self.tp_rank(), self.tp_size())
            || header.params != want
        {
            return Err(bad(format!(
                "written by stage {} of {} with {} chunks, tensor rank {} of {} and other \
                 parameters; this is stage {} of {} with {} chunks, tensor rank {} of {}",
                header.stage,
                header.stages,
                header.chunks,
                header.tp_rank,
                header.tp,
                self.rank,
                self.p,
                self.v,
                self.tp_rank(),
                self.tp_size()
            )));
        }
        let total: usize = want.iter().map(|w| w.1).sum();
        let backend = self.backend().clone();
        let mut at = 0;
        let mut moments = Vec::new();
        for p in self.params_mut() {
            let n = p.numel();
            let f64s = |r: std::ops::Range<usize>| floats[r].iter().map(|&x| f64::from(x));
            let in_file = |e: Error| Error::file(&path, e.to_string());
            refuse_non_finite(&p.name, "value", f64s(at..at + n)).map_err(in_file)?;
            if header.has_moments {
                refuse_non_finite(&p.name, "first moment", f64s(total + at..total + at + n))
                    .map_err(in_file)?;
                let v = 2 * total + at..2 * total + at + n;
                refuse_non_finite(&p.name, "second moment", f64s(v)).map_err(in_file)?;
            }
            let shape = p.value.shape().clone();
            let saved = Tensor::from_f32(&backend, &floats[at..at + n], shape.clone(), DType::F32)?;
            match &mut p.master {
                // Mixed precision: the saved weights become the master, and the compute
                // copy is rounded from them (as `brrr_train::load_params` does).
                Some(master) => {
                    p.value = saved.to_dtype(p.value.dtype())?;
                    *master = saved;
                }
                None => p.value = saved,
            }
            if header.has_moments {
                let m = &floats[total + at..total + at + n];
                let v = &floats[2 * total + at..2 * total + at + n];
                moments.push(MomentState::F32(
                    Tensor::from_f32(&backend, m, shape.clone(), DType::F32)?,
                    Tensor::from_f32(&backend, v, shape, DType::F32)?,
                ));
            }
            p.zero_grad()?;
            at += n;
        }
        self.opt.moments = match self.owners() {
            Some(o) if !moments.is_empty() => o.mine(moments),
            _ => moments,
        };
        self.opt.step = header.adamw_step;
        Ok(header)
    }
}

impl<B: Backend> PipelineStage<B> {
    /// Takes this stage's parameters and moments from one whole checkpoint (a one-device
    /// or `--tp` run's, or `brrr ckpt consolidate`'s of any layout), sliced for this
    /// tensor rank, so a run goes on as a pipeline from another layout. The step counts,
    /// the loss scale and the data's position are the engine's to restore.
    pub fn restore_state(&mut self, state: &brrr_train::TrainState) -> Result<()> {
        const OP: &str = "PipelineStage::restore_state";
        if state.config.model != self.config {
            return Err(Error::invalid(
                OP,
                format!(
                    "the saved model {:?} is not this run's {:?}",
                    state.config.model, self.config
                ),
            ));
        }
        let (r, n, heads) = (self.tp_rank(), self.tp_size(), self.config.n_head);
        let backend = self.backend().clone();
        let slice = |name: &str, host: &brrr_backend::HostData, shape: &[usize]| {
            let full = Tensor::from_host(&backend, host, shape.to_vec())?;
            brrr_tp::shard::shard_by_name(name, &full, heads, r, n)
        };
        let mut moments = Vec::new();
        for p in self.params_mut() {
            let saved = state.param(&p.name).ok_or_else(|| {
                Error::Parse(format!("checkpoint has no tensor \"model.{}\"", p.name))
            })?;
            let value = slice(&p.name, &saved.value, &saved.shape)?;
            if value.dims() != p.value.dims() {
                return Err(Error::shape(
                    OP,
                    format!(
                        "{}: saved {:?}, this stage holds {:?}",
                        p.name,
                        value.dims(),
                        p.value.dims()
                    ),
                ));
            }
            let value = value.to_dtype(DType::F32)?;
            match &mut p.master {
                // Mixed precision: the saved f32 weights become the master, and the
                // compute copy is rounded from them.
                Some(master) => {
                    p.value = value.to_dtype(p.value.dtype())?;
                    *master = value;
                }
                None => p.value = value,
            }
            if let Some((m, v)) = saved.moments.as_ref().filter(|_| state.adamw_step > 0) {
                moments.push(MomentState::F32(
                    slice(&p.name, m, &saved.shape)?,
                    slice(&p.name, v, &saved.shape)?,
                ));
            }
            p.zero_grad()?;
        }
        self.opt.moments = match self.owners() {
            Some(o) if !moments.is_empty() => o.mine(moments),
            _ => moments,
        };
        self.opt.step = state.adamw_step;
        Ok(())
    }
}
