//! # Putting a sharded bucket back together
//!
//! A ZeRO bucket is its parameters laid end to end (`numels[0]` elements, then
//! `numels[1]`, ...), padded with zeros to a multiple of the world size `n`; rank `r`
//! holds chunk `r`, `c = ceil(len / n)` elements. Consolidating a checkpoint reads every
//! rank's chunk and gives each parameter its values back, without the padding: what
//! `brrr ckpt consolidate` does for weights and both AdamW moments.
//!
//! Checked against brrr-dp's own map from a rank's chunk to parameter segments
//! (`brrr_dp::segments`).
//!
//! About 10 lines.
//!
//! ## Hint
//!
//! Join the chunks in rank order: that is the padded bucket. Then cut it: parameter `p`
//! starts where the sizes of the parameters before it end.

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;

/// YOUR CODE: each parameter's values from the ranks' chunks (`chunks[r]` is rank `r`'s,
/// all of the same length).
#[cfg(not(feature = "solutions"))]
pub fn unshard(numels: &[usize], chunks: &[Vec<f32>]) -> Vec<Vec<f32>> {
    // Reads every parameter from rank 0's chunk only.
    let mut at = 0;
    numels
        .iter()
        .map(|&n| {
            let p: Vec<f32> = chunks[0].iter().skip(at).take(n).copied().collect();
            at += n;
            p
        })
        .collect()
}

#[cfg(feature = "solutions")]
pub use solution::unshard;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/data_parallel/consolidate.rs"]
pub mod solution;

/// Against brrr-dp on random buckets and world sizes.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..200 {
        let world = rng.random_range(1..=8usize);
        let numels: Vec<usize> = (0..rng.random_range(1..=5))
            .map(|_| rng.random_range(1..40usize))
            .collect();
        let layout = layout(&numels);
        let bucket = layout.bucket(0..numels.len());
        let c = brrr_dp::chunk_len(bucket.len(), world);
        // Every rank's chunk; the padding is zero, as the engine writes it.
        let mut want: Vec<Vec<f32>> = numels.iter().map(|&n| vec![0.0; n]).collect();
        let mut chunks = Vec::with_capacity(world);
        for r in 0..world {
            let mut chunk = vec![0.0f32; c];
            for s in brrr_dp::segments(&layout, &bucket, world, r) {
                for (i, e) in s.in_chunk.clone().zip(s.in_param.clone()) {
                    let x = rng.random_range(-1.0f32..1.0);
                    chunk[i] = x;
                    want[s.param][e] = x;
                }
            }
            chunks.push(chunk);
        }
        let got = unshard(&numels, &chunks);
        if got != want {
            return Err(format!(
                "parameters of {numels:?} elements over {world} ranks (chunks of {c}): \
                 expected {want:?}, got {got:?}"
            ));
        }
    }
    Ok(())
}

fn layout(numels: &[usize]) -> brrr_dp::FlatLayout {
    let mut offset = 0;
    let params = numels
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let slot = brrr_dp::ParamSlot {
                name: format!("p{i}"),
                dims: vec![n],
                offset,
                numel: n,
            };
            offset += n;
            slot
        })
        .collect();
    brrr_dp::FlatLayout {
        params,
        total: offset,
    }
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
