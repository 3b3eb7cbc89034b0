use brrr_perf::memory::{TrainingSetup, estimate_memory};
use brrr_perf::plan::PlanInputs;

/// A layout fits when its busiest GPU's estimate stays within the planner's share of the
/// GPU's memory; a layout the estimate refuses (a degree that does not divide the model)
/// fits nowhere.
pub fn fitting(inp: &PlanInputs, layouts: &[TrainingSetup]) -> Vec<usize> {
    let budget = inp.headroom * inp.cluster.gpu.memory_bytes;
    let fits =
        |s: &TrainingSetup| estimate_memory(&inp.model, s).is_ok_and(|m| m.total() <= budget);
    (0..layouts.len()).filter(|&i| fits(&layouts[i])).collect()
}
