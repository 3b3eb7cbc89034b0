//! One single-device checkpoint from a data-parallel run's shards.
//!
//! Every rank's shard (`dp-rank{r}-of{n}.bin`, see [`crate::ckpt`]) holds its chunk of
//! every bucket: parameters and AdamW's two moments, each bucket a flat buffer padded to
//! a multiple of the world size. Consolidating reads all `n` shards, checks that they
//! were written by the same step of the same run (world size, ZeRO stage, buckets,
//! step, AdamW step, data position and fingerprint, chunk size), puts each rank's
//! segments back into their parameters ([`segments`]: the same map the engine shards
//! with), drops the padding, and returns a [`TrainState`]: the file a one-device
//! [`brrr_train::Trainer`] writes and resumes from (`brrr sample`, `brrr train
//! --resume`). The values are copied, never recomputed, so weights and moments are the
//! ranks' bit for bit.

use crate::bucket::{Bucket, chunk_len};
use crate::ckpt::{ShardHeader, parse, shard_path};
use crate::layout::{FlatLayout, segments};
use brrr_backend::{Backend, DType, Error, HostData, Result};
use brrr_nn::Gpt;
use brrr_train::{ParamState, TrainConfig, TrainState};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};

/// The world sizes `n` of the shard files (`dp-rank{r}-of{n}.bin`) in `dir`, ascending.
pub fn shard_worlds(dir: &Path) -> Result<Vec<usize>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::file(dir, format!("cannot list the shard directory: {e}")))?;
    let mut worlds = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(n) = world_of_name(&name) {
            worlds.push(n);
        }
    }
    worlds.sort_unstable();
    worlds.dedup();
    Ok(worlds)
}

/// `n` for a file named `dp-rank{r}-of{n}.bin`.
fn world_of_name(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("dp-rank")?.strip_suffix(".bin")?;
    let (rank, world) = rest.split_once("-of")?;
    rank.parse::<usize>().ok()?;
    world.parse().ok()
}

/// The world size to consolidate: `world` if given, else the only one in `dir`.
fn pick_world(dir: &Path, world: Option<usize>) -> Result<usize> {
    if let Some(n) = world {
        return Ok(n);
    }
    match shard_worlds(dir)?.as_slice() {
        [] => Err(Error::file(
            dir,
            "holds no data-parallel shards (dp-rank*-of*.bin)",
        )),
        [n] => Ok(*n),
        many => Err(Error::file(
            dir,
            format!(
                "holds shards of runs with --dp {}: say which to consolidate (--dp N)",
                many.iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" and --dp ")
            ),
        )),
    }
}

/// Reads one shard file: its header and its three arrays (parameters, first and second
/// moments, each `chunk_elems` long). Errors name the file.
pub fn read_shard(path: &Path) -> Result<(ShardHeader, [Vec<f32>; 3])> {
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::file(path, "shard missing"),
        _ => Error::file(path, format!("cannot read the shard: {e}")),
    })?;
    parse(path, &bytes)
}

/// Reads only the header of a shard file (its magic, length and JSON), not its arrays.
pub fn read_shard_header(path: &Path) -> Result<ShardHeader> {
    use std::io::Read;
    let bad = |m: String| Error::file(path, m);
    let mut f =
        std::fs::File::open(path).map_err(|e| bad(format!("cannot open the shard: {e}")))?;
    let size = f.metadata().map_err(|e| bad(e.to_string()))?.len();
    let mut head = [0u8; 16];
    f.read_exact(&mut head)
        .map_err(|_| bad("not a brrr data-parallel shard (bad magic)".into()))?;
    if &head[..8] != crate::ckpt::MAGIC {
        return Err(bad("not a brrr data-parallel shard (bad magic)".into()));
    }
    let hlen = u64::from_le_bytes([
        head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15],
    ]);
    if hlen > size - 16 {
        return Err(bad("header runs past the end of the file".into()));
    }
    let mut json = vec![0u8; hlen as usize];
    f.read_exact(&mut json)
        .map_err(|e| bad(format!("cannot read the header: {e}")))?;
    serde_json::from_slice(&json).map_err(|e| bad(format!("bad header: {e}")))
}

/// Errors unless `h` (from `path`, expected to be rank `rank`) belongs with `first`
/// (rank 0's header): same run, same step, same layout.
fn check_belongs(path: &Path, h: &ShardHeader, rank: usize, first: &ShardHeader) -> Result<()> {
    let world = first.world;
    if (h.rank, h.world) != (rank, world) {
        return Err(Error::file(
            path,
            format!(
                "says it is rank {} of {}, expected rank {rank} of {world}",
                h.rank, h.world
            ),
        ));
    }
    let fields: [(&str, String, String); 7] = [
        ("step", h.step.to_string(), first.step.to_string()),
        (
            "AdamW step",
            h.adamw_step.to_string(),
            first.adamw_step.to_string(),
        ),
        ("ZeRO stage", h.zero.to_string(), first.zero.to_string()),
        (
            "buckets",
            format!("{:?}", h.buckets),
            format!("{:?}", first.buckets),
        ),
        (
            "data position",
            h.data_position.clone(),
            first.data_position.clone(),
        ),
        (
            "data fingerprint",
            h.data_fingerprint.clone(),
            first.data_fingerprint.clone(),
        ),
        (
            "chunk size",
            h.chunk_elems.to_string(),
            first.chunk_elems.to_string(),
        ),
    ];
    for (what, mine, theirs) in fields {
        if mine != theirs {
            return Err(Error::file(
                path,
                format!(
                    "does not belong with rank 0's shard: {what} {mine}, rank 0 has {theirs} \
                     (shards of different steps or runs)"
                ),
            ));
        }
    }
    Ok(())
}

/// The buckets of `h` over `layout`, checked: consecutive parameter ranges covering
/// every parameter once, and chunks adding up to the shard's arrays.
fn buckets_of(path: &Path, h: &ShardHeader, layout: &FlatLayout) -> Result<Vec<Bucket>> {
    let n = layout.params.len();
    let mut next = 0usize;
    let mut out = Vec::with_capacity(h.buckets.len());
    // The engine launches buckets from the last parameters to the first; sort a copy
    // by start to check coverage, keep the file's order for the chunks.
    let mut sorted = h.buckets.clone();
    sorted.sort_unstable();
    for &(a, b) in &sorted {
        if a != next || b <= a || b > n {
            return Err(Error::file(
                path,
                format!(
                    "its buckets {:?} do not cover the {n} parameters of the run's model once",
                    h.buckets
                ),
            ));
        }
        next = b;
    }
    if next != n {
        return Err(Error::file(
            path,
            format!(
                "its buckets {:?} cover {next} of the {n} parameters of the run's model",
                h.buckets
            ),
        ));
    }
    let mut elems = 0usize;
    for &(a, b) in &h.buckets {
        let bucket = layout.bucket(a..b);
        elems += chunk_len(bucket.len(), h.world);
        out.push(bucket);
    }
    if elems != h.chunk_elems {
        return Err(Error::file(
            path,
            format!(
                "holds {} elements per array, the buckets need {elems}",
                h.chunk_elems
            ),
        ));
    }
    Ok(out)
}

/// The full parameters and moments, assembled from the shards in `dir`.
struct Assembled {
    header: ShardHeader,
    /// Per parameter: value, first moment, second moment.
    params: Vec<[Vec<f32>; 3]>,
}

fn assemble(dir: &Path, world: usize, layout: &FlatLayout) -> Result<Assembled> {
    if world == 0 {
        return Err(Error::invalid("consolidate", "--dp must be at least 1"));
    }
    let mut params: Vec<[Vec<f32>; 3]> = layout
        .params
        .iter()
        .map(|p| std::array::from_fn(|_| vec![0.0; p.numel]))
        .collect();
    let mut covered: Vec<usize> = vec![0; layout.params.len()];
    let mut first: Option<(ShardHeader, Vec<Bucket>)> = None;
    for rank in 0..world {
        let path = shard_path(dir, rank, world);
        let (h, arrays) = read_shard(&path)?;
        let buckets = match &first {
            None => {
                if (h.rank, h.world) != (0, world) {
                    return Err(Error::file(
                        &path,
                        format!(
                            "says it is rank {} of {}, expected 0 of {world}",
                            h.rank, h.world
                        ),
                    ));
                }
                let b = buckets_of(&path, &h, layout)?;
                first = Some((h.clone(), b.clone()));
                b
            }
            Some((f, b)) => {
                check_belongs(&path, &h, rank, f)?;
                b.clone()
            }
        };
        let mut at = 0;
        for bucket in &buckets {
            for seg in segments(layout, bucket, world, rank) {
                let from = at + seg.in_chunk.start..at + seg.in_chunk.end;
                for (k, array) in arrays.iter().enumerate() {
                    params[seg.param][k][seg.in_param.clone()]
                        .copy_from_slice(&array[from.clone()]);
                }
                covered[seg.param] += seg.in_param.len();
            }
            at += chunk_len(bucket.len(), world);
        }
    }
    // Segments tile every bucket once over the ranks (the engine relies on it); a
    // layout bug would show here rather than as silently zero weights.
    for (slot, &n) in layout.params.iter().zip(&covered) {
        if n != slot.numel {
            return Err(Error::invalid(
                "consolidate",
                format!(
                    "{}: {n} of {} elements found in the shards",
                    slot.name, slot.numel
                ),
            ));
        }
    }
    let (header, _) = first.ok_or_else(|| Error::file(dir, "no shards"))?;
    Ok(Assembled { header, params })
}

/// The one-device state of the data-parallel run whose shards are in `dir` (its `dp/`
/// folder) and whose configuration is `config` (its `config.toml`). `world` picks the
/// shards of `--dp world` when `dir` holds several runs' (else the only one present).
/// `backend` only builds the model once, for its parameters' names and shapes.
///
/// Errors name the file: a missing shard, one that is damaged (magic, header, size), one
/// from another step or layout, buckets that do not fit the config's model.
pub fn consolidate<B: Backend>(
    backend: &B,
    config: &TrainConfig,
    dir: &Path,
    world: Option<usize>,
) -> Result<TrainState> {
    let world = pick_world(dir, world)?;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let model = Gpt::new(backend, config.model.clone(), DType::F32, &mut rng)?;
    let layout = FlatLayout::of(&model)?;
    drop(model);
    let Assembled { header, params } = assemble(dir, world, &layout)?;
    let params = layout
        .params
        .iter()
        .zip(params)
        .map(|(slot, [value, m, v])| ParamState {
            name: slot.name.clone(),
            shape: slot.dims.clone(),
            value: HostData::F32(value),
            // A run that never updated has no moments (as a one-device checkpoint).
            moments: (header.adamw_step > 0).then_some((HostData::F32(m), HostData::F32(v))),
            optim: None,
        })
        .collect();
    Ok(TrainState {
        config: config.clone(),
        step: header.step,
        adamw_step: header.adamw_step,
        data_position: header.data_position,
        data_fingerprint: header.data_fingerprint,
        params,
        loss_scaler: header.loss_scaler.map(crate::ScalerHeader::to_state),
    })
}

/// Writes `state` to `path` atomically (a crash leaves the old file or none). Refuses to
/// replace an existing file unless `force`.
pub fn write_consolidated(state: &TrainState, path: &Path, force: bool) -> Result<PathBuf> {
    if path.is_dir() {
        return Err(Error::file(path, "is a directory, not a checkpoint file"));
    }
    if path.exists() && !force {
        return Err(Error::file(
            path,
            "already exists: pass --force to replace it, or another --out",
        ));
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::file(parent, e.to_string()))?;
    }
    state.save(path)?;
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_give_their_world() {
        assert_eq!(world_of_name("dp-rank3-of4.bin"), Some(4));
        assert_eq!(world_of_name("dp-rank3-of4.bin.tmp"), None);
        assert_eq!(world_of_name("dp-rankx-of4.bin"), None);
        assert_eq!(world_of_name("checkpoint.safetensors"), None);
    }
}
