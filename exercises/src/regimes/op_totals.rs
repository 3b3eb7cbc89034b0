//! # Where a step's time went, per op kind
//!
//! A profiled run leaves a trace of spans: the trainer's `step`s, one after another, and
//! inside and between them the backend's ops (`gemm`, `softmax`, ...), each with a start
//! and a duration in microseconds. An op *belongs to* a step when it starts inside it
//! (from the step's start to its end, both included); ops between steps (evaluation,
//! checkpoints) belong to none. The first `skip` steps, by start time, are warm-up and
//! left out.
//!
//! Return the total duration of the ops of each kind that belong to a counted step, and
//! the counted steps' summed duration (what the shares of a profile table are relative
//! to). `steps` are `(start, duration)` in any order; `ops` are `(kind, start, duration)`.
//!
//! Checked against `brrr_profile::Profile::from_chrome_trace` (what `brrr train
//! --profile` prints) on random traces.
//!
//! About 10 lines.
//!
//! ## Hint
//!
//! Sort the steps by start and drop the first `skip`. An op belongs to a step if its
//! start lies in `[start, start + duration]`; sum the durations of the ops that belong
//! to some counted step, per kind.

use crate::check::{Outcome, close, rng, with_seed};
use brrr_profile::Profile;
use rand::Rng;

/// YOUR CODE: microseconds per op kind inside the counted steps, and their wall time.
#[cfg(not(feature = "solutions"))]
pub fn op_totals(
    ops: &[(String, f64, f64)],
    steps: &[(f64, f64)],
    skip: usize,
) -> (std::collections::BTreeMap<String, f64>, f64) {
    let _ = (ops, steps, skip);
    (std::collections::BTreeMap::new(), 0.0)
}

#[cfg(feature = "solutions")]
pub use solution::op_totals;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/regimes/op_totals.rs"]
pub mod solution;

/// Compares [`op_totals`] with brrr-profile on random traces.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    const KINDS: [&str; 5] = ["gemm", "softmax", "layernorm", "adamw", "upload"];
    for case in 0..20 {
        let (mut steps, mut ops, mut t) = (Vec::new(), Vec::new(), 0.0);
        for _ in 0..rng.random_range(1..5) {
            // Some ops between steps (evaluation), then a step full of ops.
            for _ in 0..rng.random_range(0..3) {
                let d = rng.random_range(1.0..50.0);
                ops.push((KINDS[rng.random_range(0..KINDS.len())].to_string(), t, d));
                t += d + 1.0;
            }
            let start = t;
            for _ in 0..rng.random_range(1..20) {
                let d = rng.random_range(0.5..100.0);
                ops.push((KINDS[rng.random_range(0..KINDS.len())].to_string(), t, d));
                t += d + rng.random_range(0.0..5.0);
            }
            steps.push((start, t - start));
            t += 10.0;
        }
        let skip = rng.random_range(0..3);
        // The trace as `ProfiledBackend` and the trainer write it, steps listed last.
        let mut events: Vec<serde_json::Value> = ops
            .iter()
            .map(|(k, s, d)| serde_json::json!({ "ph": "X", "cat": "op", "name": k, "ts": s, "dur": d }))
            .collect();
        events.extend(steps.iter().rev().map(|(s, d)| {
            serde_json::json!({ "ph": "X", "cat": "cpu", "name": "step", "ts": s, "dur": d })
        }));
        let trace = serde_json::json!({ "traceEvents": events });
        let (want, want_wall) = Profile::from_chrome_trace(&trace, "step", skip);
        let mut shuffled = steps.clone();
        shuffled.reverse();
        let (got, wall) = op_totals(&ops, &shuffled, skip);
        let what = format!("case {case} ({} steps, skip {skip})", steps.len());
        close(&format!("{what}: wall time"), wall, want_wall, 1e-12)?;
        for (kind, s) in want.iter() {
            let g = got.get(kind).copied().unwrap_or(0.0);
            close(&format!("{what}: {kind}"), g, s.total_us, 1e-12)?;
        }
        if let Some(extra) = got.keys().find(|k| want.get(k).is_none()) {
            return Err(format!(
                "{what}: {extra} has time, but none of its ops is in a counted step"
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
