//! A pipeline run's stage files as one single-device checkpoint: what `brrr sample`
//! reads, and what a run in another layout starts from (`brrr ckpt consolidate`).
//!
//! Stage `s` of `p` (tensor rank `r` of `t`) wrote its own parameters and AdamW moments
//! (`crate::ckpt`); the pieces are put back together by name: tensor-parallel shards
//! are joined in rank order (brrr-tp's `unshard_by_name`), replicated parameters and the
//! tied embedding, which the last stage holds a copy of, are taken once.

use crate::ckpt::{read_stage_file, stage_shard_path};
use brrr_backend::{Backend, DType, Error, HostData, Result};
use brrr_nn::{Gpt, Module};
use brrr_tp::shard::{shard_dims_by_name, unshard_by_name};
use brrr_train::{ParamState, TrainConfig, TrainState};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::path::Path;

/// One parameter's arrays as each tensor rank saved them: values, first and second
/// moments (empty before the first update).
type Saved = Vec<[Vec<f32>; 3]>;

/// The run whose `config` (its layout a pipeline) saved its stages into `dir` (a run
/// directory's `pp/`), as the single-device state one device would hold after the
/// same steps. `data_fingerprint` is the data's (the stage files do not record it);
/// `backend` only builds the model to learn its parameters' names and shapes.
pub fn consolidate<B: Backend>(
    backend: &B,
    config: &TrainConfig,
    dir: &Path,
    data_fingerprint: String,
) -> Result<TrainState> {
    let t = config.layout.tp;
    let (saved, first) = read_stages(config, dir)?;
    let Some(((step, adamw_step, has_moments), data_position)) = first else {
        return Err(Error::file(dir, "holds no pipeline stage files"));
    };
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let model = Gpt::new(backend, config.model.clone(), DType::F32, &mut rng)?;
    let mut params = Vec::new();
    for q in model.params() {
        let full = q.value.dims().to_vec();
        let ranks = saved
            .get(&q.name)
            .ok_or_else(|| Error::file(dir, format!("no stage saved \"{}\"", q.name)))?;
        let join = |k: usize| -> Result<HostData> {
            let shard = shard_dims_by_name(&q.name, &full, t);
            let replicated = shard == full;
            let gathered: Vec<f32> = match replicated {
                true => ranks[0][k].clone(),
                false => ranks.iter().flat_map(|a| a[k].iter().copied()).collect(),
            };
            let n = if replicated { 1 } else { t };
            let (values, dims) = unshard_by_name(&q.name, &gathered, &shard, n)?;
            if dims != full {
                return Err(Error::file(
                    dir,
                    format!("{}: the stages hold {dims:?}, the model {full:?}", q.name),
                ));
            }
            Ok(HostData::F32(values))
        };
        if ranks.len() != t {
            return Err(Error::file(
                dir,
                format!(
                    "{}: {} tensor ranks saved it, the run has {t}",
                    q.name,
                    ranks.len()
                ),
            ));
        }
        params.push(ParamState {
            name: q.name.clone(),
            shape: full.clone(),
            value: join(0)?,
            moments: match has_moments {
                true => Some((join(1)?, join(2)?)),
                false => None,
            },
            optim: None,
        });
    }
    Ok(TrainState {
        config: config.clone(),
        step,
        adamw_step,
        data_position,
        data_fingerprint,
        params,
        loss_scaler: None,
    })
}

/// What every stage and tensor rank saved, by parameter name (the tied head's copy of
/// `wte` skipped), and stage 0's `(step, adamw step, has moments)` and data position;
/// errors if the files were saved at different steps.
#[allow(clippy::type_complexity)]
fn read_stages(
    config: &TrainConfig,
    dir: &Path,
) -> Result<(BTreeMap<String, Saved>, Option<((u64, u32, bool), String)>)> {
    let (p, t) = (config.layout.pp, config.layout.tp);
    let mut saved: BTreeMap<String, Saved> = BTreeMap::new();
    let mut first = None;
    for s in 0..p {
        for r in 0..t {
            let path = stage_shard_path(dir, s, p, r, t);
            let (h, floats) = read_stage_file(&path)?;
            let key = (h.step, h.adamw_step, h.has_moments);
            match &first {
                None => first = Some((key, h.data_position.clone())),
                Some((k, _)) if *k != key => {
                    return Err(Error::file(
                        &path,
                        format!(
                            "saved at step {} while stage 0 was saved at {}",
                            h.step, k.0
                        ),
                    ));
                }
                Some(_) => {}
            }
            let total: usize = h.params.iter().map(|x| x.1).sum();
            let mut at = 0;
            for (name, n) in &h.params {
                let slice = |k: usize| match h.has_moments || k == 0 {
                    true => floats[k * total + at..k * total + at + n].to_vec(),
                    false => Vec::new(),
                };
                let per_rank = saved.entry(name.clone()).or_default();
                // The tied head's copy of `wte` on the last stage equals stage 0's.
                if per_rank.len() == r {
                    per_rank.push([slice(0), slice(1), slice(2)]);
                }
                at += n;
            }
        }
    }
    Ok((saved, first))
}
