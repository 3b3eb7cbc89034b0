//! Naive: everything through rank 0 (or the root). Two steps, but the root sends and
//! receives `(n−1)·S` bytes, so time grows linearly with the number of ranks: the baseline
//! the other algorithms are measured against.

use crate::schedule::{Schedule, Transfer, chunk_range};

/// All-reduce: every rank sends its buffer to rank 0, which reduces them; rank 0 sends
/// the result back to every rank.
pub fn all_reduce(n: usize, len: usize) -> Schedule {
    let mut s = Schedule::new(n, len);
    s.push((1..n).map(|r| Transfer::same(r, 0, 0..len, true)).collect());
    s.push(
        (1..n)
            .map(|r| Transfer::same(0, r, 0..len, false))
            .collect(),
    );
    s
}

/// Reduce-scatter: reduce on rank 0, then send rank `r` its chunk `r`.
pub fn reduce_scatter(n: usize, len: usize) -> Schedule {
    let mut s = Schedule::new(n, len);
    s.push((1..n).map(|r| Transfer::same(r, 0, 0..len, true)).collect());
    s.push(
        (1..n)
            .map(|r| Transfer::same(0, r, chunk_range(len, n, r), false))
            .collect(),
    );
    s
}

/// All-gather: every rank sends its chunk to rank 0, which sends everything to all.
pub fn all_gather(n: usize, len: usize) -> Schedule {
    let mut s = Schedule::new(n, len);
    s.push(
        (1..n)
            .map(|r| Transfer::same(r, 0, chunk_range(len, n, r), false))
            .collect(),
    );
    s.push(
        (1..n)
            .map(|r| Transfer::same(0, r, 0..len, false))
            .collect(),
    );
    s
}

/// Broadcast: the root sends its buffer to every other rank in one step.
pub fn broadcast(n: usize, len: usize, root: usize) -> Schedule {
    let mut s = Schedule::new(n, len);
    s.push(
        (0..n)
            .filter(|&r| r != root)
            .map(|r| Transfer::same(root, r, 0..len, false))
            .collect(),
    );
    s
}

/// All-to-all over a work buffer `[input | output]` of `2·n·block` elements: every rank
/// sends every block straight to its destination in one step.
pub fn all_to_all(n: usize, block: usize) -> Schedule {
    let half = n * block;
    let mut s = Schedule::new(n, 2 * half);
    let mut t = Vec::new();
    for src in 0..n {
        for dst in 0..n {
            t.push(Transfer {
                src,
                dst,
                src_range: dst * block..(dst + 1) * block,
                dst_range: half + src * block..half + (src + 1) * block,
                reduce: false,
            });
        }
    }
    s.push(t);
    s
}
