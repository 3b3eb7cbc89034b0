//! # A strategy puzzle: the split MLP on real ranks
//!
//! `n` ranks (threads, on brrr's in-process communicator) each hold the same input
//! `x: [T, C]` and their shards of the MLP `y = relu(x · W_fcᵀ) · W_projᵀ`, cut as in
//! `column_row_split`: `w_fc: [4C/n, C]` (a block of `W_fc`'s rows) and `w_proj: [C,
//! 4C/n]` (the same block of `W_proj`'s columns). ReLU instead of GELU keeps the check
//! exact. Return the whole `y: [T, C]` on every rank, sending at most `2 (n − 1) / n ·
//! 4TC` bytes per rank: one ring all-reduce of `y`.
//!
//! `matmul_t(a, b, m, k, n)` below multiplies `a: [m, k]` by `bᵀ` for `b: [n, k]`.
//! About 6 lines. Checked on 2 and 4 ranks against one device, with
//! `Communicator::stats` counting bytes (`T` a multiple of `n`).
//!
//! ## Hint
//!
//! Each rank can apply ReLU to its own slice of the hidden layer: the slices are whole
//! columns of it. What does each rank's slice contribute to `y`, and how do those
//! contributions combine? Gathering the hidden layer (`[T, 4C]`) would cost four times
//! the budget.

use crate::check::{Outcome, rng, with_seed};
#[cfg(not(feature = "solutions"))]
use brrr_collectives::Communicator;
use brrr_collectives::run_in_process;
use rand::Rng;

/// `a: [m, k]` times `bᵀ` for `b: [n, k]`: `[m, n]`, row-major.
pub fn matmul_t(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|q| a[i * k + q] * b[j * k + q]).sum();
        }
    }
    out
}

/// YOUR CODE: `y = relu(x · W_fcᵀ) · W_projᵀ` from this rank's shards, on every rank.
#[cfg(not(feature = "solutions"))]
pub fn tp_mlp(
    comm: &Communicator,
    x: &[f32],
    (w_fc, w_proj): (&[f32], &[f32]),
    (t, c): (usize, usize),
) -> brrr_collectives::Result<Vec<f32>> {
    // This rank's part of the hidden layer, and what it alone makes of y.
    let hidden = 4 * c / comm.world_size();
    let h: Vec<f32> = matmul_t(x, w_fc, t, c, hidden)
        .into_iter()
        .map(|v| v.max(0.0))
        .collect();
    Ok(matmul_t(&h, w_proj, t, hidden, c))
}

#[cfg(feature = "solutions")]
pub use solution::tp_mlp;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/tensor_parallel/tp_mlp.rs"]
pub mod solution;

/// On 2 and 4 ranks against one device, with the traffic budget.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for n in [2, 4] {
        // T a multiple of n: the ring's chunks of y are then equal.
        let (t, c) = (n * rng.random_range(1..3), rng.random_range(1..5));
        let mut draw =
            |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random_range(-3..4) as f32).collect() };
        let (x, w_fc, w_proj) = (draw(t * c), draw(4 * c * c), draw(4 * c * c));
        let h: Vec<f32> = matmul_t(&x, &w_fc, t, c, 4 * c)
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
        let want = matmul_t(&h, &w_proj, t, 4 * c, c);
        let part = 4 * c / n;
        let ranks = run_in_process(n, |comm| {
            let r = comm.rank();
            let fc = w_fc[r * part * c..(r + 1) * part * c].to_vec();
            let proj: Vec<f32> = (0..c)
                .flat_map(|row| {
                    w_proj[row * 4 * c + r * part..row * 4 * c + (r + 1) * part].to_vec()
                })
                .collect();
            let y = tp_mlp(comm, &x, (&fc, &proj), (t, c))?;
            Ok((y, comm.stats().bytes_sent()))
        });
        let budget = (2 * (n - 1) * 4 * t * c / n) as u64;
        for (r, out) in ranks.into_iter().enumerate() {
            let (y, sent) = out.map_err(|e| format!("{n} ranks, rank {r}: {e}"))?;
            if y != want {
                return Err(format!(
                    "{n} ranks (T = {t}, C = {c}), rank {r}: y = {y:?}, one device has {want:?}"
                ));
            }
            if sent > budget {
                return Err(format!(
                    "{n} ranks, rank {r}: right, but it sent {sent} bytes, over the budget of \
                     2(n−1)/n·4TC = {budget}: what does each rank need to exchange?"
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
