/// `rank = (pp·DP + dp)·TP + tp`.
pub fn coords(rank: usize, degrees: (usize, usize, usize)) -> (usize, usize, usize) {
    let (dp, tp, _) = degrees;
    ((rank / tp) % dp, rank % tp, rank / (tp * dp))
}

/// The `tp` consecutive ranks starting at the group's first.
pub fn tp_group(rank: usize, degrees: (usize, usize, usize)) -> Vec<usize> {
    let tp = degrees.1;
    let first = rank - rank % tp;
    (first..first + tp).collect()
}
