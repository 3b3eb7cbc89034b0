/// `(rank − step − 1) mod n`: in step 0 a rank sends chunk `rank − 1`; each later
/// step forwards the chunk just received, so chunk `c` travels `c+1, c+2, …` and
/// arrives at rank `c` in the last step, having passed every other rank.
pub fn ring_send_chunk(n: usize, rank: usize, step: usize) -> usize {
    (rank + 2 * n - step - 1) % n
}
