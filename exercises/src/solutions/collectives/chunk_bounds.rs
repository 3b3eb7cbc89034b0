use std::ops::Range;

/// Base size `len / n`; the first `len % n` chunks are one longer, so chunk `i`
/// starts after `i` base chunks and `min(i, len % n)` extra elements.
pub fn chunk_bounds(len: usize, n: usize, i: usize) -> Range<usize> {
    let (base, extra) = (len / n, len % n);
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}
