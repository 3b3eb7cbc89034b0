//! # How big is the bubble?
//!
//! In GPipe and 1F1B with `p` stages and `m` micro-batches, every stage waits `p − 1`
//! forward slots before its first micro-batch arrives and `p − 1` backward slots
//! after its last one leaves. Write the idle time as a fraction of the *whole step*
//! (all stages together: idle / (p · step time)), for any forward and backward
//! times `f` and `b` (a micro-batch's time on one stage).
//!
//! Checked against `brrr_pp::simulate` on generated schedules with random costs.

use crate::check::{Outcome, close, rng, with_seed};
use brrr_pp::{Costs, ScheduleKind, generate, simulate};
use rand::Rng;

/// YOUR CODE: the bubble fraction of GPipe (and 1F1B) with `p` stages and `m`
/// micro-batches, each taking `f` forward and `b` backward on each stage.
#[cfg(not(feature = "solutions"))]
pub fn bubble_fraction(p: usize, m: usize, f: f64, b: f64) -> f64 {
    // Bubble over the *ideal* time: a classic slip, not over the step.
    let _ = (f, b);
    (p as f64 - 1.0) / m as f64
}

#[cfg(feature = "solutions")]
pub use solution::bubble_fraction;

/// The reference solution.
pub mod solution {
    /// Each stage idles `(p − 1)(f + b)` and computes `m(f + b)`: the ratio of idle to
    /// total is `(p − 1)/(m + p − 1)`, whatever `f` and `b` are.
    pub fn bubble_fraction(p: usize, m: usize, f: f64, b: f64) -> f64 {
        let idle = (p as f64 - 1.0) * (f + b);
        idle / (m as f64 * (f + b) + idle)
    }
}

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
            close(
                &format!("{kind}, p = {p}, m = {m}, f = {f:.2}, b = {b:.2}"),
                bubble_fraction(p, m, f, b),
                t.bubble_fraction(),
                1e-9,
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
