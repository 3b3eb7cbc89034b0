use std::collections::BTreeMap;

/// Sort the steps, drop the first `skip`, and add each op to its kind when its start
/// falls in one of the rest.
pub fn op_totals(
    ops: &[(String, f64, f64)],
    steps: &[(f64, f64)],
    skip: usize,
) -> (BTreeMap<String, f64>, f64) {
    let mut windows = steps.to_vec();
    windows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let windows = &windows[skip.min(windows.len())..];
    let mut totals = BTreeMap::new();
    for (kind, start, dur) in ops {
        if windows.iter().any(|&(s, d)| s <= *start && *start <= s + d) {
            *totals.entry(kind.clone()).or_insert(0.0) += dur;
        }
    }
    (totals, windows.iter().map(|(_, d)| d).sum())
}
