//! The layout planner: a model, a cluster and a batch in, brrr-perf's search
//! (`brrr_perf::plan`) out, as the rows of a table and the points of a chart.

use brrr_perf::Result;
use brrr_perf::memory::TransformerConfig;
use brrr_perf::plan::{Cluster, Plan, PlanInputs, plan};
use brrr_perf::specs::GpuSpec;

/// Everything the planner's controls set.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanInput {
    /// The model (a preset's shape, or edited).
    pub model: TransformerConfig,
    /// `brrr_perf::specs` id of the GPU.
    pub gpu: String,
    /// GPUs in all.
    pub gpus: u64,
    /// Sequences per optimizer step over the cluster.
    pub global_batch: u64,
    /// The share of the matmul peak a large GEMM reaches, in percent.
    pub efficiency_pct: u64,
}

impl Default for PlanInput {
    /// GPT-3 6.7B on 64 H100s with 1,024 sequences (2M tokens) per step: small enough
    /// that data parallelism competes with splitting the model.
    fn default() -> Self {
        PlanInput {
            model: TransformerConfig::preset("gpt3-6.7b")
                .unwrap_or_else(|_| TransformerConfig::gpt(32, 4096, 32, 2048, 50257)),
            gpu: "h100-sxm".into(),
            gpus: 64,
            global_batch: 1024,
            efficiency_pct: 60,
        }
    }
}

/// The search's inputs for `gpu`.
pub fn inputs(input: &PlanInput, gpu: &GpuSpec) -> Result<PlanInputs> {
    let cluster = Cluster::new(gpu.clone(), input.gpus)?;
    let mut inp = PlanInputs::new(input.model.clone(), cluster, input.global_batch);
    inp.efficiency = input.efficiency_pct as f64 / 100.0;
    Ok(inp)
}

/// The search, with the inputs it ran on.
pub fn search(input: &PlanInput, gpu: &GpuSpec) -> Result<(PlanInputs, Plan)> {
    let inp = inputs(input, gpu)?;
    let p = plan(&inp)?;
    Ok((inp, p))
}

/// Every candidate as `(seconds per step, GiB per GPU)`, the best `top` first.
pub fn points(p: &Plan) -> Vec<(f64, f64)> {
    let gib = (1u64 << 30) as f64;
    p.candidates
        .iter()
        .map(|c| (c.time.total_s(), c.memory_bytes / gib))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use brrr_perf::specs::gpu;

    #[test]
    fn the_default_finds_layouts_and_ranks_them() {
        let input = PlanInput::default();
        let (_, p) = search(&input, &gpu(&input.gpu).unwrap()).unwrap();
        assert!(p.candidates.len() > 10);
        let t = points(&p);
        assert!(t.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn a_model_too_large_for_the_cluster_fits_nowhere_and_says_why() {
        let input = PlanInput {
            model: TransformerConfig::preset("gpt3-175b").unwrap(),
            gpus: 1,
            ..PlanInput::default()
        };
        let (_, p) = search(&input, &gpu(&input.gpu).unwrap()).unwrap();
        assert!(p.candidates.is_empty());
        assert!(p.rejected.iter().any(|r| r.0.contains("does not fit")));
    }
}
