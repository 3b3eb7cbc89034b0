//! Recursive halving and doubling (Thakur, Rabenseifner and Gropp, "Optimization of
//! collective communication operations in MPICH", IJHPCA 2005, §4.4 and §4.5).
//!
//! With `p = 2^k` ranks, reduce-scatter by recursive halving: in step `j` each rank
//! exchanges half of its current window with the rank at distance `p/2^(j+1)` and keeps
//! the half that contains its own chunk, `log₂ p` steps of `S/2, S/4, …`. All-gather by
//! recursive doubling runs the same exchanges backwards. All-reduce = both: `2 log₂ p`
//! latencies and the ring's bandwidth term `2(p−1)/p · S/β`.
//!
//! For `n` not a power of two (Rabenseifner's trick): with `r = n − p` where `p` is the
//! largest power of two ≤ `n`, the first `2r` ranks pair up, each even rank hands its data to
//! the odd one and sits out; the `p` remaining ranks (the *virtual* ranks) run the
//! power-of-two algorithm, each responsible for the chunks of the ranks it stands for;
//! at the end the odd ranks hand the result back.

use crate::schedule::{Schedule, Transfer, chunk_range};
use std::ops::Range;

/// The power-of-two core and the mapping of virtual ranks to real ranks and elements.
struct Virtual {
    n: usize,
    len: usize,
    p: usize,
    rem: usize,
}

impl Virtual {
    fn new(n: usize, len: usize) -> Self {
        let p = if n == 0 {
            0
        } else {
            1 << (usize::BITS - 1 - n.leading_zeros())
        };
        Virtual {
            n,
            len,
            p,
            rem: n - p,
        }
    }

    /// The real rank that plays virtual rank `v`.
    fn real(&self, v: usize) -> usize {
        if v < self.rem {
            2 * v + 1
        } else {
            v + self.rem
        }
    }

    /// The real ranks whose chunks virtual rank `v` is responsible for.
    fn first_real(&self, v: usize) -> usize {
        if v < self.rem { 2 * v } else { v + self.rem }
    }

    /// Elements owned by virtual ranks `a..b` (contiguous: virtual order is real order).
    fn elems(&self, a: usize, b: usize) -> Range<usize> {
        let start = chunk_range(self.len, self.n, self.first_real(a)).start;
        let end = chunk_range(self.len, self.n, self.real(b - 1)).end;
        start..end
    }

    /// Even ranks among the first `2r` give `range` (or their whole buffer) to their odd
    /// neighbour.
    fn fold_in(&self, s: &mut Schedule, reduce: bool, own_chunk_only: bool) {
        s.push(
            (0..self.rem)
                .map(|i| {
                    let range = if own_chunk_only {
                        chunk_range(self.len, self.n, 2 * i)
                    } else {
                        0..self.len
                    };
                    Transfer::same(2 * i, 2 * i + 1, range, reduce)
                })
                .collect(),
        );
    }

    /// Odd ranks among the first `2r` hand `range` back to their even neighbour.
    fn fold_out(&self, s: &mut Schedule, own_chunk_only: bool) {
        s.push(
            (0..self.rem)
                .map(|i| {
                    let range = if own_chunk_only {
                        chunk_range(self.len, self.n, 2 * i)
                    } else {
                        0..self.len
                    };
                    Transfer::same(2 * i + 1, 2 * i, range, false)
                })
                .collect(),
        );
    }

    /// Recursive halving among the virtual ranks: after it, virtual rank `v` holds its own
    /// elements reduced over all ranks.
    fn halving(&self, s: &mut Schedule) {
        let mut d = self.p / 2;
        while d >= 1 {
            let step = (0..self.p)
                .map(|v| {
                    let w = v ^ d;
                    // The partner keeps the half of the common window of size 2d that
                    // contains it; that is the half `v` sends.
                    let lo = w & !(d - 1);
                    Transfer::same(self.real(v), self.real(w), self.elems(lo, lo + d), true)
                })
                .collect();
            s.push(step);
            d /= 2;
        }
    }

    /// Recursive doubling among the virtual ranks: each sends the window of size `d` it
    /// has complete to its partner at distance `d`, doubling the window.
    fn doubling(&self, s: &mut Schedule) {
        let mut d = 1;
        while d < self.p {
            let step = (0..self.p)
                .map(|v| {
                    let lo = v & !(d - 1);
                    Transfer::same(
                        self.real(v),
                        self.real(v ^ d),
                        self.elems(lo, lo + d),
                        false,
                    )
                })
                .collect();
            s.push(step);
            d *= 2;
        }
    }
}

/// All-reduce: fold in, recursive halving, recursive doubling, fold out.
pub fn all_reduce(n: usize, len: usize) -> Schedule {
    let v = Virtual::new(n, len);
    let mut s = Schedule::new(n, len);
    v.fold_in(&mut s, true, false);
    v.halving(&mut s);
    v.doubling(&mut s);
    v.fold_out(&mut s, false);
    s
}

/// Reduce-scatter: fold in, recursive halving, then each folded-out rank gets its chunk.
pub fn reduce_scatter(n: usize, len: usize) -> Schedule {
    let v = Virtual::new(n, len);
    let mut s = Schedule::new(n, len);
    v.fold_in(&mut s, true, false);
    v.halving(&mut s);
    v.fold_out(&mut s, true);
    s
}

/// All-gather: folded ranks hand their chunk in, recursive doubling, full buffer out.
pub fn all_gather(n: usize, len: usize) -> Schedule {
    let v = Virtual::new(n, len);
    let mut s = Schedule::new(n, len);
    v.fold_in(&mut s, false, true);
    v.doubling(&mut s);
    v.fold_out(&mut s, false);
    s
}
