//! # Enough micro-batches
//!
//! A pipeline of `p` stages runs `v` model chunks on each stage (`v = 1` for 1F1B). With
//! no communication at all, what is the fewest micro-batches per step `m` for which the
//! planner's bubble takes at most a share `share` of the whole step? With interleaving
//! (`v > 1`) the planner, like Megatron-LM, only schedules an `m` that is a multiple of
//! `p`.
//!
//! About 6 lines. Checked against `brrr_perf::plan::predict` for random depths, chunks
//! and targets.
//!
//! ## Hint
//!
//! Write the bubble's share of a step in `p`, `v` and `m` (the step is the busy time and
//! the bubble), then solve for the smallest whole `m`.

use crate::check::{Outcome, hint_if, rng, with_seed};
use brrr_perf::memory::{PipelineSchedule, TrainingSetup, TransformerConfig};
use brrr_perf::plan::{Cluster, PlanInputs, predict};
use brrr_perf::specs::gpu;
use rand::Rng;

/// YOUR CODE: the fewest micro-batches that keep the bubble within `share` of the step.
#[cfg(not(feature = "solutions"))]
pub fn micro_batches(p: u64, v: u64, share: f64) -> u64 {
    let _ = (p, v, share);
    0
}

#[cfg(feature = "solutions")]
pub use solution::micro_batches;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/planning/micro_batches.rs"]
pub mod solution;

/// Against the planner.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

/// The bubble's share of the step the planner predicts for `p` stages of `v` chunks
/// and `m` micro-batches of one sequence, one GPU per stage, no communication
/// counted.
fn bubble_share(p: u64, v: u64, m: u64) -> Result<f64, String> {
    let model = TransformerConfig::gpt(2 * p * v, 1024, 16, 1024, 50257);
    let cluster = Cluster::new(gpu("h100").map_err(|e| e.to_string())?, p);
    let inp = PlanInputs::new(model, cluster.map_err(|e| e.to_string())?, m);
    let schedule = match v {
        1 => PipelineSchedule::OneFOneB,
        chunks => PipelineSchedule::Interleaved { chunks },
    };
    let setup = TrainingSetup {
        pp: p,
        grad_accum: m,
        schedule,
        ..TrainingSetup::default()
    };
    let t = predict(&inp, &setup).map_err(|e| e.to_string())?;
    Ok(t.bubble_s / (t.compute_s + t.tp_s + t.bubble_s))
}

/// The planner's answer: the first `m` it would schedule whose bubble is small enough.
fn fewest(p: u64, v: u64, share: f64) -> Result<u64, String> {
    for m in (1..=100_000u64).filter(|m| v == 1 || m.is_multiple_of(p)) {
        if bubble_share(p, v, m)? <= share {
            return Ok(m);
        }
    }
    Err(format!("no m up to 100000 for p = {p}, v = {v}"))
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..30 {
        let p = rng.random_range(2..=16u64);
        let v = [1u64, 1, 2, 4][rng.random_range(0..4)];
        let share = rng.random_range(0.02..0.5);
        let want = fewest(p, v, share)?;
        let got = micro_batches(p, v, share);
        if got == want {
            continue;
        }
        let what = format!("p = {p}, v = {v}, share {share:.4}: got {got}, expected {want}");
        let of_busy = (((p - 1) as f64 / (v as f64 * share)).ceil() as u64).max(1);
        let outcome = hint_if(
            Err(what),
            got == of_busy || got == of_busy.div_ceil(p) * p,
            "that keeps the bubble within the share of the busy time; the step includes \
             the bubble itself",
        );
        return hint_if(
            outcome,
            v > 1 && !got.is_multiple_of(p),
            "with interleaving, m must be a multiple of p",
        );
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
