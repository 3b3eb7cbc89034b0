//! Choosing the next token from a row of logits: greedy, temperature, top-k and top-p
//! (nucleus, Holtzman et al. 2020), and when a request is done.

use rand::Rng;

/// How one request's tokens are chosen and when it stops.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; `0` takes the most likely token (greedy).
    pub temperature: f32,
    /// Sample among the `top_k` most likely tokens only (`0`: all).
    pub top_k: usize,
    /// Sample among the most likely tokens whose probabilities add up to `top_p`
    /// (`1.0`: all).
    pub top_p: f32,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Tokens that end the request when generated (kept in the output).
    pub stop_tokens: Vec<u32>,
    /// Seed of this request's random stream: the same request gives the same tokens
    /// whatever else is in the batch.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            max_tokens: 16,
            stop_tokens: Vec::new(),
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding of at most `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> Self {
        SamplingParams {
            max_tokens,
            ..Self::default()
        }
    }

    /// Checks the values a client sent: a message naming the bad one.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!(
                "temperature must be finite and >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        Ok(())
    }
}

/// Samples an index from `softmax(logits / temperature)` restricted to the `top_k` most
/// likely (`0`: all) and then to the smallest set of them whose probability reaches
/// `top_p`; `temperature = 0` picks the largest logit (the first on a tie).
///
/// Errors (rather than panicking) on empty or non-finite logits or a bad temperature or
/// `top_p`: there is no distribution to sample from.
pub fn sample_token(
    logits: &[f32],
    temperature: f32,
    top_k: usize,
    top_p: f32,
    rng: &mut impl Rng,
) -> Result<usize, String> {
    let (order, weights) = nucleus(logits, temperature, top_k, top_p)?;
    if temperature == 0.0 {
        return Ok(order[0]);
    }
    // The largest logit has weight exp(0) = 1, so total >= 1 and the range is never empty.
    let total: f64 = weights.iter().sum();
    let mut r = rng.random_range(0.0..total);
    for (w, &i) in weights.iter().zip(&order) {
        if r < *w {
            return Ok(i);
        }
        r -= w;
    }
    Ok(order[weights.len() - 1])
}

/// The distribution [`sample_token`] samples from, over every index of `logits`: zero
/// outside the top-k and top-p cut, one-hot on the largest logit when `temperature = 0`.
/// Speculative decoding needs it whole ([`crate::speculative::verify`]).
pub fn probabilities(
    logits: &[f32],
    temperature: f32,
    top_k: usize,
    top_p: f32,
) -> Result<Vec<f64>, String> {
    let (order, weights) = nucleus(logits, temperature, top_k, top_p)?;
    let total: f64 = weights.iter().sum();
    let mut p = vec![0.0; logits.len()];
    for (w, &i) in weights.iter().zip(&order) {
        p[i] = w / total;
    }
    Ok(p)
}

/// The most likely indices, most likely first (the top `k`; only the first for greedy)
/// and the unnormalised weights of those kept (one weight, 1, for greedy). Equal logits
/// keep index order, so greedy takes the first of a tie. Errors on empty or non-finite logits, or a bad temperature or
/// `top_p`.
fn nucleus(
    logits: &[f32],
    temperature: f32,
    top_k: usize,
    top_p: f32,
) -> Result<(Vec<usize>, Vec<f64>), String> {
    if logits.is_empty() || logits.iter().any(|x| !x.is_finite()) {
        return Err("logits are empty or not finite: no distribution to sample from".into());
    }
    SamplingParams {
        temperature,
        top_p,
        ..SamplingParams::default()
    }
    .validate()?;
    // Most likely first, equal logits in index order: a total order, so the `k` it puts
    // first are the same whether the whole row is sorted or only selected and those `k`
    // sorted (O(V + k log k) rather than O(V log V), per request and token).
    let before = |&a: &usize, &b: &usize| logits[b].total_cmp(&logits[a]).then(a.cmp(&b));
    if temperature == 0.0 {
        let best = (0..logits.len()).min_by(before).unwrap_or(0);
        return Ok((vec![best], vec![1.0]));
    }
    let k = if top_k == 0 {
        logits.len()
    } else {
        top_k.min(logits.len())
    };
    let mut order: Vec<usize> = (0..logits.len()).collect();
    if k < order.len() {
        order.select_nth_unstable_by(k - 1, before);
        order.truncate(k);
    }
    order.sort_unstable_by(before);
    let max = logits[order[0]];
    let mut weights: Vec<f64> = order[..k]
        .iter()
        .map(|&i| f64::from((logits[i] - max) / temperature).exp())
        .collect();
    if top_p < 1.0 {
        let total: f64 = weights.iter().sum();
        let mut mass = 0.0;
        let keep = weights
            .iter()
            .position(|w| {
                mass += w / total;
                mass >= f64::from(top_p)
            })
            .map_or(weights.len(), |i| i + 1);
        weights.truncate(keep);
    }
    Ok((order, weights))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn greedy_takes_the_first_largest() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert_eq!(sample_token(&[1.0, 3.0, 3.0], 0.0, 0, 1.0, &mut rng), Ok(1));
        assert!(sample_token(&[f32::NAN], 1.0, 0, 1.0, &mut rng).is_err());
        assert!(sample_token(&[1.0], 1.0, 0, 0.0, &mut rng).is_err());
    }

    #[test]
    fn the_top_k_selected_are_the_top_k_of_a_stable_sort() {
        // Few distinct values, so ties abound: the first k of a stable sort (largest
        // first, equal logits in index order) must be what is kept, in that order.
        let logits: Vec<f32> = (0..300u32)
            .map(|i| ((i * 7919) % 13) as f32 * 0.5)
            .collect();
        let mut sorted: Vec<usize> = (0..logits.len()).collect();
        sorted.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        for k in [1, 2, 23, 299, 300] {
            let (order, weights) = nucleus(&logits, 0.7, k, 1.0).unwrap();
            assert_eq!(order, sorted[..k], "k = {k}");
            assert_eq!(weights.len(), k);
        }
        let (greedy, _) = nucleus(&logits, 0.0, 0, 1.0).unwrap();
        assert_eq!(greedy, [sorted[0]]);
    }

    #[test]
    fn top_p_keeps_the_nucleus_only() {
        // Probabilities about 0.64, 0.24, 0.09, 0.03: top_p 0.7 keeps the first two.
        let logits = [3.0, 2.0, 1.0, 0.0];
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut seen = [0usize; 4];
        for _ in 0..2000 {
            seen[sample_token(&logits, 1.0, 0, 0.7, &mut rng).unwrap()] += 1;
        }
        assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
        assert_eq!((seen[2], seen[3]), (0, 0), "{seen:?}");
        // The kept two in their renormalised ratio e:1 (0.73): within 5 points.
        let share = seen[0] as f64 / 2000.0;
        assert!((share - 0.731).abs() < 0.05, "{share}");
    }
}
