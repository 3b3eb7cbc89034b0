//! What the collectives page animates: an all-reduce run step by step by
//! `brrr_collectives::Simulation` on small per-rank buffers, the same schedule the
//! in-process, socket and MPI transports execute. Each frame holds every rank's buffer
//! after a step and the chunks that moved in it.

use brrr_collectives::{Algorithm, Collective, ReduceOp, Simulation, chunk_range, plan};
use std::ops::Range;

/// One message of a step, as the page draws it.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    /// Sending rank.
    pub src: usize,
    /// Receiving rank.
    pub dst: usize,
    /// Elements moved.
    pub range: Range<usize>,
    /// The chunk those elements are, when they are exactly one chunk.
    pub chunk: Option<usize>,
    /// Added in (`true`) or copied over (`false`).
    pub reduce: bool,
}

/// Every rank's buffer after a step, and the moves of that step (none for the start).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Rank `r`'s buffer.
    pub buffers: Vec<Vec<f32>>,
    /// What moved to get here.
    pub moves: Vec<Move>,
}

/// The all-reduce algorithms the page offers.
pub const ALGORITHMS: [Algorithm; 3] = [Algorithm::Ring, Algorithm::Tree, Algorithm::DoubleTree];

/// Rank `r` starts with `r + 1` in every element, so a finished all-reduce shows
/// `n(n+1)/2` everywhere and partial sums are readable on the way.
pub fn initial(n: usize, len: usize) -> Vec<Vec<f32>> {
    (0..n).map(|r| vec![(r + 1) as f32; len]).collect()
}

/// The frames of an all-reduce (sum) by `algorithm` on `n` ranks of `len` elements.
pub fn frames(algorithm: Algorithm, n: usize, len: usize) -> Result<Vec<Frame>, String> {
    if !(1..=16).contains(&n) || len > 64 {
        return Err(format!(
            "{n} ranks of {len} elements: the page draws 1..=16 ranks of at most 64"
        ));
    }
    let schedule = plan(Collective::AllReduce, algorithm, n, len, 0).map_err(|e| e.to_string())?;
    let mut sim =
        Simulation::new(schedule, initial(n, len), ReduceOp::Sum).map_err(|e| e.to_string())?;
    let mut out = vec![Frame {
        buffers: sim.buffers().to_vec(),
        moves: Vec::new(),
    }];
    while let Some(step) = sim.step() {
        let moves = step
            .transfers
            .iter()
            .map(|t| Move {
                src: t.src,
                dst: t.dst,
                range: t.dst_range.clone(),
                chunk: (0..n).find(|&c| chunk_range(len, n, c) == t.dst_range),
                reduce: t.reduce,
            })
            .collect();
        out.push(Frame {
            buffers: sim.buffers().to_vec(),
            moves,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_ends_with_the_sum_on_every_rank() {
        for alg in ALGORITHMS {
            for n in 1..=8 {
                let f = frames(alg, n, 7).unwrap();
                let want = (n * (n + 1) / 2) as f32;
                for b in &f.last().unwrap().buffers {
                    assert!(b.iter().all(|&x| x == want), "{} n={n}: {b:?}", alg.name());
                }
            }
        }
    }

    #[test]
    fn the_ring_moves_one_chunk_per_rank_per_step() {
        let f = frames(Algorithm::Ring, 4, 8).unwrap();
        assert_eq!(f.len(), 1 + 2 * 3);
        for frame in &f[1..] {
            assert_eq!(frame.moves.len(), 4);
            assert!(
                frame
                    .moves
                    .iter()
                    .all(|m| m.chunk.is_some() && m.dst == (m.src + 1) % 4)
            );
        }
        // Step 1 of the reduce-scatter: rank 0 sends chunk 3 (= 0 − 0 − 1 mod 4).
        assert_eq!(f[1].moves[0].chunk, Some(3));
        assert!(frames(Algorithm::Ring, 40, 8).is_err());
    }
}
