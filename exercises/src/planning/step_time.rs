//! # Rank three layouts
//!
//! The planner predicts a step as the sum of its parts: the compute, the tensor-parallel
//! all-reduces, what of the data-parallel collectives the compute does not hide, the
//! pipeline's sends, and the bubble, the time the pipeline's stages sit idle. You are
//! given every part but the bubble, with the layout's pipeline stages `p`, model chunks
//! per stage `v` (1 unless the schedule is interleaved) and micro-batches per step `m`.
//! How long is the step, as the planner predicts it? Then order a list of layouts
//! fastest first.
//!
//! About 8 lines. Checked against `brrr_perf::plan::predict` on random layouts of
//! random models and clusters.
//!
//! ## Hint
//!
//! Under 1F1B a stage waits `p − 1` units of work before its first backward and after
//! its last. A unit is one micro-batch through one chunk of the stage: what share of the
//! step's busy time is that, and which of the given parts keep a stage busy?

use crate::check::{Outcome, close, hint_if, rel_diff, rng, with_seed};
use brrr_perf::memory::{PipelineSchedule, TrainingSetup};
use brrr_perf::plan::{StepTime, describe, layouts, predict};
use rand::Rng;
use rand::seq::IndexedRandom;

/// A layout's predicted parts, all but the bubble, seconds per step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Parts {
    /// Arithmetic, recomputation included.
    pub compute_s: f64,
    /// Tensor-parallel all-reduces.
    pub tp_s: f64,
    /// Data-parallel collectives the compute does not hide.
    pub dp_exposed_s: f64,
    /// Stage-to-stage sends on the critical path.
    pub pp_s: f64,
    /// Pipeline stages `p`.
    pub stages: u64,
    /// Model chunks per stage `v`.
    pub chunks: u64,
    /// Micro-batches per step `m`.
    pub micro_batches: u64,
}

/// YOUR CODE: the predicted step, bubble included.
#[cfg(not(feature = "solutions"))]
pub fn step_s(l: &Parts) -> f64 {
    let _ = l;
    0.0
}

/// YOUR CODE: the indices of `layouts`, fastest first.
#[cfg(not(feature = "solutions"))]
pub fn fastest_first(layouts: &[Parts]) -> Vec<usize> {
    let _ = layouts;
    Vec::new()
}

#[cfg(feature = "solutions")]
pub use solution::{fastest_first, step_s};

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stubs above are being written.
#[path = "../solutions/planning/step_time.rs"]
pub mod solution;

/// Against the planner.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn parts(s: &TrainingSetup, t: &StepTime) -> Parts {
    Parts {
        compute_s: t.compute_s,
        tp_s: t.tp_s,
        dp_exposed_s: t.dp_exposed_s,
        pp_s: t.pp_s,
        stages: s.pp,
        chunks: match s.schedule {
            PipelineSchedule::Interleaved { chunks } => chunks,
            _ => 1,
        },
        micro_batches: s.grad_accum,
    }
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..30 {
        let inp = super::fits::random_inputs(rng)?;
        let all = layouts(&inp);
        let interleaved: Vec<&TrainingSetup> = all
            .iter()
            .filter(|s| matches!(s.schedule, PipelineSchedule::Interleaved { .. }))
            .collect();
        let piped: Vec<&TrainingSetup> = all.iter().filter(|s| s.pp > 1).collect();
        let picks = [
            interleaved.choose(rng).or(piped.choose(rng)).copied(),
            piped.choose(rng).copied(),
            all.choose(rng),
        ];
        let mut list = Vec::new();
        for s in picks.into_iter().flatten() {
            let t = predict(&inp, s).map_err(|e| e.to_string())?;
            step(s, &t)?;
            list.push((parts(s, &t), t.total_s()));
        }
        order(&list)?;
    }
    Ok(())
}

/// One layout's step, with the slips that have a name.
fn step(s: &TrainingSetup, t: &StepTime) -> Outcome {
    let got = step_s(&parts(s, t));
    let want = t.total_s();
    let near = |x: f64| t.bubble_s > 0.0 && rel_diff(got, x, 1e-300) < 1e-9;
    let work = t.compute_s + t.tp_s;
    let v = parts(s, t).chunks as f64;
    let outcome = close(&describe(s), got, want, 1e-9);
    let outcome = hint_if(
        outcome,
        near(want - t.bubble_s),
        "that is the step without its bubble",
    );
    let outcome = hint_if(
        outcome,
        near(want - t.bubble_s * t.tp_s / work),
        "a stage that waits also waits for its tensor-parallel all-reduces",
    );
    hint_if(
        outcome,
        v > 1.0 && near(want + (v - 1.0) * t.bubble_s),
        "with interleaving a unit of waiting is one chunk of a micro-batch, not a whole one",
    )
}

/// The order of the list, against the planner's totals (layouts within a part in a
/// billion of each other may come in either order).
fn order(list: &[(Parts, f64)]) -> Outcome {
    let parts: Vec<Parts> = list.iter().map(|l| l.0).collect();
    let got = fastest_first(&parts);
    let mut sorted = got.clone();
    sorted.sort_unstable();
    if sorted != (0..list.len()).collect::<Vec<_>>() {
        return Err(format!(
            "fastest_first: got {got:?}, not an order of {} layouts",
            list.len()
        ));
    }
    for w in got.windows(2) {
        let (a, b) = (list[w[0]].1, list[w[1]].1);
        if a > b * (1.0 + 1e-9) {
            return Err(format!(
                "fastest_first: got {got:?}, but layout {} takes {a} s and layout {} {b} s",
                w[0], w[1]
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
