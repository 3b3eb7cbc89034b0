//! Ring algorithms. Ranks form a ring `r → r+1 mod n`; the buffer is cut into `n` chunks
//! and in every step each rank passes one chunk to its right neighbour.
//!
//! All-reduce = reduce-scatter then all-gather, `2(n−1)` steps of `S/n` bytes each: every
//! rank sends `2(n−1)/n · S` bytes, which Patarasuk and Yuan ("Bandwidth optimal all-reduce
//! algorithms for clusters of workstations", JPDC 2009) prove is the minimum for any
//! all-reduce, at the price of a latency term linear in `n`. This is what NCCL runs for
//! large buffers, and why nccl-tests' bus bandwidth multiplies by `2(n−1)/n`.

use crate::schedule::{Schedule, Transfer, chunk_range};

/// Reduce-scatter: after `n−1` steps rank `r` holds chunk `r` reduced over all ranks.
///
/// In step `s` rank `r` sends chunk `(r − s − 1) mod n` — the one it received and reduced
/// in step `s − 1` (at step 0, its own) — and its right neighbour adds it in.
pub fn reduce_scatter(n: usize, len: usize) -> Schedule {
    let mut s = Schedule::new(n, len);
    for step in 0..n.saturating_sub(1) {
        s.push(
            (0..n)
                .map(|r| {
                    let c = (r + 2 * n - step - 1) % n;
                    Transfer::same(r, (r + 1) % n, chunk_range(len, n, c), true)
                })
                .collect(),
        );
    }
    s
}

/// All-gather: rank `r` starts with chunk `r`; in step `s` it forwards chunk
/// `(r − s) mod n` (its own first, then the one it just received).
pub fn all_gather(n: usize, len: usize) -> Schedule {
    let mut s = Schedule::new(n, len);
    for step in 0..n.saturating_sub(1) {
        s.push(
            (0..n)
                .map(|r| {
                    let c = (r + n - step) % n;
                    Transfer::same(r, (r + 1) % n, chunk_range(len, n, c), false)
                })
                .collect(),
        );
    }
    s
}

/// All-reduce: ring reduce-scatter, then ring all-gather of the reduced chunks.
pub fn all_reduce(n: usize, len: usize) -> Schedule {
    let mut s = reduce_scatter(n, len);
    s.extend(all_gather(n, len));
    s
}

/// Broadcast down a pipelined chain `root → root+1 → …`: the buffer is cut into `n`
/// segments and in step `t` the rank at chain position `p` forwards segment `t − p`, so
/// the segments flow one behind the other (`2n − 3` steps of `S/n` instead of `n − 1`
/// steps of `S`).
pub fn broadcast(n: usize, len: usize, root: usize) -> Schedule {
    let mut s = Schedule::new(n, len);
    let segments = n;
    for t in 0..(segments + n).saturating_sub(2) {
        let mut step = Vec::new();
        for p in 0..n - 1 {
            if t >= p && t - p < segments {
                let (from, to) = ((root + p) % n, (root + p + 1) % n);
                step.push(Transfer::same(
                    from,
                    to,
                    chunk_range(len, segments, t - p),
                    false,
                ));
            }
        }
        s.push(step);
    }
    s
}

/// All-to-all as `n − 1` pairwise exchanges over the work buffer `[input | output]`: in
/// step `s` rank `r` sends its block for `r + s` and receives from `r − s`, so every
/// rank sends and receives exactly one block per step.
pub fn all_to_all(n: usize, block: usize) -> Schedule {
    let half = n * block;
    let mut s = Schedule::new(n, 2 * half);
    let blk = |b: usize| b * block..(b + 1) * block;
    let out = |b: usize| half + b * block..half + (b + 1) * block;
    // Step 0 is each rank's own block, a local copy.
    for shift in 0..n {
        s.push(
            (0..n)
                .map(|r| {
                    let dst = (r + shift) % n;
                    Transfer {
                        src: r,
                        dst,
                        src_range: blk(dst),
                        dst_range: out(r),
                        reduce: false,
                    }
                })
                .collect(),
        );
    }
    s
}
