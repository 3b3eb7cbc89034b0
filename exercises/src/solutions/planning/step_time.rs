use super::Parts;

/// Each stage idles `p − 1` units of work at the ends of the step; a unit is one
/// micro-batch through one of its `v` chunks, `1/(v·m)` of the compute and
/// tensor-parallel time. The other parts add as they are.
pub fn step_s(l: &Parts) -> f64 {
    let work = l.compute_s + l.tp_s;
    let bubble = (l.stages as f64 - 1.0) / (l.chunks * l.micro_batches) as f64 * work;
    work + l.dp_exposed_s + l.pp_s + bubble
}

/// The indices, sorted by predicted step.
pub fn fastest_first(layouts: &[Parts]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..layouts.len()).collect();
    order.sort_by(|&a, &b| step_s(&layouts[a]).total_cmp(&step_s(&layouts[b])));
    order
}
