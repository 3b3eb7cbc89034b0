/// Stable softmax per row, minus one at the target, times the row's `dloss`.
pub fn cross_entropy_backward(
    logits: &[f64],
    targets: &[i32],
    dloss: &[f64],
    vocab: usize,
) -> Vec<f64> {
    let mut out = vec![0.0; logits.len()];
    for (r, row) in logits.chunks(vocab).enumerate() {
        let Ok(t) = usize::try_from(targets[r]) else {
            continue;
        };
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|z| (z - max).exp()).sum();
        for (j, z) in row.iter().enumerate() {
            let p = (z - max).exp() / sum;
            let onehot = if j == t { 1.0 } else { 0.0 };
            out[r * vocab + j] = (p - onehot) * dloss[r];
        }
    }
    out
}
