//! # Which layouts fit?
//!
//! Before it predicts anything, the planner throws away every layout that does not fit.
//! Given the planner's inputs (the model, the cluster's GPU, the share of memory a layout
//! may use) and a list of layouts, which of them does it keep? Return their indices in
//! the list's order. Some layouts in the list are not layouts of this model at all.
//!
//! About 6 lines. Checked against `brrr_perf::plan::evaluate` on random models, GPUs,
//! headrooms and layouts, some just over the line.
//!
//! ## Hint
//!
//! `brrr_perf::memory::estimate_memory` gives the bytes of a layout's busiest GPU. How
//! much of the GPU's memory may they take, and what should a layout the estimate refuses
//! count as?

use crate::check::{Outcome, hint_if, rng, with_seed};
use brrr_perf::memory::{TrainingSetup, TransformerConfig, estimate_memory};
use brrr_perf::plan::{Cluster, PlanInputs, describe, evaluate, layouts};
use brrr_perf::specs::gpu;
use rand::Rng;
use rand::seq::IndexedRandom;

/// YOUR CODE: the indices of the layouts in `layouts` that fit, in order.
#[cfg(not(feature = "solutions"))]
pub fn fitting(inp: &PlanInputs, layouts: &[TrainingSetup]) -> Vec<usize> {
    let _ = (inp, layouts);
    Vec::new()
}

#[cfg(feature = "solutions")]
pub use solution::fitting;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/planning/fits.rs"]
pub mod solution;

/// Against the planner.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..20 {
        let (inp, list) = case(rng)?;
        let mut want = Vec::new();
        for (i, s) in list.iter().enumerate() {
            if evaluate(&inp, s).map_err(|e| e.to_string())?.is_ok() {
                want.push(i);
            }
        }
        let got = fitting(&inp, &list);
        if got != want {
            let name = |i: &usize| list.get(*i).map_or("out of range".into(), describe);
            let extra: Vec<String> = got.iter().filter(|i| !want.contains(i)).map(name).collect();
            let missing: Vec<String> = want.iter().filter(|i| !got.contains(i)).map(name).collect();
            let whole = whole_memory(&inp, &list);
            return hint_if(
                Err(format!(
                    "a {:.1}B-parameter model on {} GPUs of {:.1} GiB, headroom {:.2}: got {got:?}, expected \
                     {want:?}\n  kept but do not fit: {extra:?}\n  fit but not kept: \
                     {missing:?}",
                    inp.model.params() / 1e9,
                    inp.cluster.gpus,
                    inp.cluster.gpu.memory_bytes / (1u64 << 30) as f64,
                    inp.headroom,
                )),
                got == whole,
                "those are the layouts that fit in the whole memory; the planner keeps a \
                 share of it free",
            );
        }
    }
    Ok(())
}

/// The layouts that fit in the GPU's whole memory: a known slip.
fn whole_memory(inp: &PlanInputs, list: &[TrainingSetup]) -> Vec<usize> {
    let fits = |s: &TrainingSetup| {
        estimate_memory(&inp.model, s).is_ok_and(|m| m.total() <= inp.cluster.gpu.memory_bytes)
    };
    (0..list.len()).filter(|&i| fits(&list[i])).collect()
}

/// One of a few models on 8 to 64 H100s or A100s, with a random global batch.
pub(crate) fn random_inputs(rng: &mut impl Rng) -> Result<PlanInputs, String> {
    let models = ["gpt3-1.3b", "gpt3-6.7b", "megatron-7.5b", "gpt3-175b"];
    let model = TransformerConfig::preset(models[rng.random_range(0..models.len())]);
    let spec = gpu(["h100", "a100"][rng.random_range(0..2)]);
    let gpus = [8u64, 16, 32, 64][rng.random_range(0..4)];
    let cluster = Cluster::new(spec.map_err(|e| e.to_string())?, gpus);
    Ok(PlanInputs::new(
        model.map_err(|e| e.to_string())?,
        cluster.map_err(|e| e.to_string())?,
        64 * rng.random_range(1..=8),
    ))
}

/// A random model on a random cluster, a dozen of its layouts and two that are not its
/// layouts, and a GPU memory that puts one layout between the headroom and the whole.
fn case(rng: &mut impl Rng) -> Result<(PlanInputs, Vec<TrainingSetup>), String> {
    let mut inp = random_inputs(rng)?;
    inp.headroom = rng.random_range(0.6..0.95);
    let all = layouts(&inp);
    let mut list: Vec<TrainingSetup> = all.choose_multiple(rng, 12).cloned().collect();
    let bytes: Vec<f64> = list
        .iter()
        .filter_map(|s| estimate_memory(&inp.model, s).ok().map(|m| m.total()))
        .collect();
    let pivot = *bytes.choose(rng).ok_or("no layouts")?;
    inp.cluster.gpu.memory_bytes = pivot / rng.random_range(inp.headroom..1.0);
    for bad in [
        TrainingSetup {
            pp: inp.model.layers + 1,
            ..list[0].clone()
        },
        TrainingSetup {
            tp: inp.model.heads + 1,
            ..list[0].clone()
        },
    ] {
        list.insert(rng.random_range(0..=list.len()), bad);
    }
    Ok((inp, list))
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "an exercise: solve it, then `cargo run -p brrr-exercises`"
    )]
    fn check() {
        if let Err(e) = super::check() {
            panic!("{e}");
        }
    }
}
