//! Tree algorithms over a binary tree in heap order: node `i` has children `2i+1` and
//! `2i+2`, so the depth is `⌊log₂ n⌋` and an all-reduce takes `2⌊log₂ n⌋` steps instead of
//! the ring's `2(n−1)`: fewer latencies, which wins for small buffers.
//!
//! Without pipelining each step carries the whole buffer, so a big buffer costs about
//! `2 log₂ n · S/β`, more than the ring's `2S/β`; NCCL pipelines the tree in small chunks
//! to reach `≈ 2S/β` (the cost `brrr-perf` models). The double binary tree (Sanders, Speck
//! and Träff, "Two-tree algorithms for full bandwidth broadcast, reduction and scan",
//! Parallel Computing 2009; used by NCCL since 2.4) splits the buffer in two halves over two
//! trees in which every rank is an inner node at most once, so both halves move at once
//! and no rank forwards twice. Here the second tree is the first mirrored (node `i` is rank
//! `n−1−i`): heap inner nodes are the low indices, so mirrored they are the high ranks.

use crate::schedule::{Schedule, Transfer};
use std::ops::Range;

fn depth(i: usize) -> usize {
    (usize::BITS - 1 - (i + 1).leading_zeros()) as usize
}

/// Steps of one tree: reduce towards node 0 (`up`) or send down from it, with `rank(i)`
/// the rank at node `i`. Entry `d − 1` holds the transfers between depth `d` and `d − 1`.
fn levels(
    n: usize,
    rank: &dyn Fn(usize) -> usize,
    range: Range<usize>,
    up: bool,
) -> Vec<Vec<Transfer>> {
    let max_depth = if n == 0 { 0 } else { depth(n - 1) };
    let mut out = vec![Vec::new(); max_depth];
    for i in 1..n {
        let (child, parent) = (rank(i), rank((i - 1) / 2));
        let t = if up {
            Transfer::same(child, parent, range.clone(), true)
        } else {
            Transfer::same(parent, child, range.clone(), false)
        };
        out[depth(i) - 1].push(t);
    }
    out
}

/// Appends `levels` as steps: deepest first going up, shallowest first going down.
fn push_levels(s: &mut Schedule, mut lv: Vec<Vec<Transfer>>, up: bool) {
    if up {
        lv.reverse();
    }
    for step in lv {
        s.push(step);
    }
}

/// All-reduce on one binary tree rooted at rank 0: reduce up, broadcast down.
pub fn all_reduce(n: usize, len: usize) -> Schedule {
    let mut s = Schedule::new(n, len);
    let id = |i: usize| i;
    push_levels(&mut s, levels(n, &id, 0..len, true), true);
    push_levels(&mut s, levels(n, &id, 0..len, false), false);
    s
}

/// Merges two trees' levels step by step.
fn zip_levels(a: Vec<Vec<Transfer>>, b: Vec<Vec<Transfer>>) -> Vec<Vec<Transfer>> {
    a.into_iter()
        .zip(b)
        .map(|(mut x, y)| {
            x.extend(y);
            x
        })
        .collect()
}

/// All-reduce on a double binary tree: the first half of the buffer over the tree
/// rooted at rank 0, the second half over its mirror rooted at rank `n − 1`, at the
/// same time.
pub fn double_all_reduce(n: usize, len: usize) -> Schedule {
    let mut s = Schedule::new(n, len);
    let half = len / 2;
    let id = |i: usize| i;
    let mirror = |i: usize| n - 1 - i;
    for up in [true, false] {
        let lv = zip_levels(
            levels(n, &id, 0..half, up),
            levels(n, &mirror, half..len, up),
        );
        push_levels(&mut s, lv, up);
    }
    s
}

/// Broadcast down the binary tree rooted at `root` (node `i` is rank `(root + i) mod n`):
/// `⌊log₂ n⌋` steps.
pub fn broadcast(n: usize, len: usize, root: usize) -> Schedule {
    let mut s = Schedule::new(n, len);
    let rank = |i: usize| (root + i) % n;
    push_levels(&mut s, levels(n, &rank, 0..len, false), false);
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn depth_is_floor_log2_of_position() {
        let d: Vec<usize> = (0..8).map(super::depth).collect();
        assert_eq!(d, [0, 1, 1, 2, 2, 2, 2, 3]);
    }
}
