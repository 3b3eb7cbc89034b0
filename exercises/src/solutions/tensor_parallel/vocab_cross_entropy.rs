/// Max over ranks, then the sum of exponentials and the target logit over ranks.
pub fn vocab_parallel_losses(shards: &[Vec<f32>], targets: &[usize]) -> Vec<f64> {
    let per = shards[0].len() / targets.len();
    targets
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let row = |r: usize| &shards[r][i * per..(i + 1) * per];
            // All-reduce max of the per-rank maxima.
            let max = (0..shards.len())
                .map(|r| {
                    row(r)
                        .iter()
                        .fold(f64::NEG_INFINITY, |m, &l| m.max(f64::from(l)))
                })
                .fold(f64::NEG_INFINITY, f64::max);
            // All-reduce sum of (Σ exp(l − max), target logit or 0).
            let (mut sum, mut target) = (0.0, 0.0);
            for r in 0..shards.len() {
                sum += row(r)
                    .iter()
                    .map(|&l| (f64::from(l) - max).exp())
                    .sum::<f64>();
                if t / per == r {
                    target += f64::from(row(r)[t % per]) - max;
                }
            }
            sum.ln() - target
        })
        .collect()
}
