//! How much of the communication ran while the backward was still computing.

/// The fraction of the total duration of `comm` spans that falls inside `compute`
/// (all `(start, end)` on one clock): 1 when every collective finished before the
/// backward did, 0 when they all ran after it. 0 when there is no communication.
pub fn hidden_fraction(comm: &[(f64, f64)], compute: (f64, f64)) -> f64 {
    let total: f64 = comm.iter().map(|&(a, b)| (b - a).max(0.0)).sum();
    if total <= 0.0 {
        return 0.0;
    }
    let hidden: f64 = comm
        .iter()
        .map(|&(a, b)| (b.min(compute.1) - a.max(compute.0)).max(0.0))
        .sum();
    hidden / total
}

#[cfg(test)]
mod tests {
    use super::hidden_fraction;

    #[test]
    fn overlap_is_the_share_inside_the_backward() {
        assert_eq!(hidden_fraction(&[], (0.0, 1.0)), 0.0);
        assert_eq!(hidden_fraction(&[(0.2, 0.4)], (0.0, 1.0)), 1.0);
        assert_eq!(hidden_fraction(&[(1.0, 2.0)], (0.0, 1.0)), 0.0);
        let f = hidden_fraction(&[(0.5, 1.5), (0.0, 0.5)], (0.0, 1.0));
        assert!((f - 2.0 / 3.0).abs() < 1e-12, "{f}");
    }
}
