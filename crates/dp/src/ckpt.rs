//! Sharded checkpoints: every rank writes its chunk of every bucket (parameters and
//! AdamW moments) to its own file, atomically, and a run resumes with the same layout
//! (world size, ZeRO stage, buckets) bit for bit.
//!
//! File `dp-rank{r}-of{n}.bin`: the magic `BRRRDP1\n`, a little-endian `u64` header
//! length, the header as JSON ([`ShardHeader`]), then three f32 arrays (little-endian)
//! of `chunk_elems` each: parameters, first moments, second moments. Under `--amp` the
//! parameters are the f32 masters (the run's weights; the 16-bit copies are rounded from
//! them on resume) and the header carries fp16's loss-scaler state. The header also
//! records a checksum of the three arrays' bytes (FNV-1a, 64 bits), checked on every
//! read: a flipped bit or a bad copy is an error naming the file, never a silent resume.

use crate::engine::DataParallel;
use crate::model::ReplicaModel;
use brrr_backend::{Backend, DType, Error, Result};
use brrr_tensor::Tensor;
use brrr_train::data::fingerprint;
use brrr_train::{ParamState, TrainState};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub(crate) const MAGIC: &[u8; 8] = b"BRRRDP1\n";

/// What a shard file says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardHeader {
    /// Optimizer steps completed.
    pub step: u64,
    /// AdamW's update count.
    pub adamw_step: u32,
    /// ZeRO stage of the run that wrote it.
    pub zero: u8,
    /// Ranks of the run that wrote it.
    pub world: usize,
    /// The rank that wrote it.
    pub rank: usize,
    /// The buckets' parameter ranges, in launch order.
    pub buckets: Vec<(usize, usize)>,
    /// The batch source's position after `step`.
    pub data_position: String,
    /// The batch source's data identity.
    pub data_fingerprint: String,
    /// Elements of each of the three arrays.
    pub chunk_elems: usize,
    /// `--amp fp16`'s loss scale and trackers after `step` (absent otherwise, and in
    /// shards written before they were kept).
    #[serde(default)]
    pub loss_scaler: Option<ScalerHeader>,
    /// [`brrr_train::data::fingerprint`] of the bytes after the header (absent only in
    /// shards written before it was kept, which are read unchecked).
    #[serde(default)]
    pub checksum: Option<String>,
}

/// The loss scaler's state in a shard header (every rank holds the same); pipeline stage
/// files keep the same.
pub use brrr_train::ScalerHeader;

/// The file of rank `rank` of `world` in `dir`.
pub fn shard_path(dir: &Path, rank: usize, world: usize) -> PathBuf {
    dir.join(format!("dp-rank{rank}-of{world}.bin"))
}

impl<B: Backend, M: ReplicaModel<B>> DataParallel<B, M> {
    fn header(&self, chunk_elems: usize) -> Result<ShardHeader> {
        let loss_scaler = match &self.scaler {
            Some(s) => {
                let (scale, tracker, _) = brrr_backend::block_on(s.read_state())?;
                Some(ScalerHeader::new(scale, &tracker))
            }
            None => None,
        };
        Ok(ShardHeader {
            step: self.step,
            adamw_step: match self.dp.zero {
                0 => self.opt.step,
                _ => self.adamw_step,
            },
            zero: self.dp.zero,
            world: self.dp.world,
            rank: self.rank,
            buckets: self
                .groups
                .iter()
                .map(|b| (b.params.start, b.params.end))
                .collect(),
            data_position: self.data.position(),
            data_fingerprint: self.data.fingerprint(),
            chunk_elems,
            loss_scaler,
            checksum: None,
        })
    }

    /// This rank's chunks of parameters and moments, bucket after bucket.
    fn state_chunks(&self) -> Result<[Vec<f32>; 3]> {
        let mut out: [Vec<f32>; 3] = Default::default();
        for g in 0..self.groups.len() {
            // The weights in f32: stage 3's chunk, or (`--amp`, stages 1-2) the owner's
            // master, or the model's master (stage 0) or value (f32 runs).
            let shard = self.shards.get(g);
            let p = match shard.and_then(|s| s.param.as_ref().or(s.master.as_ref())) {
                Some(t) => t.to_vec_f32()?,
                None => self.group_chunk(g, |p| p.master.as_ref().unwrap_or(&p.value))?,
            };
            let c = p.len();
            let (m, v) = match self.dp.zero {
                0 if self.opt.moments.is_empty() => (vec![0.0; c], vec![0.0; c]),
                0 => {
                    let moments = self.opt.f32_moments("dp checkpoint")?;
                    (
                        self.chunk_of(g, |i| moments[i].0.to_vec_f32())?,
                        self.chunk_of(g, |i| moments[i].1.to_vec_f32())?,
                    )
                }
                _ => {
                    // The flat moments cover the chunk's parameter elements; the padding
                    // after them is saved as zeros.
                    let (mt, vt) = &self.shards[g].moments;
                    let (mut m, mut v) = (mt.to_vec_f32()?, vt.to_vec_f32()?);
                    m.resize(c, 0.0);
                    v.resize(c, 0.0);
                    (m, v)
                }
            };
            out[0].extend(p);
            out[1].extend(m);
            out[2].extend(v);
        }
        Ok(out)
    }

    /// Writes this rank's shard into `dir` (atomically) and waits for every rank's.
    pub fn save_shard(&self, dir: &Path) -> Result<PathBuf> {
        if self.model.shard_group().is_some() {
            // Every tensor-parallel rank would write the same file name.
            return Err(Error::invalid(
                "dp checkpoint",
                "a tensor-parallel shard's run saves one whole checkpoint \
                 (`Engine::save_to`), not per-rank shard files",
            ));
        }
        let [p, m, v] = self.state_chunks()?;
        let mut data = Vec::with_capacity(12 * p.len());
        for x in p.iter().chain(&m).chain(&v) {
            data.extend_from_slice(&x.to_le_bytes());
        }
        let mut header = self.header(p.len())?;
        header.checksum = Some(fingerprint(&data));
        let header = serde_json::to_vec(&header)
            .map_err(|e| Error::invalid("dp checkpoint", e.to_string()))?;
        let mut bytes = Vec::with_capacity(16 + header.len() + data.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(header.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&header);
        bytes.extend_from_slice(&data);
        std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, e.to_string()))?;
        let path = shard_path(dir, self.rank, self.dp.world);
        brrr_train::atomic::write_atomic(&path, &bytes)?;
        self.scalars.barrier()?;
        Ok(path)
    }

    /// Continues from this rank's shard in `dir`, written by a run of the same layout
    /// on the same data.
    pub fn load_shard(&mut self, dir: &Path) -> Result<()> {
        let path = shard_path(dir, self.rank, self.dp.world);
        let bytes = std::fs::read(&path).map_err(|e| Error::file(&path, e.to_string()))?;
        let (h, arrays) = parse(&path, &bytes)?;
        let want = self.header(h.chunk_elems)?;
        if (h.zero, h.world, h.rank, &h.buckets)
            != (want.zero, want.world, want.rank, &want.buckets)
        {
            return Err(Error::file(
                &path,
                format!(
                    "written by a run with --dp {} --zero {} and buckets {:?}; this run has \
                     --dp {} --zero {} and buckets {:?}",
                    h.world, h.zero, h.buckets, want.world, want.zero, want.buckets
                ),
            ));
        }
        if h.data_fingerprint != want.data_fingerprint {
            return Err(Error::file(&path, "the data differs from the run's"));
        }
        let chunk = format!("rank {}'s chunk", self.rank);
        for (what, a) in ["parameters", "first moments", "second moments"]
            .iter()
            .zip(&arrays)
        {
            brrr_train::refuse_non_finite(&chunk, what, a.iter().map(|&x| f64::from(x)))
                .map_err(|e| Error::file(&path, e.to_string()))?;
        }
        self.restore_chunks(&arrays)?;
        // A shard without the scaler's state leaves this run's at its initial scale,
        // as the one-device trainer does.
        if let (Some(s), Some(ls)) = (&mut self.scaler, h.loss_scaler) {
            s.restore_state(
                f32::from_bits(ls.scale_bits),
                &[ls.growth_tracker, ls.hysteresis_tracker],
            )?;
        }
        self.step = h.step;
        match self.dp.zero {
            0 => self.opt.step = h.adamw_step,
            _ => self.adamw_step = h.adamw_step,
        }
        self.data.set_position(&h.data_position)
    }

    /// Restores from one whole checkpoint (a one-device or `--tp` run's, or `brrr ckpt
    /// consolidate`'s of any layout): this rank takes its chunk of every bucket of
    /// parameters and moments, whatever `--dp` and `--zero` wrote it, so a run goes on
    /// with another number of replicas (`--dp 2` → `--dp 4`).
    pub fn restore_state(&mut self, state: &TrainState) -> Result<()> {
        const OP: &str = "DataParallel::restore_state";
        if state.config.model != self.config.model {
            return Err(Error::invalid(
                OP,
                format!(
                    "the saved model {:?} is not this run's {:?}",
                    state.config.model, self.config.model
                ),
            ));
        }
        if state.data_fingerprint != self.data.fingerprint() {
            return Err(Error::invalid(
                OP,
                "the data differs from the one this run was trained on",
            ));
        }
        // Parameter `i`'s value (0) or moment (1, 2) from the state, zeros before the
        // first step.
        let whole = |i: usize, k: usize| -> Result<Vec<f32>> {
            let slot = &self.layout.params[i];
            let p = state.param(&slot.name).ok_or_else(|| {
                Error::Parse(format!("checkpoint has no tensor \"model.{}\"", slot.name))
            })?;
            let host = match (k, &p.moments) {
                (0, _) => p.value.to_f32(),
                (_, None) => vec![0.0; slot.numel],
                (1, Some((m, _))) => m.to_f32(),
                (_, Some((_, v))) => v.to_f32(),
            };
            if host.len() != slot.numel {
                return Err(Error::shape(
                    OP,
                    format!(
                        "{}: {} values saved, the model has {}",
                        slot.name,
                        host.len(),
                        slot.numel
                    ),
                ));
            }
            Ok(host)
        };
        let mut arrays: [Vec<f32>; 3] = Default::default();
        for g in 0..self.groups.len() {
            for (k, array) in arrays.iter_mut().enumerate() {
                array.extend(self.chunk_of(g, |i| whole(i, k))?);
            }
        }
        self.restore_chunks(&arrays)?;
        if let (Some(s), Some(ls)) = (&mut self.scaler, &state.loss_scaler) {
            s.restore_state(ls.scale, &[ls.growth_tracker, ls.hysteresis_tracker])?;
        }
        self.step = state.step;
        match self.dp.zero {
            0 => self.opt.step = state.adamw_step,
            _ => self.adamw_step = state.adamw_step,
        }
        self.data.set_position(&state.data_position)
    }

    /// The whole run's state as one device would hold it, put together from every
    /// rank's chunks with all-gathers (a collective: every rank calls it, and every rank
    /// gets the same state). What [`crate::consolidate`] must reproduce from the files.
    pub fn gather_state(&self) -> Result<TrainState> {
        let chunks = self.state_chunks()?;
        let n = self.layout.params.len();
        let mut full: Vec<[Vec<f32>; 3]> = vec![Default::default(); n];
        let mut at = 0;
        for g in 0..self.groups.len() {
            let bucket = &self.groups[g];
            let c = crate::bucket::chunk_len(bucket.len(), self.dp.world);
            for (k, array) in chunks.iter().enumerate() {
                let whole = self.comm.all_gather(&array[at..at + c])?;
                for i in bucket.params.clone() {
                    let s = &self.layout.params[i];
                    let r = s.offset - bucket.elems.start..s.offset - bucket.elems.start + s.numel;
                    full[i][k] = whole[r].to_vec();
                }
            }
            at += c;
        }
        let h = self.header(0)?;
        let params = self
            .layout
            .params
            .iter()
            .zip(full)
            .map(|(s, [p, m, v])| ParamState {
                name: s.name.clone(),
                shape: s.dims.clone(),
                value: brrr_backend::HostData::F32(p),
                moments: (h.adamw_step > 0).then_some((
                    brrr_backend::HostData::F32(m),
                    brrr_backend::HostData::F32(v),
                )),
                optim: None,
            })
            .collect();
        Ok(TrainState {
            config: self.config.clone(),
            step: h.step,
            adamw_step: h.adamw_step,
            data_position: h.data_position,
            data_fingerprint: h.data_fingerprint,
            params,
            loss_scaler: h.loss_scaler.map(ScalerHeader::to_state),
        })
    }

    fn restore_chunks(&mut self, arrays: &[Vec<f32>; 3]) -> Result<()> {
        let n_params = self.layout.params.len();
        let mut moments: Vec<Option<(Tensor<B>, Tensor<B>)>> =
            (0..n_params).map(|_| None).collect();
        let mut at = 0;
        for g in 0..self.groups.len() {
            let c = crate::bucket::chunk_len(self.groups[g].len(), self.dp.world);
            let part = |a: &Vec<f32>| a[at..at + c].to_vec();
            let (p, m, v) = (part(&arrays[0]), part(&arrays[1]), part(&arrays[2]));
            at += c;
            if self.dp.zero == 3 {
                self.shards[g].param = Some(Tensor::from_f32(&self.backend, &p, [c], DType::F32)?);
            } else {
                let full = self.comm.all_gather(&p)?;
                self.write_params(g, &full)?;
                self.restore_masters(g, &p, &full)?;
            }
            if self.dp.zero == 0 {
                let (fm, fv) = (self.comm.all_gather(&m)?, self.comm.all_gather(&v)?);
                let base = self.groups[g].elems.start;
                for i in self.groups[g].params.clone() {
                    let s = &self.layout.params[i];
                    let r = s.offset - base..s.offset - base + s.numel;
                    let t =
                        |x: &[f32]| Tensor::from_f32(&self.backend, x, s.dims.clone(), DType::F32);
                    moments[i] = Some((t(&fm[r.clone()])?, t(&fv[r])?));
                }
            } else {
                let s = &mut self.shards[g];
                let n = crate::layout::covered_len(&s.segments);
                s.moments = (
                    Tensor::from_f32(&self.backend, &m[..n], [n], DType::F32)?,
                    Tensor::from_f32(&self.backend, &v[..n], [n], DType::F32)?,
                );
            }
        }
        if self.dp.zero == 0 {
            self.opt.moments = moments
                .into_iter()
                .map(|m| m.map(|(m, v)| brrr_nn::MomentState::F32(m, v)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Error::invalid("dp checkpoint", "a parameter has no moments"))?;
        }
        Ok(())
    }
}

impl<B: Backend, M: ReplicaModel<B>> DataParallel<B, M> {
    /// `--amp` at stages 0-2: puts the saved f32 weights back where the masters live
    /// (stage 0 beside each parameter, stages 1-2 in this rank's shard); `chunk` is this
    /// rank's part of bucket `g`, `full` the whole bucket. Nothing without `--amp`.
    fn restore_masters(&mut self, g: usize, chunk: &[f32], full: &[f32]) -> Result<()> {
        if self.compute == DType::F32 {
            return Ok(());
        }
        if self.dp.zero > 0 {
            let t = Tensor::from_f32(&self.backend, chunk, [chunk.len()], DType::F32)?;
            self.shards[g].master = Some(t);
            return Ok(());
        }
        let bucket = self.groups[g].clone();
        let base = bucket.elems.start;
        let backend = self.backend.clone();
        let slots = self.layout.params[bucket.params.clone()].to_vec();
        let ps = self.model.params_mut();
        for (p, slot) in ps.into_iter().skip(bucket.params.start).zip(&slots) {
            let r = slot.offset - base..slot.offset - base + slot.numel;
            p.master = Some(Tensor::from_f32(
                &backend,
                &full[r],
                slot.dims.clone(),
                DType::F32,
            )?);
        }
        Ok(())
    }
}

pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<(ShardHeader, [Vec<f32>; 3])> {
    let bad = |m: &str| Error::file(path, m.to_string());
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err(bad("not a brrr data-parallel shard (bad magic)"));
    }
    let hlen = u64::from_le_bytes(bytes[8..16].try_into().map_err(|_| bad("short header"))?);
    let hlen = usize::try_from(hlen).map_err(|_| bad("header length overflows"))?;
    let body = 16usize
        .checked_add(hlen)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| bad("header runs past the end of the file"))?;
    let h: ShardHeader = serde_json::from_slice(&bytes[16..body])
        .map_err(|e| Error::file(path, format!("bad header: {e}")))?;
    let want = h
        .chunk_elems
        .checked_mul(12)
        .ok_or_else(|| bad("chunk size overflows"))?;
    if bytes.len() - body != want {
        return Err(bad(&format!(
            "{} data bytes, the header says 3 × {} f32",
            bytes.len() - body,
            h.chunk_elems
        )));
    }
    if let Some(recorded) = &h.checksum {
        let read = fingerprint(&bytes[body..]);
        if read != *recorded {
            return Err(bad(&format!(
                "checksum mismatch: the header records {recorded}, the data reads {read}; \
                 the file changed after it was written (a flipped bit, a bad copy)"
            )));
        }
    }
    let floats: Vec<f32> = bytes[body..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let c = h.chunk_elems;
    let arrays = [
        floats[..c].to_vec(),
        floats[c..2 * c].to_vec(),
        floats[2 * c..].to_vec(),
    ];
    Ok((h, arrays))
}
