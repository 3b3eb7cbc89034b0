/// Whole rounds of `world · batch` positions; batch `k` of rank `r` is a slice of
/// round `k`.
pub fn rank_batches(total: u64, batch: usize, rank: usize, world: usize) -> Vec<Vec<u64>> {
    let per_round = (world * batch) as u64;
    let rounds = total / per_round;
    (0..rounds)
        .map(|k| {
            let start = (k * world as u64 + rank as u64) * batch as u64;
            (start..start + batch as u64).collect()
        })
        .collect()
}
