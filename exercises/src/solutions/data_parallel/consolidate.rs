/// The chunks in rank order are the padded bucket; cut it at the parameters' sizes
/// (the padding is whatever is left after the last one).
pub fn unshard(numels: &[usize], chunks: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let flat: Vec<f32> = chunks.iter().flatten().copied().collect();
    let mut at = 0;
    numels
        .iter()
        .map(|&n| {
            let p = flat[at..at + n].to_vec();
            at += n;
            p
        })
        .collect()
}
