/// `W_fc`'s rows are contiguous; `W_proj`'s slice is `4C/n` columns of each row.
pub fn split_mlp(
    w_fc: &[f32],
    w_proj: &[f32],
    c: usize,
    rank: usize,
    n: usize,
) -> (Vec<f32>, Vec<f32>) {
    let inner = 4 * c / n;
    let fc = w_fc[rank * inner * c..(rank + 1) * inner * c].to_vec();
    let proj = (0..c)
        .flat_map(|row| {
            let start = row * 4 * c + rank * inner;
            w_proj[start..start + inner].iter().copied()
        })
        .collect();
    (fc, proj)
}
