use std::ops::Range;

/// Block `i / block_size` of the table, offset `i % block_size`.
pub fn token_slots(blocks: &[u32], block_size: usize, range: Range<usize>) -> Vec<u32> {
    range
        .map(|i| blocks[i / block_size] * block_size as u32 + (i % block_size) as u32)
        .collect()
}
