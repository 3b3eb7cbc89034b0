//! # Speculative decoding's acceptance rule
//!
//! A draft model proposed tokens `proposed[i]`, each drawn from its distribution
//! `draft[i]`; the target scored them all in one forward: `target[i]` is its
//! distribution at proposal `i`, and `target[k]` the one after the last. Keep proposal
//! `x` with probability `min(1, p(x) / q(x))` (draw `r` uniform in `[0, 1)` and keep it
//! when `r · q(x) < p(x)`). At the first one rejected, stop and draw the next token
//! from the residual `max(0, p − q)`, renormalised; if all are kept, draw one more from
//! `target[k]`. Return how many were kept and the token drawn.
//!
//! Every emitted token then follows the target's distribution exactly, however bad the
//! draft (Leviathan et al. 2023, Theorem 3.5): the check counts the first emitted token
//! over many draws against `p`, and the proposals kept against `Σ min(p, q)`.
//! `brrr_serve::speculative::sample_from` draws from unnormalised weights.
//!
//! Checked against the target's distribution and
//! `brrr_serve::speculative::acceptance_probability` on random distributions.
//!
//! About 15 lines.
//!
//! ## Hint
//!
//! For each proposal in order draw `r` and test `r · q(x) < p(x)`. On the first
//! rejection build the residual `max(0, p − q)` and draw from it with `sample_from`; if
//! none is rejected, draw from `target[k]`.

use crate::check::{Outcome, rng, with_seed};
use brrr_serve::speculative::{acceptance_probability, sample_from};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// YOUR CODE: proposals kept, and the next token.
#[cfg(not(feature = "solutions"))]
pub fn accept_draft(
    target: &[Vec<f64>],
    draft: &[Vec<f64>],
    proposed: &[u32],
    rng: &mut ChaCha8Rng,
) -> (usize, u32) {
    // Trust the draft: keep everything, then the target's own draw. The tokens follow
    // the draft's distribution, not the target's.
    let _ = draft;
    let k = proposed.len();
    (k, sample_from(&target[k], rng).unwrap_or(0) as u32)
}

#[cfg(feature = "solutions")]
pub use solution::accept_draft;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/serving/accept_draft.rs"]
pub mod solution;

/// A random distribution over `n` tokens, no token below about 1/(11n).
fn distribution(n: usize, rng: &mut impl Rng) -> Vec<f64> {
    let w: Vec<f64> = (0..n).map(|_| 0.1 + rng.random::<f64>()).collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

/// Against the target's distribution on random draft/target pairs.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut ChaCha8Rng) -> Outcome {
    let (vocab, k, n) = (5, 2, 20_000);
    for _ in 0..3 {
        let target: Vec<Vec<f64>> = (0..=k).map(|_| distribution(vocab, rng)).collect();
        let draft: Vec<Vec<f64>> = (0..k).map(|_| distribution(vocab, rng)).collect();
        let (mut first, mut kept_first) = (vec![0usize; vocab], 0usize);
        for _ in 0..n {
            let proposed: Vec<u32> = draft
                .iter()
                .map(|q| sample_from(q, rng).unwrap_or(0) as u32)
                .collect();
            let (kept, next) = accept_draft(&target, &draft, &proposed, rng);
            if kept > k || next as usize >= vocab {
                return Err(format!("kept {kept} of {k}, next token {next} of {vocab}"));
            }
            let token = if kept > 0 { proposed[0] } else { next };
            first[token as usize] += 1;
            kept_first += usize::from(kept > 0);
        }
        let alpha = acceptance_probability(&target[0], &draft[0]);
        let rate = kept_first as f64 / n as f64;
        let sd = (alpha * (1.0 - alpha) / n as f64).sqrt();
        if (rate - alpha).abs() > 5.0 * sd {
            return Err(format!(
                "the first proposal was kept {rate:.3} of the time; min(1, p/q) keeps it \
                 Σ min(p, q) = {alpha:.3} of the time"
            ));
        }
        // Pearson's chi-square, 4 degrees of freedom: P(> 35) ≈ 5e-7, so a right answer
        // fails once in millions of runs.
        let chi: f64 = first
            .iter()
            .zip(&target[0])
            .map(|(&c, &p)| (c as f64 - p * n as f64).powi(2) / (p * n as f64))
            .sum();
        if chi > 35.0 {
            let got: Vec<f64> = first.iter().map(|&c| c as f64 / n as f64).collect();
            return Err(format!(
                "the first token's frequencies {got:.3?} are not the target's {:.3?} \
                 (chi² {chi:.1})",
                target[0]
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
