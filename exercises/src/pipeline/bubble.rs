//! # How big is the bubble?
//!
//! In a GPipe or 1F1B step with `p` stages and `m` micro-batches, a stage can start a
//! micro-batch's forward only once the stages before it have, and its backward only once
//! the stages after it have. So stages sit idle at the start and the end of the step. What
//! fraction of the whole step is idle, counting all stages together (idle time over `p`
//! times the step's time), when a micro-batch takes `f` forward and `b` backward on every
//! stage? Does it depend on `f` and `b`?
//!
//! About 4 lines. Checked against `brrr_pp::simulate` on generated schedules with random
//! costs.
//!
//! ## Hint
//!
//! Draw the GPipe timeline for `p = 3`, `m = 2`. How long does the last stage wait for its
//! first forward, and the first stage for its first backward? How long does each stage
//! compute?

use crate::check::{Outcome, close, hint_if, rel_diff, rng, with_seed};
use brrr_pp::{Costs, ScheduleKind, generate, simulate};
use rand::Rng;

/// YOUR CODE: the bubble fraction of GPipe (and 1F1B) with `p` stages and `m`
/// micro-batches, each taking `f` forward and `b` backward on each stage.
#[cfg(not(feature = "solutions"))]
pub fn bubble_fraction(p: usize, m: usize, f: f64, b: f64) -> f64 {
    let _ = (p, m, f, b);
    0.0
}

#[cfg(feature = "solutions")]
pub use solution::bubble_fraction;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/pipeline/bubble.rs"]
pub mod solution;

/// Against the simulator.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..50 {
        let p = rng.random_range(1..=8usize);
        let m = rng.random_range(1..=32usize);
        let f = rng.random_range(0.5..2.0);
        let b = rng.random_range(0.5..4.0);
        // A fused backward costs b + w: put all of b into it.
        let costs = Costs {
            f,
            b,
            w: 0.0,
            comm: 0.0,
        };
        for kind in [ScheduleKind::GPipe, ScheduleKind::OneFOneB] {
            let s = generate(kind, p, m).map_err(|e| e.to_string())?;
            let t = simulate(&s, costs).map_err(|d| format!("{d:?}"))?;
            let got = bubble_fraction(p, m, f, b);
            hint_if(
                close(
                    &format!("{kind}, p = {p}, m = {m}, f = {f:.2}, b = {b:.2}"),
                    got,
                    t.bubble_fraction(),
                    1e-9,
                ),
                rel_diff(got, (p as f64 - 1.0) / m as f64, 1e-300) < 1e-9,
                "that is the idle time over the time spent computing; the question divides \
                 by the whole step, idle time included",
            )?;
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
