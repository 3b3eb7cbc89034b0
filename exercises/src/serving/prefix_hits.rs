//! # Prefix caching: the tokens a prompt does not compute
//!
//! With prefix caching, every full block of `block_size` tokens a request computes
//! stays in the cache under its contents and everything before it. A later prompt
//! takes its leading full blocks from the cache for as long as they match an earlier
//! prompt's, position by position, from the start. Two rules bound the reuse:
//! - only blocks an earlier prompt *filled* were cached (a prompt of `n` tokens fills
//!   `n / block_size` blocks, rounded down);
//! - the prompt's last token is always computed, since its logits give the first
//!   output token. So only blocks inside the first `len − 1` tokens can be reused.
//!
//! The prompts are served one after another, each alone and generating one token, and
//! the cache is large enough that nothing is evicted. Return, for each prompt, the
//! tokens it takes from the cache. With blocks of 2, prompts `[1 2 3 4 5]` then
//! `[1 2 3 4 6]` then `[1 2 3 4]`: `[0, 4, 2]`. The third prompt would match two
//! blocks, but its last token lies in the second, so only the first is reused.
//!
//! Checked against `brrr_serve::Scheduler::prefix_hit_tokens` on random prompts that
//! share random prefixes.
//!
//! About 17 lines.
//!
//! ## Hint
//!
//! Keep a set of cached prefixes (the tokens of every filled block with everything
//! before it). For each prompt, count leading blocks within the first `len − 1` tokens
//! whose prefix is in the set, then add the blocks this prompt fills.

use crate::check::{Outcome, rng, with_seed};
use brrr_serve::{SamplingParams, Scheduler, SchedulerConfig};
use rand::Rng;

/// YOUR CODE: the tokens each prompt takes from the prefix cache.
#[cfg(not(feature = "solutions"))]
pub fn prefix_hits(prompts: &[Vec<u32>], block_size: usize) -> Vec<usize> {
    // No cache: every prompt computes every token.
    let _ = block_size;
    vec![0; prompts.len()]
}

#[cfg(feature = "solutions")]
pub use solution::prefix_hits;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/serving/prefix_hits.rs"]
pub mod solution;

/// The scheduler's own count for each prompt, served one after another.
fn scheduler_hits(prompts: &[Vec<u32>], block_size: usize) -> Result<Vec<usize>, String> {
    let mut s = Scheduler::new(SchedulerConfig {
        block_size,
        num_blocks: 4096,
        max_batch_tokens: 4096,
        max_seqs: 1,
        max_model_len: 1024,
        prefix_caching: true,
    })
    .map_err(|e| e.0)?;
    let mut hits = Vec::new();
    for p in prompts {
        let before = s.prefix_hit_tokens;
        s.add(p.clone(), SamplingParams::greedy(1))
            .map_err(|e| e.0)?;
        while s.num_unfinished() > 0 {
            let batch = s.schedule().map_err(|e| e.0)?;
            let sampled: Vec<Option<u32>> = batch.iter().map(|b| b.samples.then_some(0)).collect();
            s.complete(&batch, &sampled).map_err(|e| e.0)?;
        }
        hits.push((s.prefix_hit_tokens - before) as usize);
    }
    Ok(hits)
}

/// Against the scheduler on random prompts built from a few shared stems.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..50 {
        let block_size = rng.random_range(1..6);
        let stems: Vec<Vec<u32>> = (0..3)
            .map(|_| {
                (0..rng.random_range(0..20))
                    .map(|_| rng.random_range(0..4))
                    .collect()
            })
            .collect();
        let prompts: Vec<Vec<u32>> = (0..6)
            .map(|_| {
                let stem = &stems[rng.random_range(0..stems.len())];
                let cut = rng.random_range(0..=stem.len());
                let mut p = stem[..cut].to_vec();
                p.extend((0..rng.random_range(1..8)).map(|_| rng.random_range(0..4)));
                p
            })
            .collect();
        let want = scheduler_hits(&prompts, block_size)?;
        let got = prefix_hits(&prompts, block_size);
        if got != want {
            return Err(format!(
                "blocks of {block_size}, prompts {prompts:?}: got {got:?}, the scheduler reused {want:?}"
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

    #[test]
    fn the_example_in_the_docs() {
        let prompts = [vec![1, 2, 3, 4, 5], vec![1, 2, 3, 4, 6], vec![1, 2, 3, 4]];
        assert_eq!(super::solution::prefix_hits(&prompts, 2), vec![0, 4, 2]);
    }
}
