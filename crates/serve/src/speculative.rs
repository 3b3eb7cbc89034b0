//! Speculative decoding's rule: a cheap draft model proposes `k` tokens, the target
//! model scores all of them in one forward, and [`verify`] keeps a prefix of them plus
//! one token of its own, so that what comes out follows the target's distribution
//! exactly (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
//! Decoding", Algorithm 1; Chen et al. 2023, "Accelerating Large Language Model
//! Decoding with Speculative Sampling", Algorithm 2).
//!
//! Proposal `x` drawn from the draft's `q` is accepted with probability
//! `min(1, p(x) / q(x))`; the first one rejected is replaced by a draw from the
//! residual `max(0, p − q)`, renormalised, and the rest are dropped. When all `k` are
//! accepted, the target's distribution after them gives a `k+1`-th token for free.
//! Both cases together give each emitted token probability `p` (Leviathan et al.,
//! Theorem 3.5), which the tests check by counting.
//!
//! How much it pays is [`expected_tokens_per_step`] and [`expected_speedup`]: with
//! acceptance rate `α` (the chance a proposal survives, `Σ min(p, q)`,
//! [`acceptance_probability`]) a step emits `(1 − α^{k+1}) / (1 − α)` tokens for one
//! target forward and `k` draft forwards.
//!
//! This module is plain Rust (no backend): the browser app runs it. The decoder that
//! drives two models through it is [`crate::SpeculativeDecoder`] (feature `engine`).

use rand::Rng;

/// What [`verify`] kept of `k` proposals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Proposals accepted, a prefix: `0..=k`.
    pub accepted: usize,
    /// The token emitted after them: the residual's draw where a proposal was rejected,
    /// the target's own next token where all `k` were accepted.
    pub next: u32,
}

/// Keeps a prefix of the draft's `proposed` tokens and draws one more (see the module's
/// documentation). `target[i]` is the target's distribution for proposal `i` (and
/// `target[k]` the one after the last); `draft[i]` the distribution proposal `i` was
/// drawn from. Distributions are over the same vocabulary and sum to 1 (as from
/// [`crate::sampling::probabilities`]).
///
/// With greedy distributions (one-hot) this accepts exactly the proposals that are the
/// target's argmax, and replaces the first other one by the target's argmax: speculative
/// greedy decoding gives target-only greedy decoding's tokens.
pub fn verify(
    target: &[Vec<f64>],
    draft: &[Vec<f64>],
    proposed: &[u32],
    rng: &mut impl Rng,
) -> Result<Verdict, String> {
    let k = proposed.len();
    if target.len() != k + 1 || draft.len() != k {
        return Err(format!(
            "{k} proposals need {} target and {k} draft distributions, got {} and {}",
            k + 1,
            target.len(),
            draft.len()
        ));
    }
    let vocab = target[0].len();
    if target.iter().chain(draft).any(|d| d.len() != vocab) {
        return Err("the distributions are not all over one vocabulary".into());
    }
    if let Some(&bad) = proposed.iter().find(|&&x| x as usize >= vocab) {
        return Err(format!(
            "proposal {bad} is outside the vocabulary of {vocab}"
        ));
    }
    for (i, &x) in proposed.iter().enumerate() {
        let (p, q) = (target[i][x as usize], draft[i][x as usize]);
        // Accepted with probability min(1, p/q): r·q < p for r uniform in [0, 1).
        if rng.random::<f64>() * q < p {
            continue;
        }
        let residual: Vec<f64> = target[i]
            .iter()
            .zip(&draft[i])
            .map(|(p, q)| (p - q).max(0.0))
            .collect();
        // A rejection means p(x) < q(x), so p ≠ q and the residual has mass; rounding
        // can still leave none, and then p itself is the right distribution.
        let next = sample_from(&residual, rng)
            .or_else(|| sample_from(&target[i], rng))
            .ok_or("a target distribution has no mass")?;
        return Ok(Verdict {
            accepted: i,
            next: next as u32,
        });
    }
    let next = sample_from(&target[k], rng).ok_or("a target distribution has no mass")?;
    Ok(Verdict {
        accepted: k,
        next: next as u32,
    })
}

/// An index drawn with probability proportional to `weights`; `None` when they have no
/// positive mass.
pub fn sample_from(weights: &[f64], rng: &mut impl Rng) -> Option<usize> {
    let total: f64 = weights.iter().filter(|w| **w > 0.0).sum();
    if !(total > 0.0 && total.is_finite()) {
        return None;
    }
    let mut r = rng.random_range(0.0..total);
    let mut last = None;
    for (i, &w) in weights.iter().enumerate().filter(|(_, w)| **w > 0.0) {
        if r < w {
            return Some(i);
        }
        r -= w;
        last = Some(i);
    }
    last
}

/// The chance that a token drawn from `q` survives [`verify`] against `p`:
/// `Σ_x min(p(x), q(x))`, one minus their total-variation distance (Leviathan et al.,
/// Definition 3.2's `α` for one position).
pub fn acceptance_probability(p: &[f64], q: &[f64]) -> f64 {
    p.iter().zip(q).map(|(a, b)| a.min(*b)).sum()
}

/// Tokens one step emits on average when each proposal survives with probability
/// `alpha`, independently: `(1 − α^{k+1}) / (1 − α)` (Leviathan et al., Equation 1);
/// `k + 1` at `α = 1`.
pub fn expected_tokens_per_step(alpha: f64, k: usize) -> f64 {
    if alpha >= 1.0 {
        return (k + 1) as f64;
    }
    (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha)
}

/// Speculative decoding's expected speed-up over the target alone when a draft forward
/// costs `cost_ratio` target forwards and verifying `k + 1` tokens costs one:
/// [`expected_tokens_per_step`] over `k · c + 1` (Leviathan et al., Theorem 3.8).
pub fn expected_speedup(alpha: f64, k: usize, cost_ratio: f64) -> f64 {
    expected_tokens_per_step(alpha, k) / (k as f64 * cost_ratio + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn random_distribution(n: usize, rng: &mut impl Rng) -> Vec<f64> {
        let w: Vec<f64> = (0..n).map(|_| 0.1 + rng.random::<f64>()).collect();
        let total: f64 = w.iter().sum();
        w.iter().map(|x| x / total).collect()
    }

    /// Pearson's chi-square statistic of `counts` against `p` (cells with p = 0 must be
    /// empty: returns infinity otherwise).
    fn chi_square(counts: &[usize], p: &[f64]) -> f64 {
        let n: usize = counts.iter().sum();
        counts
            .iter()
            .zip(p)
            .map(|(&c, &p)| match p * n as f64 {
                e if e > 0.0 => (c as f64 - e).powi(2) / e,
                _ if c > 0 => f64::INFINITY,
                _ => 0.0,
            })
            .sum()
    }

    #[test]
    fn the_first_token_follows_the_target_whatever_the_draft() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for trial in 0..4 {
            let p = random_distribution(6, &mut rng);
            let q = random_distribution(6, &mut rng);
            let after = random_distribution(6, &mut rng);
            let (mut counts, mut accepted) = ([0usize; 6], 0usize);
            let n = 20_000;
            for _ in 0..n {
                let x = sample_from(&q, &mut rng).unwrap() as u32;
                let v = verify(
                    &[p.clone(), after.clone()],
                    std::slice::from_ref(&q),
                    &[x],
                    &mut rng,
                )
                .unwrap();
                let first = if v.accepted == 1 { x } else { v.next };
                counts[first as usize] += 1;
                accepted += v.accepted;
            }
            // 5 degrees of freedom: P(chi² > 20.5) = 0.001.
            let chi = chi_square(&counts, &p);
            assert!(
                chi < 20.5,
                "trial {trial}: chi² {chi}, {counts:?} against {p:?}"
            );
            // And the acceptance rate is Σ min(p, q): within 4 standard deviations.
            let alpha = acceptance_probability(&p, &q);
            let rate = accepted as f64 / n as f64;
            let sd = (alpha * (1.0 - alpha) / n as f64).sqrt();
            assert!(
                (rate - alpha).abs() < 4.0 * sd + 1e-9,
                "{rate} against {alpha}"
            );
        }
    }

    #[test]
    fn accepting_every_proposal_would_give_the_draft_distribution() {
        // The check above can fail: emitting the draft's tokens as they are (no
        // rejection) is far from p in the same statistic.
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let p = [0.7, 0.1, 0.1, 0.1];
        let q = [0.1, 0.1, 0.1, 0.7];
        let mut counts = [0usize; 4];
        for _ in 0..5000 {
            counts[sample_from(&q, &mut rng).unwrap()] += 1;
        }
        assert!(chi_square(&counts, &p) > 1000.0);
    }

    #[test]
    fn greedy_keeps_the_argmax_matches_then_takes_the_targets() {
        let one_hot = |i: usize| {
            (0..5)
                .map(|j| f64::from(u8::from(i == j)))
                .collect::<Vec<_>>()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let target = [one_hot(1), one_hot(2), one_hot(3), one_hot(4)];
        let draft = [one_hot(1), one_hot(2), one_hot(0)];
        let v = verify(&target, &draft, &[1, 2, 0], &mut rng).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 2,
                next: 3
            }
        );
        let draft = [one_hot(1), one_hot(2), one_hot(3)];
        let v = verify(&target, &draft, &[1, 2, 3], &mut rng).unwrap();
        assert_eq!(
            v,
            Verdict {
                accepted: 3,
                next: 4
            }
        );
    }

    #[test]
    fn bad_shapes_are_errors() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let d = vec![0.5, 0.5];
        let one = std::slice::from_ref(&d);
        assert!(verify(one, one, &[0], &mut rng).is_err());
        assert!(verify(&[d.clone(), d.clone()], one, &[2], &mut rng).is_err());
        assert!(verify(&[vec![0.0, 0.0]], &[], &[], &mut rng).is_err());
    }

    #[test]
    fn the_expected_tokens_match_a_simulation_and_the_limits() {
        assert_eq!(expected_tokens_per_step(0.0, 4), 1.0);
        assert_eq!(expected_tokens_per_step(1.0, 4), 5.0);
        // α = 0.8, k = 4: (1 − 0.8^5) / 0.2 = 3.3616.
        assert!((expected_tokens_per_step(0.8, 4) - 3.3616).abs() < 1e-9);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (alpha, k, n) = (0.6, 3, 100_000);
        let emitted: usize = (0..n)
            .map(|_| (0..k).take_while(|_| rng.random::<f64>() < alpha).count() + 1)
            .sum();
        let mean = emitted as f64 / n as f64;
        assert!(
            (mean - expected_tokens_per_step(alpha, k)).abs() < 0.02,
            "{mean}"
        );
        // A free draft (c = 0) gains the tokens; a draft as dear as the target loses.
        assert_eq!(
            expected_speedup(0.8, 4, 0.0),
            expected_tokens_per_step(0.8, 4)
        );
        assert!(expected_speedup(0.8, 4, 1.0) < 1.0);
    }
}
