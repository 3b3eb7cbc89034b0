/// `k = round(√n)`, then every `k`-th index.
pub fn sqrt_group_starts(n: usize) -> Vec<usize> {
    let k = ((n as f64).sqrt().round() as usize).max(1);
    (0..n).step_by(k).collect()
}
