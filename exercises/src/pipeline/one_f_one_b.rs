//! # The 1F1B order of one stage
//!
//! Under 1F1B (PipeDream-Flush), a stage starts a micro-batch's backward as soon as it can
//! and, in the steady state, alternates one forward with one backward, so that it never
//! holds more micro-batches' activations than it must. Stage `r` of a `p`-stage pipeline
//! with `m` micro-batches: how many forwards must it run before its first backward can
//! arrive, and what order follows? Forwards and backwards each go in micro-batch order.
//! Write the compute order (`Action::F` and the fused `Action::BW`, chunk 0) of stage `r`.
//!
//! About 16 lines. Checked against `brrr_pp::one_f_one_b`.
//!
//! ## Hint
//!
//! Micro-batch 0's backward reaches stage `r` only after micro-batch 0 has gone forward
//! through the stages after it, and each of those forwards takes one forward slot. So the
//! last stage needs no warm-up and stage 0 the most; with few micro-batches, the warm-up
//! cannot exceed `m`. After the warm-up, alternate forward and backward while forwards
//! remain, then run the remaining backwards.

use crate::check::{Outcome, rng, with_seed};
#[cfg(not(feature = "solutions"))]
use brrr_pp::Action;
use rand::Rng;

/// YOUR CODE: stage `r`'s compute actions under 1F1B.
#[cfg(not(feature = "solutions"))]
pub fn one_f_one_b_stage(p: usize, m: usize, r: usize) -> Vec<Action> {
    // GPipe's order: every forward, then every backward. Right actions, wrong order.
    let _ = (p, r);
    let f = (0..m).map(|i| Action::F {
        mb: i as u32,
        chunk: 0,
    });
    let b = (0..m).map(|i| Action::BW {
        mb: i as u32,
        chunk: 0,
    });
    f.chain(b).collect()
}

#[cfg(feature = "solutions")]
pub use solution::one_f_one_b_stage;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/pipeline/one_f_one_b.rs"]
pub mod solution;

/// Against brrr-pp on random pipeline sizes.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..100 {
        let p = rng.random_range(1..=8usize);
        let m = rng.random_range(1..=16usize);
        let want = brrr_pp::one_f_one_b(p, m);
        for (r, want) in want.iter().enumerate() {
            let got = one_f_one_b_stage(p, m, r);
            if &got != want {
                let show = |v: &[brrr_pp::Action]| {
                    v.iter().map(|a| a.label()).collect::<Vec<_>>().join(" ")
                };
                return Err(format!(
                    "p = {p}, m = {m}, stage {r}: expected {}, got {}",
                    show(want),
                    show(&got)
                ));
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
