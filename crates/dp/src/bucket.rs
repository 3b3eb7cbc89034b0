//! Gradient buckets and shards: which parameters are communicated together, and which
//! part of a flat buffer each rank owns. Pure functions, tested on their own.

use brrr_backend::{Error, Result};
use serde::Serialize;
use std::ops::Range;

/// PyTorch DDP's default bucket size (`bucket_cap_mb = 25`).
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;
/// PyTorch DDP's first bucket (`dist._DEFAULT_FIRST_BUCKET_BYTES`, 1 MiB): small, so that
/// the first all-reduce starts early in the backward.
pub const DEFAULT_FIRST_BUCKET_BYTES: usize = 1 << 20;

/// Parameters communicated by one collective: a contiguous range of parameter indices
/// (model order) and the elements of the flat buffer they occupy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bucket {
    /// Parameter indices, in the model's order.
    pub params: Range<usize>,
    /// The parameters' elements in the flat buffer (the model's order, no gaps).
    pub elems: Range<usize>,
}

impl Bucket {
    /// Elements in the bucket.
    pub fn len(&self) -> usize {
        self.elems.len()
    }

    /// Whether the bucket holds no elements.
    pub fn is_empty(&self) -> bool {
        self.elems.is_empty()
    }
}

/// Each parameter's offset in the flat buffer (the model's order): the prefix sums of
/// `numels`, plus the total at the end.
pub fn flat_offsets(numels: &[usize]) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(numels.len() + 1);
    let mut acc = 0usize;
    out.push(0);
    for &n in numels {
        acc = acc
            .checked_add(n)
            .ok_or_else(|| Error::invalid("flat_offsets", "the flat buffer's size overflows"))?;
        out.push(acc);
    }
    Ok(out)
}

/// Groups parameters into buckets in *reverse* parameter order, the order in which the
/// backward finishes their gradients, as PyTorch's DDP does
/// (`compute_bucket_assignment_by_size`): a bucket closes as soon as it holds at least
/// its limit, which is `first_bucket_bytes` for the first bucket and `bucket_bytes` for
/// the others. A parameter larger than the limit gets a bucket of its own. Bucket 0 holds
/// the last parameters; each bucket is a contiguous range of parameter indices.
pub fn assign_buckets(
    numels: &[usize],
    elem_bytes: usize,
    bucket_bytes: usize,
    first_bucket_bytes: usize,
) -> Result<Vec<Bucket>> {
    if elem_bytes == 0 || bucket_bytes == 0 || first_bucket_bytes == 0 {
        return Err(Error::invalid(
            "assign_buckets",
            format!(
                "element size {elem_bytes}, bucket size {bucket_bytes} and first bucket \
                 size {first_bucket_bytes} must all be positive"
            ),
        ));
    }
    let offsets = flat_offsets(numels)?;
    let mut buckets = Vec::new();
    let mut end = numels.len();
    let mut bytes = 0usize;
    for i in (0..numels.len()).rev() {
        bytes = bytes.saturating_add(numels[i].saturating_mul(elem_bytes));
        let limit = match buckets.is_empty() {
            true => first_bucket_bytes,
            false => bucket_bytes,
        };
        if bytes >= limit || i == 0 {
            buckets.push(Bucket {
                params: i..end,
                elems: offsets[i]..offsets[end],
            });
            end = i;
            bytes = 0;
        }
    }
    Ok(buckets)
}

/// The elements of each rank's chunk when `len` elements are padded to a multiple of
/// `world`: `ceil(len / world)`. Equal chunks let an all-gather and a reduce-scatter
/// exchange them without sizes.
pub fn chunk_len(len: usize, world: usize) -> usize {
    if world == 0 {
        return 0;
    }
    len.div_ceil(world)
}

/// `len` rounded up to a multiple of `world`: the padded flat buffer.
pub fn padded_len(len: usize, world: usize) -> usize {
    chunk_len(len, world) * world
}

/// The elements of a `len`-element buffer that rank `rank` of `world` owns: its
/// [`chunk_len`]-sized chunk, cut at `len` (the last ranks may own fewer, or none, of the
/// real elements; the rest is padding).
pub fn shard_range(len: usize, world: usize, rank: usize) -> Range<usize> {
    let c = chunk_len(len, world);
    let start = (rank * c).min(len);
    let end = ((rank + 1) * c).min(len);
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_run_in_reverse_with_a_small_first_bucket() {
        // 4-byte elements: params of 100, 300, 50, 200, 10 elements.
        let numels = [100, 300, 50, 200, 10];
        let b = assign_buckets(&numels, 4, 1000, 100).unwrap();
        // First bucket: param 4 (40 B) then param 3 (800 B) reaches 100 B.
        assert_eq!(b[0].params, 3..5);
        assert_eq!(b[0].elems, 450..660);
        // Then 1000 B: param 2 (200) + param 1 (1200) reaches it.
        assert_eq!(b[1].params, 1..3);
        // What is left: param 0.
        assert_eq!(b[2].params, 0..1);
        assert_eq!(b[2].elems, 0..100);
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn buckets_cover_every_parameter_once() {
        let numels = [7, 1, 1, 30, 2, 2, 9];
        let b = assign_buckets(&numels, 4, 16, 8).unwrap();
        let mut seen: Vec<usize> = b.iter().flat_map(|x| x.params.clone()).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..numels.len()).collect::<Vec<_>>());
        let total: usize = b.iter().map(Bucket::len).sum();
        assert_eq!(total, numels.iter().sum::<usize>());
        // A huge parameter gets its own bucket.
        assert!(b.iter().any(|x| x.params == (3..4)));
    }

    #[test]
    fn one_bucket_when_everything_fits() {
        let b = assign_buckets(&[10, 20], 4, 1 << 20, 1 << 20).unwrap();
        assert_eq!(
            b,
            vec![Bucket {
                params: 0..2,
                elems: 0..30
            }]
        );
        assert!(assign_buckets(&[1], 4, 0, 1).is_err());
    }

    #[test]
    fn shards_tile_the_buffer() {
        for (len, world) in [(10, 4), (8, 4), (3, 4), (0, 2), (17, 1)] {
            let mut next = 0;
            for r in 0..world {
                let s = shard_range(len, world, r);
                assert_eq!(s.start, next, "len {len} world {world} rank {r}");
                assert!(s.len() <= chunk_len(len, world));
                next = s.end;
            }
            assert_eq!(next, len);
            assert!(padded_len(len, world) >= len);
            assert!(padded_len(len, world) < len + world.max(1));
        }
        assert_eq!(shard_range(10, 4, 3), 9..10);
        assert_eq!(shard_range(3, 4, 3), 3..3);
    }
}
