//! # One step of continuous batching
//!
//! A step of brrr-serve's scheduler spends a budget of `budget` tokens. The running
//! requests come first, in order: each takes its pending tokens (1 for a decode, the
//! rest of its prompt for one still in prefill), or what is left of the budget if that
//! is less. Then queued prompts join, in order, the same way, while budget is left and
//! fewer than `max_seqs` requests run. A prompt longer than what is left is cut: its
//! first chunk runs now, the rest next step (chunked prefill, Sarathi), so a long
//! prompt never stalls the decodes.
//!
//! Return the token counts of the step in that order, leaving out requests that get
//! nothing. Running `[1, 1, 5]`, queued `[8, 3]`, budget 10, at most 4 running:
//! `[1, 1, 5, 3]` (the 8-token prompt gets the last 3 of the budget).
//!
//! Checked against `brrr_serve::Scheduler::schedule` (with blocks to spare) on random
//! workloads.
//!
//! About 17 lines.
//!
//! ## Hint
//!
//! One budget counter and one list of counts. Serve the running requests in order, each
//! `min(pending, budget left)`, then the queue while budget is left and fewer than
//! `max_seqs` run. Skip requests that get 0.

use crate::check::{Outcome, rng, with_seed};
use brrr_serve::{SamplingParams, Scheduler, SchedulerConfig};
use rand::Rng;

/// YOUR CODE: the tokens each request computes this step.
#[cfg(not(feature = "solutions"))]
pub fn batch_step(
    running: &[usize],
    waiting: &[usize],
    budget: usize,
    max_seqs: usize,
) -> Vec<usize> {
    // Static batching: the running requests whole, and nobody joins.
    let _ = (waiting, budget, max_seqs);
    running.to_vec()
}

#[cfg(feature = "solutions")]
pub use solution::batch_step;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/serving/batch_step.rs"]
pub mod solution;

/// Against the scheduler, step by step, with requests arriving at random.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let (budget, max_seqs) = (rng.random_range(1..40), rng.random_range(1..6));
    let config = SchedulerConfig {
        block_size: 16,
        num_blocks: 100_000,
        max_batch_tokens: budget,
        max_seqs,
        max_model_len: 4096,
        prefix_caching: false,
    };
    let mut s = Scheduler::new(config).map_err(|e| e.0)?;
    for step in 0..200 {
        if rng.random_bool(0.3) {
            let prompt = vec![1; rng.random_range(1..60)];
            s.add(prompt, SamplingParams::greedy(rng.random_range(1..20)))
                .map_err(|e| e.0)?;
        }
        let running: Vec<usize> = s.running().iter().map(|&id| s.pending(id)).collect();
        let waiting: Vec<usize> = s.waiting().map(|id| s.pending(id)).collect();
        let got = batch_step(&running, &waiting, budget, max_seqs);
        let batch = s.schedule().map_err(|e| e.0)?;
        let want: Vec<usize> = batch.iter().map(|b| b.len).collect();
        if got != want {
            return Err(format!(
                "step {step}: running {running:?}, queued {waiting:?}, budget {budget}, at most \
                 {max_seqs} running: got {got:?}, want {want:?}"
            ));
        }
        let sampled: Vec<_> = batch.iter().map(|b| b.samples.then_some(7)).collect();
        s.complete(&batch, &sampled).map_err(|e| e.0)?;
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
