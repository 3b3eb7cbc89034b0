//! Packing variable-length documents into fixed windows, and balancing them over ranks.
//!
//! # Packing
//!
//! Padding every document to the window length wastes the compute of the padding;
//! concatenating documents and cutting windows lets a token attend to an unrelated
//! document before it. Packing with a document mask does neither: documents are placed
//! whole into `seq`-token rows (first-fit decreasing), each token's position restarts at
//! 0 at its document's start, and every token carries its document's *segment id*, so
//! attention may only look at earlier tokens of the same segment. A document of `L`
//! tokens occupies `L - 1` slots (inputs `d[0..L-1]`, targets `d[1..L]`); a document
//! longer than `seq + 1` is first cut into pieces of at most `seq + 1` tokens. The tail
//! of a row that no document fills is padding: its targets are [`IGNORE`] and it is a
//! segment of its own.
//!
//! # Balancing
//!
//! With variable-length sequences, ranks of a data-parallel group finishing a step at
//! different times all wait for the slowest. Attention's cost grows with the square of
//! a sequence's length, so the per-rank cost is about `Σ len²` (the observation behind
//! FlexSP, Wang et al. 2025). [`balance`] assigns sequences to ranks by longest
//! processing time first (Graham 1969: within 4/3 of the optimum), and [`imbalance`]
//! measures `max / mean` of the per-rank cost.

use brrr_backend::{Error, Result};

/// The target of a padding slot: cross-entropy ignores negative targets.
pub const IGNORE: i32 = -1;

/// `rows` packed rows of `seq` slots, row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedBatch {
    /// Number of rows: as many as first-fit decreasing needed for the documents.
    pub rows: usize,
    /// Slots per row (the window length given to [`pack_documents`]).
    pub seq: usize,
    /// Input token of each slot, `rows × seq` row-major; 0 on padding.
    pub inputs: Vec<u32>,
    /// The next token, or [`IGNORE`] on padding.
    pub targets: Vec<i32>,
    /// The position inside the token's document, restarting at 0.
    pub positions: Vec<u32>,
    /// Which document a slot belongs to, unique within a row; padding gets its own.
    pub segments: Vec<u32>,
    /// For each document piece: `(row, first slot, slots)`.
    pub placements: Vec<(usize, usize, usize)>,
}

impl PackedBatch {
    /// Slots holding a real target, over all slots.
    pub fn fill(&self) -> f64 {
        let used = self.targets.iter().filter(|&&t| t != IGNORE).count();
        used as f64 / self.targets.len().max(1) as f64
    }
}

/// Cuts documents longer than `seq + 1` tokens into pieces of at most `seq + 1` (a
/// piece keeps its last token as the next piece's first, so no target is lost), and
/// drops documents of fewer than 2 tokens (they predict nothing).
pub fn split_long(docs: &[Vec<u32>], seq: usize) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for d in docs {
        let mut start = 0;
        while d.len() >= start + 2 {
            let end = (start + seq + 1).min(d.len());
            out.push(d[start..end].to_vec());
            start = end - 1;
        }
    }
    out
}

/// Packs documents into rows of `seq` slots by first-fit decreasing: the longest
/// pieces first, each into the first row with room. Returns as many rows as needed.
pub fn pack_documents(docs: &[Vec<u32>], seq: usize) -> Result<PackedBatch> {
    if seq == 0 {
        return Err(Error::invalid("pack_documents", "seq must be at least 1"));
    }
    let pieces = split_long(docs, seq);
    let mut by_len: Vec<usize> = (0..pieces.len()).collect();
    // Stable: equal lengths keep their input order, so packing is deterministic.
    by_len.sort_by_key(|&i| std::cmp::Reverse(pieces[i].len()));
    let mut free: Vec<usize> = Vec::new();
    let mut rows_of: Vec<Vec<usize>> = Vec::new();
    for &i in &by_len {
        let need = pieces[i].len() - 1;
        let r = match free.iter().position(|&f| f >= need) {
            Some(r) => r,
            None => {
                free.push(seq);
                rows_of.push(Vec::new());
                free.len() - 1
            }
        };
        free[r] -= need;
        rows_of[r].push(i);
    }
    let rows = rows_of.len();
    let mut out = PackedBatch {
        rows,
        seq,
        inputs: vec![0; rows * seq],
        targets: vec![IGNORE; rows * seq],
        positions: vec![0; rows * seq],
        segments: vec![0; rows * seq],
        placements: vec![(0, 0, 0); pieces.len()],
    };
    for (r, members) in rows_of.iter().enumerate() {
        let mut at = 0;
        for (seg, &i) in members.iter().enumerate() {
            let d = &pieces[i];
            let n = d.len() - 1;
            for k in 0..n {
                let slot = r * seq + at + k;
                out.inputs[slot] = d[k];
                out.targets[slot] = d[k + 1] as i32;
                out.positions[slot] = k as u32;
                out.segments[slot] = seg as u32;
            }
            out.placements[i] = (r, at, n);
            at += n;
        }
        // Padding: a segment of its own, positions counting on from 0.
        for (k, slot) in (r * seq + at..(r + 1) * seq).enumerate() {
            out.segments[slot] = members.len() as u32;
            out.positions[slot] = k as u32;
        }
    }
    Ok(out)
}

/// Attention cost of a sequence of `len` tokens, up to a constant: `len²`.
pub fn attention_cost(len: usize) -> f64 {
    (len as f64) * (len as f64)
}

/// Per-rank cost `Σ len²` of an assignment (`assign[i]` = rank of sequence `i`).
pub fn rank_costs(lens: &[usize], assign: &[usize], world: usize) -> Vec<f64> {
    let mut c = vec![0.0; world];
    for (&l, &r) in lens.iter().zip(assign) {
        c[r] += attention_cost(l);
    }
    c
}

/// `max / mean` of the per-rank costs: 1.0 is perfect balance, 2.0 means the slowest
/// rank works twice the average and the others idle half the step.
pub fn imbalance(costs: &[f64]) -> f64 {
    let mean = costs.iter().sum::<f64>() / costs.len().max(1) as f64;
    let max = costs.iter().cloned().fold(0.0, f64::max);
    if mean > 0.0 { max / mean } else { 1.0 }
}

/// The naive assignment: sequence `i` to rank `i % world` (what dealing a shuffled
/// stream does).
pub fn round_robin(n: usize, world: usize) -> Vec<usize> {
    (0..n).map(|i| i % world.max(1)).collect()
}

/// Assigns sequences to `world` ranks balancing `Σ len²`: longest first, each to the
/// currently cheapest rank (ties to the lowest rank). Deterministic.
pub fn balance(lens: &[usize], world: usize) -> Result<Vec<usize>> {
    if world == 0 {
        return Err(Error::invalid("balance", "world must be at least 1"));
    }
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
    let mut load = vec![0.0f64; world];
    let mut assign = vec![0; lens.len()];
    for i in order {
        let mut best = 0;
        for r in 1..world {
            if load[r] < load[best] {
                best = r;
            }
        }
        load[best] += attention_cost(lens[i]);
        assign[i] = best;
    }
    Ok(assign)
}

/// Lengths from a long-tailed (log-normal-like, Pareto-tailed) distribution, as text
/// corpora have: many short documents, a few very long ones. Deterministic in `seed`.
pub fn long_tailed_lengths(n: usize, max_len: usize, seed: u64) -> Vec<usize> {
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            // Pareto with shape 1.2 and scale 32: P(len > x) = (32/x)^1.2.
            let u = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            let x = 32.0 / u.powf(1.0 / 1.2);
            (x as usize).clamp(2, max_len)
        })
        .collect()
}
