//! The serving page's speculative-decoding panel: brrr-serve's real acceptance rule
//! (`brrr_serve::speculative::verify`) run on stand-in distributions, for every `k`,
//! against Leviathan et al.'s formulas.
//!
//! The stand-in target gives each position a random distribution over a small
//! vocabulary; the draft's is the target's mixed with noise, `q = m·p + (1 − m)·u`, so
//! the reader's "draft quality" `m` sets how often proposals survive. What the rule
//! does depends only on `p` and `q`, never on what the tokens mean.

use brrr_serve::speculative::{
    acceptance_probability, expected_speedup, expected_tokens_per_step, sample_from, verify,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Largest `k` the panel measures.
pub const MAX_K: usize = 10;
/// Steps simulated per `k`.
pub const STEPS: usize = 1000;
const VOCAB: usize = 12;

/// What the reader picked.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecInput {
    /// The draft's share of the target's distribution, in percent (100: the target).
    pub quality: u32,
    /// A draft forward's cost, in percent of a target forward.
    pub cost: u32,
}

impl Default for SpecInput {
    fn default() -> Self {
        SpecInput {
            quality: 70,
            cost: 10,
        }
    }
}

/// One `k`, measured and by the formulas.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecRow {
    /// Proposals per step.
    pub k: usize,
    /// Tokens emitted per target forward, measured.
    pub tokens: f64,
    /// The same from the formula with the measured `α`.
    pub tokens_formula: f64,
    /// Speed-up over the target alone: measured tokens over `k·c + 1`.
    pub speedup: f64,
    /// The formula's speed-up.
    pub speedup_formula: f64,
}

/// The panel's numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecView {
    /// The acceptance rate: proposals kept over proposals verified, over every `k`.
    pub alpha: f64,
    /// `Σ min(p, q)` averaged: the rate the distributions predict.
    pub alpha_predicted: f64,
    /// One row per `k` from 1 to [`MAX_K`].
    pub rows: Vec<SpecRow>,
    /// The `k` with the largest measured speed-up.
    pub best_k: usize,
}

fn distribution(rng: &mut impl Rng) -> Vec<f64> {
    // Cubed uniforms: peaked like a language model's, a few likely tokens.
    let w: Vec<f64> = (0..VOCAB).map(|_| rng.random::<f64>().powi(3)).collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

fn mix(p: &[f64], noise: &[f64], m: f64) -> Vec<f64> {
    p.iter()
        .zip(noise)
        .map(|(a, b)| m * a + (1.0 - m) * b)
        .collect()
}

/// Runs [`STEPS`] speculative steps for each `k` (a fixed seed: the same input gives the
/// same numbers).
pub fn view(input: &SpecInput) -> Result<SpecView, String> {
    if input.quality > 100 || input.cost > 200 {
        return Err(format!(
            "draft quality {}% must be at most 100%, draft cost {}% at most 200%",
            input.quality, input.cost
        ));
    }
    let (m, c) = (
        f64::from(input.quality) / 100.0,
        f64::from(input.cost) / 100.0,
    );
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (mut kept, mut tested, mut alpha_sum) = (0usize, 0usize, 0.0);
    let mut rows = Vec::new();
    for k in 1..=MAX_K {
        let mut emitted = 0usize;
        for _ in 0..STEPS {
            let target: Vec<Vec<f64>> = (0..=k).map(|_| distribution(&mut rng)).collect();
            let draft: Vec<Vec<f64>> = target[..k]
                .iter()
                .map(|p| mix(p, &distribution(&mut rng), m))
                .collect();
            let proposed = draft
                .iter()
                .map(|q| sample_from(q, &mut rng).map(|x| x as u32))
                .collect::<Option<Vec<u32>>>()
                .ok_or("a draft distribution has no mass")?;
            let v = verify(&target, &draft, &proposed, &mut rng)?;
            let verified = (v.accepted + 1).min(k);
            kept += v.accepted;
            tested += verified;
            alpha_sum += (0..verified)
                .map(|i| acceptance_probability(&target[i], &draft[i]))
                .sum::<f64>();
            emitted += v.accepted + 1;
        }
        let tokens = emitted as f64 / STEPS as f64;
        rows.push(SpecRow {
            k,
            tokens,
            tokens_formula: 0.0,
            speedup: tokens / (k as f64 * c + 1.0),
            speedup_formula: 0.0,
        });
    }
    let alpha = kept as f64 / tested.max(1) as f64;
    for r in &mut rows {
        r.tokens_formula = expected_tokens_per_step(alpha, r.k);
        r.speedup_formula = expected_speedup(alpha, r.k, c);
    }
    let best_k = rows
        .iter()
        .max_by(|a, b| a.speedup.total_cmp(&b.speedup))
        .map_or(1, |r| r.k);
    Ok(SpecView {
        alpha,
        alpha_predicted: alpha_sum / tested.max(1) as f64,
        rows,
        best_k,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_tokens_follow_the_formula() {
        let v = view(&SpecInput::default()).unwrap();
        assert!((v.alpha - v.alpha_predicted).abs() < 0.03, "{v:?}");
        for r in &v.rows {
            // 1000 steps: within 8% of the formula.
            assert!(
                (r.tokens - r.tokens_formula).abs() < 0.08 * r.tokens_formula,
                "{r:?}"
            );
        }
    }

    #[test]
    fn a_perfect_draft_keeps_everything_and_a_dear_one_loses() {
        let perfect = view(&SpecInput {
            quality: 100,
            cost: 0,
        })
        .unwrap();
        assert_eq!(perfect.alpha, 1.0);
        assert!(perfect.rows.iter().all(|r| r.tokens == (r.k + 1) as f64));
        let dear = view(&SpecInput {
            quality: 50,
            cost: 100,
        })
        .unwrap();
        assert!(dear.rows.iter().all(|r| r.speedup < 1.0), "{dear:?}");
        assert!(
            view(&SpecInput {
                quality: 101,
                cost: 0
            })
            .is_err()
        );
    }
}
