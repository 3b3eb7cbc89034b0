//! # Split an MLP over `n` ranks
//!
//! The MLP is `W_proj · gelu(W_fc · x)` with `W_fc: [4C, C]` and `W_proj: [C, 4C]`
//! (PyTorch's `[out, in]`, row-major). Megatron splits `W_fc` by *columns of the
//! output* (rank `r` keeps rows `r·4C/n .. (r+1)·4C/n`) and `W_proj` by *rows of the
//! input* (rank `r` keeps columns `r·4C/n .. (r+1)·4C/n` of every row), so that each
//! rank's GELU needs only its own slice and the ranks' outputs add up to the whole.
//! Return rank `rank`'s two shards, row-major: `[4C/n, C]` and `[C, 4C/n]`.
//!
//! Checked against `brrr_tp::shard::{column_shard, row_shard}`.
//!
//! About 9 lines.
//!
//! ## Hint
//!
//! `W_fc` is `[4C, C]`: rank `r` keeps a contiguous block of its rows. `W_proj` is `[C,
//! 4C]`: rank `r` keeps the same column range from every row, so copy a slice per row.

use crate::check::{Outcome, rng, with_seed};
use brrr_backend::DType;
use brrr_cpu::CpuBackend;
use brrr_tensor::Tensor;
use rand::Rng;

/// YOUR CODE: rank `rank`'s shards of `w_fc` (`[4c, c]`) and `w_proj` (`[c, 4c]`).
#[cfg(not(feature = "solutions"))]
pub fn split_mlp(
    w_fc: &[f32],
    w_proj: &[f32],
    c: usize,
    rank: usize,
    n: usize,
) -> (Vec<f32>, Vec<f32>) {
    // Takes the same contiguous slice of both: right for W_fc, wrong for W_proj.
    let part = 4 * c * c / n;
    let take = |w: &[f32]| w[rank * part..(rank + 1) * part].to_vec();
    (take(w_fc), take(w_proj))
}

#[cfg(feature = "solutions")]
pub use solution::split_mlp;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/tensor_parallel/column_row_split.rs"]
pub mod solution;

/// Against brrr-tp's shards on random widths and rank counts.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let be = CpuBackend::new();
    let err = |e: brrr_backend::Error| e.to_string();
    for _ in 0..20 {
        let n = [2, 4][rng.random_range(0..2)];
        let c = 4 * rng.random_range(1..6usize);
        let w_fc: Vec<f32> = (0..4 * c * c)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let w_proj: Vec<f32> = (0..4 * c * c)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let t_fc = Tensor::from_f32(&be, &w_fc, [4 * c, c], DType::F32).map_err(err)?;
        let t_proj = Tensor::from_f32(&be, &w_proj, [c, 4 * c], DType::F32).map_err(err)?;
        for rank in 0..n {
            let (fc, proj) = split_mlp(&w_fc, &w_proj, c, rank, n);
            let want_fc = brrr_tp::shard::column_shard(&t_fc, rank, n)
                .and_then(|t| t.to_vec_f32())
                .map_err(err)?;
            let want_proj = brrr_tp::shard::row_shard(&t_proj, rank, n)
                .and_then(|t| t.to_vec_f32())
                .map_err(err)?;
            if fc != want_fc {
                return Err(format!(
                    "C = {c}, rank {rank} of {n}: W_fc's shard is wrong"
                ));
            }
            if proj != want_proj {
                return Err(format!(
                    "C = {c}, rank {rank} of {n}: W_proj's shard is wrong (it needs columns \
                     {}..{} of every row)",
                    rank * 4 * c / n,
                    (rank + 1) * 4 * c / n
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
