//! # Paging: where a sequence's tokens are
//!
//! A paged KV cache (PagedAttention, Kwon et al. 2023) stores keys and values in blocks of
//! `block_size` token slots anywhere in one pool of slots, numbered block after block; a
//! sequence's block table lists its blocks in order, so its token 0 is in the first slot of
//! its first block. In which pool-wide slot is each token of `range`?
//!
//! With blocks `[5, 2]` of 4 slots, tokens `2..6` are in slots `[22, 23, 8, 9]`. About 3
//! lines. Checked against `brrr_serve::BlockTable::slots`.
//!
//! ## Hint
//!
//! Which entry of the block table holds token `i`, and at which offset inside that block?
//! Block `b` starts at slot `b · block_size`.

use crate::check::{Outcome, rng, with_seed};
use rand::Rng;
use rand::seq::SliceRandom;

/// YOUR CODE: the slots of tokens `range` of a sequence with block table `blocks`.
#[cfg(not(feature = "solutions"))]
pub fn token_slots(blocks: &[u32], block_size: usize, range: std::ops::Range<usize>) -> Vec<u32> {
    // A contiguous cache's answer: right only while the blocks happen to be in order.
    let first = blocks.first().copied().unwrap_or(0) as usize * block_size;
    range.map(|i| (first + i) as u32).collect()
}

#[cfg(feature = "solutions")]
pub use solution::token_slots;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/serving/token_slots.rs"]
pub mod solution;

/// Against brrr-serve on random block tables (blocks scattered over the pool).
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..100 {
        let block_size = rng.random_range(1..17);
        let mut pool: Vec<u32> = (0..64).collect();
        pool.shuffle(rng);
        let blocks = pool[..rng.random_range(1..9)].to_vec();
        let len = blocks.len() * block_size;
        let start = rng.random_range(0..len);
        let range = start..rng.random_range(start..=len);
        let table = brrr_serve::BlockTable {
            blocks: blocks.clone(),
        };
        let want = table
            .slots(range.clone(), block_size)
            .ok_or("the table is too short")?;
        let got = token_slots(&blocks, block_size, range.clone());
        if got != want {
            return Err(format!(
                "blocks {blocks:?} of {block_size}, tokens {range:?}: got {got:?}, want {want:?}"
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
