//! Checking collectives against the reference on any transport. Every rank generates
//! every rank's input from the same seed, so each can compute the expected result by
//! itself and count its wrong elements (nccl-tests' `#wrong`) without another exchange.

use crate::algorithms::{Algorithm, Collective};
use crate::communicator::Communicator;
use crate::error::Result;
use crate::reduce::{ReduceOp, reference_reduce};
use crate::schedule::chunk_range;

/// Deterministic inputs: `n` ranks × `len` values in `[-1, 1)` (splitmix64).
pub fn inputs(seed: u64, n: usize, len: usize) -> Vec<Vec<f32>> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    (0..n).map(|_| (0..len).map(|_| next()).collect()).collect()
}

fn wrong(got: &[f32], want: &[f32]) -> usize {
    if got.len() != want.len() {
        return want.len().max(got.len());
    }
    got.iter()
        .zip(want)
        .filter(|(g, w)| (*g - *w).abs() > 1e-5 * (1.0 + w.abs()))
        .count()
}

/// Runs `collective` with `algorithm` on `len` elements (the per-rank input; the block
/// length for all-to-all) and returns how many of this rank's output elements are wrong.
pub fn check(
    comm: &Communicator,
    collective: Collective,
    algorithm: Algorithm,
    len: usize,
    seed: u64,
) -> Result<usize> {
    let (n, r) = (comm.world_size(), comm.rank());
    let all_len = if collective == Collective::AllToAll {
        n * len
    } else {
        len
    };
    let data = inputs(seed, n, all_len);
    let mine = &data[r];
    Ok(match collective {
        Collective::AllReduce => {
            let mut b = mine.clone();
            comm.all_reduce_with(&mut b, ReduceOp::Sum, algorithm, 0)?;
            wrong(&b, &reference_reduce(&data, ReduceOp::Sum))
        }
        Collective::ReduceScatter => {
            let got = comm.reduce_scatter_with(mine, ReduceOp::Sum, algorithm)?;
            wrong(
                &got,
                &reference_reduce(&data, ReduceOp::Sum)[chunk_range(len, n, r)],
            )
        }
        Collective::AllGather => wrong(&comm.all_gather_with(mine, algorithm)?, &data.concat()),
        Collective::Broadcast => {
            let root = n - 1;
            let mut b = mine.clone();
            comm.broadcast_with(&mut b, root, algorithm)?;
            wrong(&b, &data[root])
        }
        Collective::AllToAll => {
            let want: Vec<f32> = (0..n)
                .flat_map(|i| data[i][r * len..(r + 1) * len].to_vec())
                .collect();
            wrong(&comm.all_to_all_with(mine, algorithm)?, &want)
        }
    })
}

/// Every collective with every algorithm that implements it, on each of `lens`: the
/// total of wrong elements on this rank, and the number of calls.
pub fn check_all(comm: &Communicator, lens: &[usize]) -> Result<(usize, usize)> {
    let (mut bad, mut calls) = (0, 0);
    for c in Collective::ALL {
        for a in c.algorithms() {
            for (i, &len) in lens.iter().enumerate() {
                bad += check(comm, c, a, len, 1000 + i as u64)?;
                calls += 1;
            }
        }
    }
    Ok((bad, calls))
}
