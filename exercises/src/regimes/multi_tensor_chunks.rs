//! # One launch for a whole model: cutting a list of buffers into chunks
//!
//! A GPT-2 124M has 148 parameter tensors, from 768-element biases to a 38.6M-element
//! embedding. Zeroing their gradients or updating them with AdamW one kernel per tensor
//! costs 148 launches a phase, most of them on a few hundred elements: overhead-bound.
//! A multi-tensor launch (apex's `multi_tensor_apply`) gives the GPU the whole list at
//! once, as equal pieces of work: every buffer is cut into chunks of `chunk` elements,
//! its last chunk shorter, and the chunks are numbered across the list in order, so
//! block `b` of the launch takes chunk `b` wherever it lies.
//!
//! Return every chunk of the list, in that order, as `(buffer, first element, length)`.
//! An empty buffer has no chunk. With `lens = [5, 0, 2]` and `chunk = 2`:
//! `[(0, 0, 2), (0, 2, 2), (0, 4, 1), (2, 0, 2)]`. About 8 lines. Checked against
//! `brrr_backend::multi_tensor::chunks`, which brrr-cuda's multi-tensor kernels follow, on
//! random lists.
//!
//! ## Hint
//!
//! The number of chunks of a buffer of `n` elements is `n.div_ceil(chunk)`.

use crate::check::{Outcome, rng, with_seed};
use brrr_backend::multi_tensor::chunks;
use rand::Rng;

/// YOUR CODE: the chunks of `lens` cut by `chunk`, as `(buffer, start, len)`.
#[cfg(not(feature = "solutions"))]
pub fn multi_tensor_chunks(lens: &[usize], chunk: usize) -> Vec<(usize, usize, usize)> {
    // One chunk per buffer, whatever its size: the launch would leave work undone.
    let _ = chunk;
    lens.iter().enumerate().map(|(i, &n)| (i, 0, n)).collect()
}

#[cfg(feature = "solutions")]
pub use solution::multi_tensor_chunks;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/regimes/multi_tensor_chunks.rs"]
pub mod solution;

/// Against brrr-backend's cut on random lists with empty, short and long buffers.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..50 {
        let chunk = rng.random_range(1..40);
        let lens: Vec<usize> = (0..rng.random_range(0..8))
            .map(|_| match rng.random_range(0..3) {
                0 => 0,
                1 => rng.random_range(1..chunk + 2),
                _ => rng.random_range(1..6 * chunk),
            })
            .collect();
        let want: Vec<(usize, usize, usize)> = chunks(&lens, chunk)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|c| (c.buffer, c.start, c.len))
            .collect();
        let got = multi_tensor_chunks(&lens, chunk);
        if got != want {
            let k = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
            return Err(format!(
                "lens {lens:?}, chunks of {chunk}: {} chunks where brrr-backend cuts {}; \
                 the first difference is at chunk {k}: {:?} where it is {:?}",
                got.len(),
                want.len(),
                got.get(k),
                want.get(k)
            ));
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
