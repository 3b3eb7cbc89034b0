//! Where each parameter lives in the flat buffer, which parameters each part of the GPT
//! owns, and the segments of a rank's shard.

use crate::bucket::{Bucket, flat_offsets, shard_range};
use brrr_backend::{Backend, Result};
use brrr_nn::Module;
use std::ops::Range;

/// One parameter's place in the flat buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSlot {
    /// Dotted name (`h.0.attn.c_attn.weight`).
    pub name: String,
    /// Row-major shape.
    pub dims: Vec<usize>,
    /// First element in the flat buffer.
    pub offset: usize,
    /// Elements.
    pub numel: usize,
}

/// The model's parameters laid end to end in their order (`Module::params`): a flat
/// buffer of `total` elements with one view per parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlatLayout {
    /// One slot per parameter, in the model's order.
    pub params: Vec<ParamSlot>,
    /// Elements in all.
    pub total: usize,
}

impl FlatLayout {
    /// The layout of `model`'s parameters.
    pub fn of<B: Backend>(model: &impl Module<B>) -> Result<Self> {
        let ps = model.params();
        let numels: Vec<usize> = ps.iter().map(|p| p.numel()).collect();
        let offsets = flat_offsets(&numels)?;
        let params = ps
            .iter()
            .zip(&offsets)
            .map(|(p, &offset)| ParamSlot {
                name: p.name.clone(),
                dims: p.value.dims().to_vec(),
                offset,
                numel: p.numel(),
            })
            .collect();
        Ok(FlatLayout {
            params,
            total: offsets[numels.len()],
        })
    }

    /// Element counts in the model's order.
    pub fn numels(&self) -> Vec<usize> {
        self.params.iter().map(|p| p.numel).collect()
    }

    /// The bucket covering parameters `range`.
    pub fn bucket(&self, range: Range<usize>) -> Bucket {
        let start = self.params[range.start].offset;
        let last = &self.params[range.end - 1];
        Bucket {
            params: range,
            elems: start..last.offset + last.numel,
        }
    }
}

/// The parameter indices of the GPT's parts, in forward order: the embeddings (`wte`,
/// `wpe`), each block, and the final LayerNorm (the head's projection is `wte`, tied);
/// a model says its own ([`crate::ReplicaModel::pieces`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pieces {
    /// `wte` and `wpe`.
    pub embed: Range<usize>,
    /// Block `l`'s parameters.
    pub blocks: Vec<Range<usize>>,
    /// `ln_f`.
    pub head: Range<usize>,
}

impl Pieces {
    /// The parts of a model whose embeddings hold `embed` parameters, whose blocks hold
    /// `blocks` each (input first) and whose head holds `head` of its own.
    pub fn from_counts(embed: usize, blocks: impl IntoIterator<Item = usize>, head: usize) -> Self {
        let mut next = embed;
        let blocks = blocks
            .into_iter()
            .map(|n| {
                let r = next..next + n;
                next = r.end;
                r
            })
            .collect();
        Pieces {
            embed: 0..embed,
            blocks,
            head: next..next + head,
        }
    }

    /// One bucket per part in the order the backward finishes them (head, last block,
    /// ..., first block, embeddings): FSDP's wrapping of every block, what ZeRO-3 gathers
    /// and reduce-scatters.
    pub fn units(&self, layout: &FlatLayout) -> Vec<Bucket> {
        let mut out = vec![layout.bucket(self.head.clone())];
        out.extend(self.blocks.iter().rev().map(|r| layout.bucket(r.clone())));
        out.push(layout.bucket(self.embed.clone()));
        out
    }
}

/// The part of one parameter inside a rank's chunk of a bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The parameter's index.
    pub param: usize,
    /// Its elements within the parameter.
    pub in_param: Range<usize>,
    /// The same elements within the rank's chunk.
    pub in_chunk: Range<usize>,
}

/// Elements of a chunk that hold parameters: its segments laid end to end from the
/// chunk's start (what follows is padding).
pub fn covered_len(segments: &[Segment]) -> usize {
    segments.last().map_or(0, |s| s.in_chunk.end)
}

/// The parameters (or parts of them) in rank `rank`'s chunk of `bucket`, in order.
pub fn segments(layout: &FlatLayout, bucket: &Bucket, world: usize, rank: usize) -> Vec<Segment> {
    let own = shard_range(bucket.len(), world, rank);
    let (lo, hi) = (bucket.elems.start + own.start, bucket.elems.start + own.end);
    let mut out = Vec::new();
    for i in bucket.params.clone() {
        let p = &layout.params[i];
        let (a, b) = (p.offset.max(lo), (p.offset + p.numel).min(hi));
        if a < b {
            out.push(Segment {
                param: i,
                in_param: a - p.offset..b - p.offset,
                in_chunk: a - lo..b - lo,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(numels: &[usize]) -> FlatLayout {
        let offsets = flat_offsets(numels).unwrap();
        FlatLayout {
            params: numels
                .iter()
                .enumerate()
                .map(|(i, &n)| ParamSlot {
                    name: format!("p{i}"),
                    dims: vec![n],
                    offset: offsets[i],
                    numel: n,
                })
                .collect(),
            total: offsets[numels.len()],
        }
    }

    #[test]
    fn segments_cover_a_bucket_once_over_all_ranks() {
        let l = layout(&[5, 3, 7, 2]);
        let b = l.bucket(1..4); // elements 5..17, 12 of them
        let mut covered = vec![0u8; 12];
        for r in 0..5 {
            for s in segments(&l, &b, 5, r) {
                let p = &l.params[s.param];
                assert_eq!(s.in_param.len(), s.in_chunk.len());
                for e in s.in_param.clone() {
                    covered[p.offset + e - 5] += 1;
                }
            }
        }
        assert!(covered.iter().all(|&c| c == 1), "{covered:?}");
        // Each rank's segments lie end to end from its chunk's start (the flat moments
        // hold exactly them): 12 elements over 5 ranks of 3 are 3, 3, 3, 3 and 0.
        for (r, want) in [3, 3, 3, 3, 0].into_iter().enumerate() {
            let segs = segments(&l, &b, 5, r);
            let mut at = 0;
            for s in &segs {
                assert_eq!(s.in_chunk.start, at, "rank {r}");
                at = s.in_chunk.end;
            }
            assert_eq!(covered_len(&segs), want, "rank {r}");
        }
        // Rank 1 of 5 owns elements 3..6 of the bucket: p1[3..3]? no: p2[0..3].
        assert_eq!(
            segments(&l, &b, 5, 1),
            vec![Segment {
                param: 2,
                in_param: 0..3,
                in_chunk: 0..3
            }]
        );
    }
}
