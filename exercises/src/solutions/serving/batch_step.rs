/// Running first, then the queue, each `min(pending, budget left)`.
pub fn batch_step(
    running: &[usize],
    waiting: &[usize],
    budget: usize,
    max_seqs: usize,
) -> Vec<usize> {
    let mut left = budget;
    let mut out = Vec::new();
    for &p in running {
        if left == 0 {
            break;
        }
        out.push(p.min(left));
        left -= p.min(left);
    }
    for &p in waiting.iter().take(max_seqs.saturating_sub(running.len())) {
        if left == 0 {
            break;
        }
        out.push(p.min(left));
        left -= p.min(left);
    }
    out
}
