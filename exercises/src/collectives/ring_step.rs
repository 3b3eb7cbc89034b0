//! # One step of the ring reduce-scatter
//!
//! `n` ranks in a ring `r → r+1 mod n`, a buffer cut into `n` chunks. In each of `n − 1`
//! steps every rank sends one chunk to its right neighbour, which adds it into its own
//! copy of that chunk. At the end rank `r` must hold chunk `r` summed over all ranks.
//!
//! Which chunk does rank `rank` send in step `step`? About 3 lines. Checked by running the
//! whole reduce-scatter built from your function with `brrr_collectives::Simulation`
//! against a reference sum.
//!
//! ## Hint
//!
//! In step 0 a rank cannot send its own chunk `r`: that one must arrive there last. In step
//! `s` a rank forwards the chunk it received in step `s − 1`.

use crate::check::{Outcome, rng, with_seed};
use brrr_collectives::{ReduceOp, Schedule, Simulation, Transfer, chunk_range, reference_reduce};
use rand::Rng;

/// YOUR CODE: the chunk `rank` sends to `rank + 1` in step `step` (of `n − 1`).
#[cfg(not(feature = "solutions"))]
pub fn ring_send_chunk(n: usize, rank: usize, step: usize) -> usize {
    let _ = step;
    rank % n
}

#[cfg(feature = "solutions")]
pub use solution::ring_send_chunk;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/collectives/ring_step.rs"]
pub mod solution;

/// The reduce-scatter schedule your function describes.
fn schedule(n: usize, len: usize) -> Result<Schedule, String> {
    let mut s = Schedule::new(n, len);
    for step in 0..n - 1 {
        let mut ts = Vec::new();
        for r in 0..n {
            let c = ring_send_chunk(n, r, step);
            if c >= n {
                return Err(format!("rank {r}, step {step}: chunk {c} of only {n}"));
            }
            ts.push(Transfer::same(r, (r + 1) % n, chunk_range(len, n, c), true));
        }
        s.push(ts);
    }
    Ok(s)
}

/// Simulates the schedule on random data for world sizes 2..=8.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for n in 2..=8 {
        let len = rng.random_range(n..5 * n);
        let data: Vec<Vec<f32>> = (0..n)
            .map(|_| (0..len).map(|_| rng.random_range(-8..8) as f32).collect())
            .collect();
        let want = reference_reduce(&data, ReduceOp::Sum);
        let sim =
            Simulation::new(schedule(n, len)?, data, ReduceOp::Sum).map_err(|e| e.to_string())?;
        for (r, buf) in sim.run().iter().enumerate() {
            let range = chunk_range(len, n, r);
            if buf[range.clone()] != want[range.clone()] {
                return Err(format!(
                    "{n} ranks: after the reduce-scatter rank {r}'s chunk {:?} is {:?}, the sum is {:?}",
                    range.clone(),
                    &buf[range.clone()],
                    &want[range]
                ));
            }
        }
    }
    Ok(())
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
}
