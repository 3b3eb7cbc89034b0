//! # A strategy puzzle: ZeRO-1's step on real ranks
//!
//! `n` ranks (threads, on brrr's in-process communicator) hold the same `P` parameters and
//! each has computed its own gradient. Write one optimizer step of SGD with momentum
//! (`m ← β·m + g`, `p ← p − lr·m`, `g` the mean of the ranks' gradients) after which every
//! rank holds the new parameters, within two budgets per rank:
//!
//! - **memory**: the momentum of at most `P / n` parameters (`momentum` starts empty and
//!   keeps whatever length you give it between steps);
//! - **traffic**: at most `2 (n − 1) / n · 4P` bytes sent, what one ring all-reduce of the
//!   gradients costs.
//!
//! The stub is plain data parallelism: correct, within the traffic budget, and every rank
//! keeps all `P` momenta. `P` is a multiple of `n`. About 8 lines. Checked on 2, 3 and 4
//! ranks over three steps against one device, with `Communicator::stats` counting bytes.
//!
//! ## Hint
//!
//! An all-reduce is a reduce-scatter followed by an all-gather. Which of the two does the
//! update need before it, and which can it do after? Rank `r` owns elements
//! `r·P/n .. (r+1)·P/n` (`Communicator::reduce_scatter` returns that chunk, and
//! `all_gather` concatenates the ranks' chunks in rank order).

use crate::check::{Outcome, rng, with_seed};
use brrr_collectives::run_in_process;
#[cfg(not(feature = "solutions"))]
use brrr_collectives::{Communicator, ReduceOp};
use rand::Rng;

/// YOUR CODE: one step of SGD with momentum on rank `comm.rank()`.
#[cfg(not(feature = "solutions"))]
pub fn zero1_step(
    comm: &Communicator,
    params: &mut [f32],
    grads: &[f32],
    momentum: &mut Vec<f32>,
    (lr, beta): (f32, f32),
) -> brrr_collectives::Result<()> {
    let mut g = grads.to_vec();
    comm.all_reduce(&mut g, ReduceOp::Avg)?;
    momentum.resize(params.len(), 0.0);
    for ((p, m), g) in params.iter_mut().zip(momentum.iter_mut()).zip(&g) {
        *m = beta * *m + g;
        *p -= lr * *m;
    }
    Ok(())
}

#[cfg(feature = "solutions")]
pub use solution::zero1_step;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/data_parallel/zero1_step.rs"]
pub mod solution;

const STEPS: usize = 3;
const HYPER: (f32, f32) = (0.1, 0.9);

/// Three steps on 2, 3 and 4 ranks against one device, with both budgets.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for n in 2..=4 {
        let p = n * rng.random_range(2..9);
        let init: Vec<f32> = (0..p).map(|_| rng.random_range(-4..4) as f32).collect();
        // grads[step][rank]
        let grads: Vec<Vec<Vec<f32>>> = (0..STEPS)
            .map(|_| {
                (0..n)
                    .map(|_| (0..p).map(|_| rng.random_range(-8..8) as f32).collect())
                    .collect()
            })
            .collect();
        let want = one_device(&init, &grads);
        let ranks = run_in_process(n, |comm| {
            let (mut params, mut momentum) = (init.clone(), Vec::new());
            let mut sent = 0;
            for g in &grads {
                comm.reset_stats();
                zero1_step(comm, &mut params, &g[comm.rank()], &mut momentum, HYPER)?;
                sent = sent.max(comm.stats().bytes_sent());
            }
            Ok((params, momentum.len(), sent))
        });
        for (r, out) in ranks.into_iter().enumerate() {
            let (params, kept, sent) = out.map_err(|e| format!("{n} ranks, rank {r}: {e}"))?;
            judge(n, p, r, (&params, &want), kept, sent)?;
        }
    }
    Ok(())
}

/// One rank's parameters against one device's, and its two budgets.
fn judge(
    n: usize,
    p: usize,
    r: usize,
    (got, want): (&[f32], &[f32]),
    kept: usize,
    sent: u64,
) -> Outcome {
    let close = got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(a, b)| (a - b).abs() <= 1e-4 * (1.0 + b.abs()));
    if !close {
        return Err(format!(
            "{n} ranks, rank {r}: parameters {got:?} after {STEPS} steps, one device has {want:?}"
        ));
    }
    if kept > p / n {
        return Err(format!(
            "{n} ranks, rank {r}: correct, but it keeps the momentum of {kept} parameters, over \
             the budget of P / n = {}: each rank should keep only its shard's",
            p / n
        ));
    }
    let budget = (2 * (n - 1) * 4 * p / n) as u64;
    if sent > budget {
        return Err(format!(
            "{n} ranks, rank {r}: correct, but a step sent {sent} bytes, over the budget of \
             2(n−1)/n·4P = {budget}: the gradients need not be all-reduced"
        ));
    }
    Ok(())
}

/// SGD with momentum on the mean gradient, one device.
fn one_device(init: &[f32], grads: &[Vec<Vec<f32>>]) -> Vec<f32> {
    let (lr, beta) = HYPER;
    let (mut p, mut m) = (init.to_vec(), vec![0.0f32; init.len()]);
    for step in grads {
        let n = step.len() as f32;
        for i in 0..p.len() {
            let g = step.iter().map(|g| g[i]).sum::<f32>() / n;
            m[i] = beta * m[i] + g;
            p[i] -= lr * m[i];
        }
    }
    p
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "an exercise: solve it, then `cargo run -p brrr-exercises`"
    )]
    fn check() {
        if let Err(e) = super::check() {
            panic!("{e}");
        }
    }

    /// An all-reduce, then each rank's shard, then an all-gather: right and lean, but
    /// 3(n−1)/n·4P bytes: the traffic budget must catch it.
    #[test]
    fn the_traffic_budget_catches_an_all_reduce_before_the_shard() {
        use brrr_collectives::{ReduceOp, run_in_process};
        let (n, p) = (4, 8);
        let sent = run_in_process(n, |comm| {
            let mut g = vec![1.0f32; p];
            comm.all_reduce(&mut g, ReduceOp::Avg)?;
            let c = p / n;
            comm.all_gather(&g[comm.rank() * c..(comm.rank() + 1) * c])?;
            Ok(comm.stats().bytes_sent())
        });
        let sent = sent.into_iter().map(|s| s.unwrap()).max().unwrap();
        let want = [0.0f32; 8];
        let e = super::judge(n, p, 0, (&want, &want), p / n, sent).unwrap_err();
        assert!(e.contains("over the budget of 2(n−1)/n·4P = 48"), "{e}");
    }
}
