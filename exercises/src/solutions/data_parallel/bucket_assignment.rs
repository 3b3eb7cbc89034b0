use std::ops::Range;

/// One pass from the last parameter to the first, closing a bucket when it reaches
/// its limit (the first bucket's limit is smaller, so the first all-reduce starts
/// early in the backward).
pub fn assign(
    numels: &[usize],
    elem_bytes: usize,
    bucket_bytes: usize,
    first_bucket_bytes: usize,
) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut end, mut bytes) = (numels.len(), 0);
    for i in (0..numels.len()).rev() {
        bytes += numels[i] * elem_bytes;
        let limit = if out.is_empty() {
            first_bucket_bytes
        } else {
            bucket_bytes
        };
        if bytes >= limit || i == 0 {
            out.push(i..end);
            end = i;
            bytes = 0;
        }
    }
    out
}
