/// Max-shifted: every `exp` argument is ≤ 0, so nothing overflows, and the largest
/// term is exactly 1, so the sum is at least 1 and its log is finite.
pub fn softmax_lse(scores: &[f32]) -> (Vec<f32>, f32) {
    let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = scores.iter().map(|&s| (s - m).exp()).collect();
    let sum: f32 = e.iter().sum();
    (e.iter().map(|x| x / sum).collect(), m + sum.ln())
}
