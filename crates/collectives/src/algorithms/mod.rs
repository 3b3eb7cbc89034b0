//! The algorithms, each a function that builds a [`Schedule`]; [`plan`] picks one.
//!
//! | collective | naive | ring | tree | double-tree | rhd |
//! |---|---|---|---|---|---|
//! | all-reduce | ✓ | ✓ | ✓ | ✓ | ✓ |
//! | reduce-scatter | ✓ | ✓ | | | ✓ |
//! | all-gather | ✓ | ✓ | | | ✓ |
//! | broadcast | ✓ | ✓ (pipelined chain) | ✓ | | |
//! | all-to-all | ✓ (all at once) | ✓ (pairwise exchange) | | | |
//!
//! Work buffers: all-reduce and broadcast work in place on `len` elements; reduce-scatter
//! on its `len`-element input, rank `r` keeping [`chunk_range`]`(len, n, r)`; all-gather on
//! the `len`-element output with rank `r`'s input at chunk `r`; all-to-all on
//! `[input | output]`, `2·n·block` elements.

pub mod naive;
pub mod rhd;
pub mod ring;
pub mod tree;

use crate::error::{CollError, Result};
use crate::frame::OpCode;
#[cfg(doc)]
use crate::schedule::chunk_range;
use crate::schedule::{Schedule, Transfer};

/// A collective algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Through one root: 2 steps, the root carries `(n−1)·S`.
    Naive,
    /// Ring: bandwidth-optimal, `n−1` latencies per phase.
    Ring,
    /// One binary tree: `⌊log₂ n⌋` latencies per phase, whole buffer per step.
    Tree,
    /// Two mirrored binary trees, half the buffer each.
    DoubleTree,
    /// Recursive halving and doubling (Rabenseifner for non-powers of two).
    Rhd,
}

impl Algorithm {
    /// All algorithms.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Naive,
        Algorithm::Ring,
        Algorithm::Tree,
        Algorithm::DoubleTree,
        Algorithm::Rhd,
    ];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Naive => "naive",
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::DoubleTree => "double-tree",
            Algorithm::Rhd => "rhd",
        }
    }

    /// Parses [`Algorithm::name`].
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                CollError::invalid(
                    "algorithm",
                    format!("unknown algorithm '{s}' (naive, ring, tree, double-tree, rhd)"),
                )
            })
    }

    /// Whether this algorithm implements `c`.
    pub fn supports(self, c: Collective) -> bool {
        use Algorithm::*;
        use Collective::*;
        match c {
            AllReduce => true,
            ReduceScatter | AllGather => matches!(self, Naive | Ring | Rhd),
            Broadcast => matches!(self, Naive | Ring | Tree),
            AllToAll => matches!(self, Naive | Ring),
        }
    }
}

/// A collective, as the algorithms see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    /// Reduce everywhere.
    AllReduce,
    /// Reduce, rank `r` keeps chunk `r`.
    ReduceScatter,
    /// Every rank gets every rank's chunk.
    AllGather,
    /// The root's buffer to all.
    Broadcast,
    /// Block `j` of rank `i` to block `i` of rank `j`.
    AllToAll,
}

impl Collective {
    /// All collectives.
    pub const ALL: [Collective; 5] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast,
        Collective::AllToAll,
    ];

    /// The frame op code, whose name is used in tables.
    pub fn op(self) -> OpCode {
        match self {
            Collective::AllReduce => OpCode::AllReduce,
            Collective::ReduceScatter => OpCode::ReduceScatter,
            Collective::AllGather => OpCode::AllGather,
            Collective::Broadcast => OpCode::Broadcast,
            Collective::AllToAll => OpCode::AllToAll,
        }
    }

    /// `all-reduce`, ...
    pub fn name(self) -> &'static str {
        self.op().name()
    }

    /// Parses [`Collective::name`].
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s).ok_or_else(|| {
            CollError::invalid(
                "collective",
                format!("unknown collective '{s}' (all-reduce, reduce-scatter, all-gather, broadcast, all-to-all)"),
            )
        })
    }

    /// The algorithms that implement it.
    pub fn algorithms(self) -> Vec<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .filter(|a| a.supports(self))
            .collect()
    }
}

/// The schedule of `collective` by `algorithm` on `n` ranks. `len` is the work buffer
/// length (see the module docs) except for all-to-all, where it is the block length.
pub fn plan(
    collective: Collective,
    algorithm: Algorithm,
    n: usize,
    len: usize,
    root: usize,
) -> Result<Schedule> {
    if n == 0 || root >= n {
        return Err(CollError::invalid(
            collective.name(),
            format!("world size {n}, root {root}"),
        ));
    }
    if !algorithm.supports(collective) {
        return Err(CollError::Unsupported {
            op: collective.name(),
            algorithm: algorithm.name(),
            supported: collective
                .algorithms()
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    use Algorithm::*;
    use Collective::*;
    Ok(match (collective, algorithm) {
        (AllReduce, Naive) => naive::all_reduce(n, len),
        (AllReduce, Ring) => ring::all_reduce(n, len),
        (AllReduce, Tree) => tree::all_reduce(n, len),
        (AllReduce, DoubleTree) => tree::double_all_reduce(n, len),
        (AllReduce, Rhd) => rhd::all_reduce(n, len),
        (ReduceScatter, Naive) => naive::reduce_scatter(n, len),
        (ReduceScatter, Ring) => ring::reduce_scatter(n, len),
        (ReduceScatter, Rhd) => rhd::reduce_scatter(n, len),
        (AllGather, Naive) => naive::all_gather(n, len),
        (AllGather, Ring) => ring::all_gather(n, len),
        (AllGather, Rhd) => rhd::all_gather(n, len),
        (Broadcast, Naive) => naive::broadcast(n, len, root),
        (Broadcast, Ring) => ring::broadcast(n, len, root),
        (Broadcast, Tree) => tree::broadcast(n, len, root),
        (AllToAll, Naive) => naive::all_to_all(n, len),
        (AllToAll, Ring) => ring::all_to_all(n, len),
        _ => unreachable!("checked by Algorithm::supports"),
    })
}

/// A dissemination barrier (Hensgen, Finkel and Manber 1988): in round `k` rank `r`
/// signals `r + 2^k` and waits for `r − 2^k`; after `⌈log₂ n⌉` rounds every rank has
/// heard, directly or not, from every other. Messages are empty.
pub fn barrier(n: usize) -> Schedule {
    let mut s = Schedule::new(n, 0);
    let mut d = 1;
    while d < n {
        s.push(
            (0..n)
                .map(|r| Transfer::same(r, (r + d) % n, 0..0, false))
                .collect(),
        );
        d *= 2;
    }
    s
}
