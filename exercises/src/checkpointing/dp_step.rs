//! # One step of the optimal-checkpointing dynamic program
//!
//! Beaumont et al. 2019 ("Optimal checkpointing for heterogeneous chains", §4) find the
//! cheapest schedule within a memory budget by dynamic programming over sub-chains.
//! `opt(s, t, m)` is the least cost of back-propagating segments `s..t` — given `x_s`
//! held, `δ_t` held, nothing of `s..t` stashed — with at most `m` bytes alive for the
//! sub-problem (`x_s` and `δ_t` included); `None` if nothing fits. Write one step of it,
//! given `opt` for smaller sub-problems. With `x(i) = chain.x_bytes(i)`,
//! `d(i) = chain.delta_bytes(i)` and segment `s`'s fields:
//!
//! - `first = x(s) + d(t) + stash_s + x(s+1) + forward_extra_s` (bytes during the first
//!   forward), `back = x(s) + stash_s + d(s+1) + d(s) + backward_extra_s` (during `B_s`).
//! - `t = s + 1`: `Fall_s B_s` costs `forward_s + backward_s` if `max(first, back) ≤ m`.
//! - **Fall**: if `max(first, back) ≤ m`: `forward_s + opt(s+1, t, m − x(s) − stash_s)
//!   + backward_s`.
//! - **Fck at a split** `s < s' < t`: keep `x_s`, run forwards `s..s'` keeping nothing.
//!   The sweep's bytes are `first` for segment `s` and `x(s) + x(k) + d(t) + stash_k +
//!   x(k+1) + forward_extra_k` for each later `k < s'`; all must be `≤ m`. Cost: the
//!   sweep's forwards `+ opt(s', t, m − x(s)) + opt(s, s', m)`.
//!
//! Return the least of the options that fit (a subtraction below zero does not fit).
//! Checked by running the whole program with your step against
//! `brrr_checkpoint::optimal` on random chains and budgets.
//!
//! About 35 lines.
//!
//! ## Hint
//!
//! Compute `first` and `back` for segment `s`, then the candidates: the base case `t =
//! s + 1`, Fall, and Fck for every split `s'`. Each candidate needs its memory checked
//! before its cost, and a budget that would go negative means the candidate does not
//! fit. Return the minimum with `Option`.

use crate::check::{Outcome, close, rng, with_seed};
use brrr_checkpoint::{Chain, Segment};
use rand::Rng;
use std::collections::HashMap;

/// The sub-problems' answers, for the step to call.
pub type SubProblem<'a> = dyn FnMut(usize, usize, u64) -> Option<f64> + 'a;

/// YOUR CODE: `opt(s, t, m)` from the smaller sub-problems.
#[cfg(not(feature = "solutions"))]
pub fn dp_step(chain: &Chain, s: usize, t: usize, m: u64, opt: &mut SubProblem) -> Option<f64> {
    let _ = (m, opt);
    Some(
        chain.segments[s..t]
            .iter()
            .map(|g| g.forward + g.backward)
            .sum(),
    )
}

#[cfg(feature = "solutions")]
pub use solution::dp_step;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/checkpointing/dp_step.rs"]
pub mod solution;

/// The whole program, memoised, with [`dp_step`] as its step.
fn run_dp(chain: &Chain, budget: u64) -> Option<f64> {
    fn go(
        chain: &Chain,
        s: usize,
        t: usize,
        m: u64,
        memo: &mut HashMap<(usize, usize, u64), Option<f64>>,
    ) -> Option<f64> {
        if let Some(v) = memo.get(&(s, t, m)) {
            return *v;
        }
        let v = dp_step(chain, s, t, m, &mut |a, b, mm| go(chain, a, b, mm, memo));
        memo.insert((s, t, m), v);
        v
    }
    go(chain, 0, chain.len(), budget, &mut HashMap::new())
}

/// Against `brrr_checkpoint::optimal` on random chains and budgets.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..30 {
        let n = rng.random_range(1..7);
        let segments = (0..n)
            .map(|i| Segment {
                name: format!("s{i}"),
                forward: rng.random_range(1..6) as f64,
                backward: rng.random_range(2..12) as f64,
                input: rng.random_range(1..5),
                stash: rng.random_range(0..12),
                selective_stash: None,
                selective_cost: 0.0,
                forward_extra: rng.random_range(0..3),
                backward_extra: rng.random_range(0..3),
            })
            .collect();
        let chain = Chain {
            segments,
            output: rng.random_range(0..3),
        };
        let smallest = brrr_checkpoint::min_budget(&chain).map_err(|e| e.to_string())?;
        for budget in [
            smallest.saturating_sub(1),
            smallest,
            smallest + rng.random_range(0..20),
            1000,
        ] {
            let want = match brrr_checkpoint::optimal(&chain, budget) {
                Ok(s) => Some(s.simulate(&chain).map_err(|e| e.to_string())?.total_cost),
                Err(_) => None,
            };
            let got = run_dp(&chain, budget);
            match (got, want) {
                (Some(g), Some(w)) => close(&format!("{chain:?} budget {budget}"), g, w, 1e-12)?,
                (None, None) => {}
                _ => {
                    return Err(format!(
                        "{chain:?} budget {budget}: got {got:?}, want {want:?}"
                    ));
                }
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
