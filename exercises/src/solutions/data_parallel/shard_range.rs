use std::ops::Range;

/// Equal padded chunks of `ceil(len / world)`, clipped to the buffer.
pub fn shard(len: usize, world: usize, rank: usize) -> Range<usize> {
    let c = len.div_ceil(world);
    (rank * c).min(len)..((rank + 1) * c).min(len)
}
