//! A resumable, shuffled, rank-sharded loader over token shards.
//!
//! # Windows and epochs
//!
//! Each shard of `n` tokens holds `(n - 1) / seq` windows: window `w` is the `seq + 1`
//! tokens starting at `w · seq` (inputs are the first `seq`, targets the last `seq`;
//! neighbouring windows share one token, as llm.c's loader does). An *epoch* visits
//! every window once, in an order drawn from a ChaCha8 generator: first the order of
//! the shards, then the order of the windows inside each shard. Shuffling inside a
//! shard keeps reads local (one shard's pages at a time) while still mixing documents.
//!
//! # Ranks
//!
//! The epoch's windows, in that order, are dealt like cards: batch `k` of rank `r`
//! (out of `world`) takes positions `(k · world + r) · B .. + B`. Ranks therefore never
//! see the same window in an epoch, and together they see all of it except the last
//! `< world · B` windows, which no rank could fill a whole batch with (dropped, as
//! PyTorch's `DistributedSampler` with `drop_last` does).
//!
//! # Position
//!
//! Everything is a function of `(seed, epoch, batch index)`, so the position saved in a
//! checkpoint is just `epoch=E batch=K rank=R world=W`; a resumed loader recomputes the
//! epoch's permutations and continues on exactly the next batch. No generator state
//! needs saving, and the position does not depend on how many batches were prefetched.

use crate::corpus::{Batch, BatchSource};
use crate::shard::Shard;
use brrr_backend::{Error, Result};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use std::sync::Arc;

/// Where a [`ShardLoader`] stands; its text form goes into checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoaderPosition {
    /// Epochs completed: the epoch the next batch comes from, counting from 0.
    pub epoch: u64,
    /// Batches this rank already took in `epoch`.
    pub batch: u64,
    /// This loader's data-parallel rank, in `0..world`.
    pub rank: usize,
    /// Number of data-parallel ranks the epoch is dealt to; a saved position only
    /// resumes a loader with the same `rank` and `world`.
    pub world: usize,
}

impl std::fmt::Display for LoaderPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "epoch={} batch={} rank={} world={}",
            self.epoch, self.batch, self.rank, self.world
        )
    }
}

impl std::str::FromStr for LoaderPosition {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| Error::Parse(format!("shard loader position {s:?}: {why}"));
        let mut fields = s.split_whitespace();
        let mut next = |key: &str| -> Result<u64> {
            let kv = fields
                .next()
                .ok_or_else(|| bad(&format!("missing `{key}=`")))?;
            kv.strip_prefix(key)
                .and_then(|r| r.strip_prefix('='))
                .ok_or_else(|| bad(&format!("expected `{key}=...`, found {kv:?}")))?
                .parse()
                .map_err(|_| bad(&format!("{key} is not a non-negative integer")))
        };
        let pos = LoaderPosition {
            epoch: next("epoch")?,
            batch: next("batch")?,
            rank: next("rank")? as usize,
            world: next("world")? as usize,
        };
        if fields.next().is_some() {
            return Err(bad("unexpected text after world"));
        }
        Ok(pos)
    }
}

/// A uniform integer in `0..n` (`n > 0`) from raw generator words, by rejection (no
/// modulo bias), so the permutations do not depend on `rand`'s range algorithms.
pub fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    let zone = u64::MAX - u64::MAX % n;
    loop {
        let x = rng.next_u64();
        if x < zone {
            return x % n;
        }
    }
}

/// Fisher–Yates shuffle of `0..n` from `(seed, stream)`.
pub fn permutation(n: usize, seed: u64, stream: u64) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    let mut p: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = below(&mut rng, i as u64 + 1) as usize;
        p.swap(i, j);
    }
    p
}

/// Windows of `seq + 1` tokens at stride `seq` in a shard of `len` tokens.
pub fn windows_in(len: usize, seq: usize) -> usize {
    if seq == 0 || len < seq + 1 {
        0
    } else {
        (len - 1) / seq
    }
}

/// The window this rank's batch `k`, row `i` reads: a position in the epoch's order.
pub fn epoch_slot(k: u64, i: usize, rank: usize, world: usize, batch: usize) -> u64 {
    (k * world as u64 + rank as u64) * batch as u64 + i as u64
}

/// One epoch's order: the shards' order and where each starts in the window sequence.
struct EpochOrder {
    epoch: u64,
    shard_order: Vec<u32>,
    /// `starts[j]`: epoch position of the first window of `shard_order[j]`.
    starts: Vec<u64>,
    /// The window permutation of one shard, cached: `(shard, permutation)`.
    cached: Option<(usize, Vec<u32>)>,
}

/// Training batches from token shards: shuffled, split across ranks, resumable.
pub struct ShardLoader {
    shards: Arc<Vec<Shard>>,
    batch: usize,
    seq: usize,
    seed: u64,
    vocab_size: usize,
    pos: LoaderPosition,
    batches_per_epoch: u64,
    fingerprint: String,
    order: Option<EpochOrder>,
    /// With [`ShardLoader::with_document_mask`]: the token that starts each document.
    eot: Option<u32>,
}

impl std::fmt::Debug for ShardLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardLoader")
            .field("shards", &self.shards.len())
            .field("batch", &self.batch)
            .field("seq", &self.seq)
            .field("position", &self.pos)
            .finish()
    }
}

impl ShardLoader {
    /// A loader for rank `rank` of `world` over `shards` (the training shards), drawing
    /// `[batch, seq]` windows. Token ids must be below `vocab_size` (checked as read).
    pub fn new(
        shards: Arc<Vec<Shard>>,
        batch: usize,
        seq: usize,
        seed: u64,
        vocab_size: usize,
        rank: usize,
        world: usize,
    ) -> Result<Self> {
        let bad = |msg: String| Err(Error::invalid("ShardLoader", msg));
        if batch == 0 || seq == 0 {
            return bad(format!("batch {batch} and seq {seq} must be at least 1"));
        }
        if world == 0 || rank >= world {
            return bad(format!("rank {rank} is not one of {world} ranks"));
        }
        let total: u64 = shards.iter().map(|s| windows_in(s.len(), seq) as u64).sum();
        let per_epoch = total / (world as u64 * batch as u64);
        if per_epoch == 0 {
            return bad(format!(
                "{} shards hold {total} windows of {} tokens, fewer than one batch of {batch} \
                 for each of {world} ranks",
                shards.len(),
                seq + 1
            ));
        }
        let fingerprint = shards_fingerprint(&shards);
        Ok(ShardLoader {
            shards,
            batch,
            seq,
            seed,
            vocab_size,
            pos: LoaderPosition {
                epoch: 0,
                batch: 0,
                rank,
                world,
            },
            batches_per_epoch: per_epoch,
            fingerprint,
            order: None,
            eot: None,
        })
    }

    /// Batches come with a [`DocumentMask`](crate::DocumentMask) that starts a document at every
    /// `eot` token, so that attention never crosses from one document into the next.
    pub fn with_document_mask(mut self, eot: u32) -> Self {
        self.eot = Some(eot);
        self
    }

    /// Batches each rank takes per epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        self.batches_per_epoch
    }

    /// Where the loader stands, as a struct ([`BatchSource::position`] gives its text).
    pub fn loader_position(&self) -> LoaderPosition {
        self.pos
    }

    fn order(&mut self) -> &mut EpochOrder {
        let epoch = self.pos.epoch;
        if self.order.as_ref().is_none_or(|o| o.epoch != epoch) {
            // Stream `epoch << 32` orders the shards, `epoch << 32 | (s + 1)` the
            // windows of shard `s`: independent, and all derived from the seed.
            let shard_order = permutation(self.shards.len(), self.seed, epoch << 32);
            let mut starts = Vec::with_capacity(shard_order.len());
            let mut at = 0u64;
            for &s in &shard_order {
                starts.push(at);
                at += windows_in(self.shards[s as usize].len(), self.seq) as u64;
            }
            self.order = Some(EpochOrder {
                epoch,
                shard_order,
                starts,
                cached: None,
            });
        }
        self.order.as_mut().expect("set above")
    }

    /// `(shard, window)` at position `slot` of the current epoch's order.
    fn locate(&mut self, slot: u64) -> (usize, usize) {
        let (seed, seq, epoch) = (self.seed, self.seq, self.pos.epoch);
        let shards = Arc::clone(&self.shards);
        let order = self.order();
        let j = order.starts.partition_point(|&s| s <= slot) - 1;
        let shard = order.shard_order[j] as usize;
        let within = (slot - order.starts[j]) as usize;
        if order.cached.as_ref().is_none_or(|(s, _)| *s != shard) {
            let n = windows_in(shards[shard].len(), seq);
            let perm = permutation(n, seed, (epoch << 32) | (shard as u64 + 1));
            order.cached = Some((shard, perm));
        }
        let perm = &order.cached.as_ref().expect("set above").1;
        (shard, perm[within] as usize)
    }

    /// The `(shard, window)` pairs of this rank's next batch, without taking it.
    pub fn peek_windows(&mut self) -> Vec<(usize, usize)> {
        let LoaderPosition {
            batch: k,
            rank,
            world,
            ..
        } = self.pos;
        (0..self.batch)
            .map(|i| self.locate(epoch_slot(k, i, rank, world, self.batch)))
            .collect()
    }

    fn take(&mut self) -> Result<Batch> {
        let windows = self.peek_windows();
        let (b, t) = (self.batch, self.seq);
        let mut inputs = Vec::with_capacity(b * t);
        let mut targets = Vec::with_capacity(b * t);
        let mut row = Vec::with_capacity(t + 1);
        for (shard, w) in windows {
            row.clear();
            let s = &self.shards[shard];
            s.extend_range(w * t, t + 1, &mut row)?;
            if let Some(i) = row.iter().position(|&x| x as usize >= self.vocab_size) {
                return Err(Error::file(
                    s.path(),
                    format!(
                        "token {} at index {} is outside the model's vocabulary of {}",
                        row[i],
                        w * t + i,
                        self.vocab_size
                    ),
                ));
            }
            inputs.extend_from_slice(&row[..t]);
            targets.extend_from_slice(&row[1..]);
        }
        self.pos.batch += 1;
        if self.pos.batch == self.batches_per_epoch {
            self.pos.epoch += 1;
            self.pos.batch = 0;
        }
        let batch = Batch {
            inputs,
            targets,
            batch: b,
            seq: t,
            mask: None,
        };
        match self.eot {
            Some(eot) => batch.with_document_mask(eot),
            None => Ok(batch),
        }
    }
}

impl BatchSource for ShardLoader {
    fn next_batch(&mut self) -> Result<Batch> {
        self.take()
    }

    /// `epoch=E batch=K rank=R world=W`.
    fn position(&self) -> String {
        self.pos.to_string()
    }

    fn set_position(&mut self, position: &str) -> Result<()> {
        let p: LoaderPosition = position.parse()?;
        if (p.rank, p.world) != (self.pos.rank, self.pos.world) {
            return Err(Error::invalid(
                "ShardLoader::set_position",
                format!(
                    "the saved position is rank {} of {}, this loader is rank {} of {}: \
                     resuming with another data-parallel layout would repeat or skip windows",
                    p.rank, p.world, self.pos.rank, self.pos.world
                ),
            ));
        }
        if p.batch >= self.batches_per_epoch {
            return Err(Error::invalid(
                "ShardLoader::set_position",
                format!(
                    "batch {} is past the {} batches of an epoch",
                    p.batch, self.batches_per_epoch
                ),
            ));
        }
        self.pos = p;
        Ok(())
    }

    fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }
}

/// `shards-fnv1a64:<hex>:<tokens>` over each shard's file name, token count and first and
/// last 256 tokens: cheap for terabytes, and it changes when shards are added, removed,
/// reordered or regenerated with another tokenizer.
pub fn shards_fingerprint(shards: &[Shard]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    let mut total = 0u64;
    for s in shards {
        let name = s
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        eat(name.unwrap_or_default().as_bytes());
        eat(&(s.len() as u64).to_le_bytes());
        total += s.len() as u64;
        let n = s.len().min(256);
        let mut ends = Vec::with_capacity(2 * n);
        // Both ranges lie inside the shard.
        let _ = s.extend_range(0, n, &mut ends);
        let _ = s.extend_range(s.len() - n, n, &mut ends);
        for t in ends {
            eat(&t.to_le_bytes());
        }
    }
    format!("shards-fnv1a64:{h:016x}:{total}")
}

/// Fixed validation batches: `n_batches · batch` consecutive windows from the start of
/// `shards` (llm.c evaluates on the first tokens of its validation shard), the same on
/// every run. Fewer batches if the shards hold fewer windows.
pub fn shard_val_batches(
    shards: &[Shard],
    batch: usize,
    seq: usize,
    n_batches: usize,
) -> Result<Vec<Batch>> {
    let mut windows = shards
        .iter()
        .flat_map(|s| (0..windows_in(s.len(), seq)).map(move |w| (s, w)));
    let mut out = Vec::new();
    let mut row = Vec::with_capacity(seq + 1);
    'outer: for _ in 0..n_batches {
        let mut b = Batch {
            inputs: Vec::with_capacity(batch * seq),
            targets: Vec::with_capacity(batch * seq),
            batch,
            seq,
            mask: None,
        };
        for _ in 0..batch {
            let Some((s, w)) = windows.next() else {
                break 'outer;
            };
            row.clear();
            s.extend_range(w * seq, seq + 1, &mut row)?;
            b.inputs.extend_from_slice(&row[..seq]);
            b.targets.extend_from_slice(&row[1..]);
        }
        out.push(b);
    }
    Ok(out)
}
