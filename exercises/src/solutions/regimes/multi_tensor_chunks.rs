/// Buffer by buffer, a chunk at every multiple of `chunk` below its length.
pub fn multi_tensor_chunks(lens: &[usize], chunk: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    for (i, &n) in lens.iter().enumerate() {
        for start in (0..n).step_by(chunk) {
            out.push((i, start, chunk.min(n - start)));
        }
    }
    out
}
