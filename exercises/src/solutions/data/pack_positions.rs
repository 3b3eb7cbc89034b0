/// One pass over the documents, then the padding.
pub fn positions_and_segments(lens: &[usize], seq: usize) -> (Vec<u32>, Vec<u32>) {
    let (mut pos, mut seg) = (Vec::with_capacity(seq), Vec::with_capacity(seq));
    for (i, &n) in lens.iter().enumerate() {
        pos.extend(0..n as u32);
        seg.extend(std::iter::repeat_n(i as u32, n));
    }
    let pad = seq - pos.len();
    pos.extend(0..pad as u32);
    seg.extend(std::iter::repeat_n(lens.len() as u32, pad));
    (pos, seg)
}
