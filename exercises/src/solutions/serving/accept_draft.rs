use brrr_serve::speculative::sample_from;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Keep while `r · q < p`; at the first rejection draw from `max(0, p − q)`.
pub fn accept_draft(
    target: &[Vec<f64>],
    draft: &[Vec<f64>],
    proposed: &[u32],
    rng: &mut ChaCha8Rng,
) -> (usize, u32) {
    for (i, &x) in proposed.iter().enumerate() {
        let (p, q) = (target[i][x as usize], draft[i][x as usize]);
        if rng.random::<f64>() * q < p {
            continue;
        }
        let residual: Vec<f64> = target[i]
            .iter()
            .zip(&draft[i])
            .map(|(p, q)| (p - q).max(0.0))
            .collect();
        let next = sample_from(&residual, rng).or_else(|| sample_from(&target[i], rng));
        return (i, next.unwrap_or(0) as u32);
    }
    let k = proposed.len();
    (k, sample_from(&target[k], rng).unwrap_or(0) as u32)
}
