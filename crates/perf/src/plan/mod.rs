//! Choosing a parallel layout: for a model, a cluster and a global batch, enumerate
//! `dp × tp × pp` with sequence parallelism, the ZeRO stage, the recomputation strategy,
//! the micro-batch size and count, the pipeline schedule and the precision; discard what
//! does not fit in memory (saying why); predict each step's time from its parts; rank.
//!
//! The step time of a layout, per GPU (every term a formula of this crate):
//!
//! | term | model | overlap |
//! |---|---|---|
//! | compute | [`hardware_flops_per_token`] × tokens per GPU ÷ (matmul peak × efficiency), the efficiency capped by the roofline of the layer's widest GEMM (a small micro-batch or a thin tensor-parallel slice is memory-bound) | — |
//! | tensor parallel | 4 all-reduces of `b·s·h` activations per layer and micro-batch (6 with full recomputation), Megatron-LM's `f`/`g` operators; the same volume with sequence parallelism | none: they sit between a layer's GEMMs |
//! | data parallel | gradients all-reduced (ZeRO 0), reduce-scattered then parameters all-gathered (1-2), or both gathered per micro-batch (3) | the gradients' collective runs under the last micro-batch's backward except its last bucket; ZeRO 1-2's all-gather follows the optimizer step; ZeRO-3's gathers run under each micro-batch's compute |
//! | pipeline | activations sent stage to stage, `2(m + p − 2)` messages on the critical path | none |
//! | bubble | `(p − 1) / (v·m)` of the compute and tensor-parallel time (Narayanan et al. 2021, eq. 1 and §2.2.2) | — |
//!
//! Memory per GPU is [`estimate_memory`] (Korthikanti et al. 2022), which must fit in
//! `headroom` of the GPU's memory. The efficiency is the one calibration knob: the
//! fraction of the matmul peak a large GEMM reaches on this software stack (measure it,
//! or take a published MFU of a layout whose other terms are small).

use crate::comms::Link;
use crate::flops::{hardware_flops_per_token, model_flops_per_token};
use crate::memory::{
    Optimizer, PipelineSchedule, Precision, Recompute, TrainingSetup, TransformerConfig,
    estimate_memory,
};
use crate::specs::{DType, GpuSpec};
use crate::{PerfError, Result};
use serde::Serialize;

mod predict;
pub mod published;
mod report;

pub use predict::predict;

/// The GPUs a layout is chosen for.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The GPU (its memory, matmul peaks and bandwidths).
    pub gpu: GpuSpec,
    /// GPUs in all.
    pub gpus: u64,
    /// GPUs per node: groups up to this size talk over `intra`, larger ones over `inter`.
    pub gpus_per_node: u64,
    /// The link within a node.
    pub intra: Link,
    /// The link between nodes.
    pub inter: Link,
}

impl Cluster {
    /// `gpus` of `gpu` with the spec's node size and links ([`Link::intra_node`],
    /// [`Link::inter_node`]).
    pub fn new(gpu: GpuSpec, gpus: u64) -> Result<Self> {
        let intra = Link::intra_node(&gpu)?;
        let inter = Link::inter_node(&gpu).unwrap_or(intra);
        Ok(Cluster {
            gpus_per_node: u64::from(gpu.gpus_per_node.max(1)),
            gpu,
            gpus,
            intra,
            inter,
        })
    }

    /// The link of a group of `size` ranks spaced `stride` apart in rank order.
    pub(crate) fn link(&self, size: u64, stride: u64) -> Link {
        match size.saturating_mul(stride) <= self.gpus_per_node {
            true => self.intra,
            false => self.inter,
        }
    }
}

/// What `plan` searches over.
#[derive(Debug, Clone)]
pub struct PlanInputs {
    /// The model (its `seq_len` is the training sequence length).
    pub model: TransformerConfig,
    /// The GPUs.
    pub cluster: Cluster,
    /// Sequences per optimizer step over the whole cluster.
    pub global_batch: u64,
    /// Fraction of the matmul peak a large GEMM reaches, in (0, 1].
    pub efficiency: f64,
    /// Fraction of the GPU's memory a layout may use, in (0, 1].
    pub headroom: f64,
    /// Precisions to try.
    pub precisions: Vec<Precision>,
    /// The largest micro-batch (sequences) to try.
    pub max_micro_batch: u64,
}

impl PlanInputs {
    /// Mixed precision, efficiency 0.6, 90% of memory, micro-batches up to 16.
    pub fn new(model: TransformerConfig, cluster: Cluster, global_batch: u64) -> Self {
        PlanInputs {
            model,
            cluster,
            global_batch,
            efficiency: 0.6,
            headroom: 0.9,
            precisions: vec![Precision::Mixed],
            max_micro_batch: 16,
        }
    }
}

/// A layout's predicted step, seconds per optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTime {
    /// Arithmetic, recomputation included.
    pub compute_s: f64,
    /// Tensor-parallel collectives (not overlapped).
    pub tp_s: f64,
    /// What of the data-parallel collectives the compute does not hide.
    pub dp_exposed_s: f64,
    /// Stage-to-stage sends on the critical path.
    pub pp_s: f64,
    /// The pipeline's idle time.
    pub bubble_s: f64,
}

impl StepTime {
    /// The whole step.
    pub fn total_s(&self) -> f64 {
        self.compute_s + self.tp_s + self.dp_exposed_s + self.pp_s + self.bubble_s
    }

    /// The largest term after the compute: what keeps this layout from its peak.
    pub fn limit(&self) -> &'static str {
        let terms = [
            (self.tp_s, "tensor-parallel collectives"),
            (self.dp_exposed_s, "exposed data-parallel collectives"),
            (self.pp_s, "pipeline sends"),
            (self.bubble_s, "pipeline bubble"),
        ];
        let (t, name) = terms
            .into_iter()
            .fold((0.0, "compute"), |a, b| if b.0 > a.0 { b } else { a });
        match t > 0.02 * self.total_s() {
            true => name,
            false => "compute",
        }
    }
}

/// A layout that fits, with its prediction.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// The layout.
    pub setup: TrainingSetup,
    /// Its short name ([`describe`]).
    pub name: String,
    /// Predicted bytes per GPU (the busiest one).
    pub memory_bytes: f64,
    /// Predicted step.
    pub time: StepTime,
    /// Model FLOPs utilisation against the precision's matmul peak.
    pub mfu: f64,
    /// Hardware FLOPs utilisation: recomputed FLOPs counted too (what Megatron-LM's
    /// tables report as a percentage of peak).
    pub hfu: f64,
    /// Cluster throughput, tokens/s.
    pub tokens_per_s: f64,
}

/// The search's result.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Layouts that fit, fastest first (ties: less memory first).
    pub candidates: Vec<Candidate>,
    /// Layouts tried.
    pub considered: usize,
    /// Why the others were discarded: `(reason, how many, one example)`.
    pub rejected: Vec<(String, usize, String)>,
}

/// `dp 8 × tp 8 × pp 4, sp, zero 1, selective, b 1 × m 16, 1f1b, mixed`.
pub fn describe(s: &TrainingSetup) -> String {
    let mut out = format!("dp {} × tp {} × pp {}", s.dp, s.tp, s.pp);
    if s.sequence_parallel {
        out.push_str(", sp");
    }
    if s.zero_stage > 0 {
        out.push_str(&format!(", zero {}", s.zero_stage));
    }
    out.push_str(match s.recompute {
        Recompute::None => "",
        Recompute::Selective => ", selective",
        Recompute::Full => ", full recompute",
    });
    out.push_str(&format!(", b {} × m {}", s.micro_batch, s.grad_accum));
    if s.pp > 1 {
        out.push_str(&match s.schedule {
            PipelineSchedule::GPipe => ", gpipe".to_string(),
            PipelineSchedule::OneFOneB => ", 1f1b".to_string(),
            PipelineSchedule::Interleaved { chunks } => format!(", interleaved:{chunks}"),
        });
    }
    out.push_str(match s.precision {
        Precision::Mixed => ", mixed",
        Precision::Fp32 => ", fp32",
    });
    out
}

/// Searches every layout of `inp` and ranks those that fit.
pub fn plan(inp: &PlanInputs) -> Result<Plan> {
    check(inp)?;
    let mut candidates = Vec::new();
    let mut rejected: Vec<(String, usize, String)> = Vec::new();
    let layouts = layouts(inp);
    for setup in &layouts {
        match evaluate(inp, setup) {
            Ok(Ok(c)) => candidates.push(c),
            Ok(Err(reason)) => match rejected.iter_mut().find(|r| r.0 == reason) {
                Some(r) => r.1 += 1,
                None => rejected.push((reason, 1, describe(setup))),
            },
            Err(e) => return Err(e),
        }
    }
    candidates.sort_by(|a, b| {
        let t = a.time.total_s().total_cmp(&b.time.total_s());
        t.then(a.memory_bytes.total_cmp(&b.memory_bytes))
    });
    rejected.sort_by_key(|r| std::cmp::Reverse(r.1));
    Ok(Plan {
        candidates,
        considered: layouts.len(),
        rejected,
    })
}

fn check(inp: &PlanInputs) -> Result<()> {
    inp.model.validate()?;
    for (name, v) in [
        ("GPUs", inp.cluster.gpus),
        ("global batch", inp.global_batch),
        ("largest micro-batch", inp.max_micro_batch),
    ] {
        if v == 0 {
            return Err(PerfError::Invalid(format!("{name} must be at least 1")));
        }
    }
    for (name, v) in [("efficiency", inp.efficiency), ("headroom", inp.headroom)] {
        if !(v > 0.0 && v <= 1.0) {
            return Err(PerfError::OutOfRange {
                name,
                value: v,
                expected: "in (0, 1]",
            });
        }
    }
    match inp.precisions.is_empty() {
        true => Err(PerfError::Invalid("no precision to try".into())),
        false => Ok(()),
    }
}

/// Every layout the search tries: degrees that divide the model and the batch, then
/// every option on top of them.
pub fn layouts(inp: &PlanInputs) -> Vec<TrainingSetup> {
    let (m, n) = (&inp.model, inp.cluster.gpus);
    let mut out = Vec::new();
    for tp in divisors(n) {
        let tp_ok = tp <= inp.cluster.gpus_per_node
            && m.heads.is_multiple_of(tp)
            && m.ffn_hidden.is_multiple_of(tp);
        if !tp_ok {
            continue;
        }
        for pp in divisors(n / tp).filter(|&p| m.layers.is_multiple_of(p)) {
            let dp = n / tp / pp;
            if !inp.global_batch.is_multiple_of(dp) {
                continue;
            }
            let base = TrainingSetup {
                dp,
                tp,
                pp,
                optimizer: Optimizer::Adam,
                ..TrainingSetup::default()
            };
            options(inp, base, &mut out);
        }
    }
    out
}

/// The options on top of a `dp × tp × pp` grid.
fn options(inp: &PlanInputs, base: TrainingSetup, out: &mut Vec<TrainingSetup>) {
    let rows = inp.global_batch / base.dp;
    let sps: &[bool] = if base.tp > 1 {
        &[false, true]
    } else {
        &[false]
    };
    // brrr's pipeline refuses ZeRO 2-3: gradients live until the step ends anyway.
    let zeros: &[u8] = match (base.dp, base.pp) {
        (1, _) => &[0],
        (_, 1) => &[0, 1, 2, 3],
        _ => &[0, 1],
    };
    for b in divisors(rows).filter(|&b| b <= inp.max_micro_batch) {
        let m = rows / b;
        for schedule in schedules(&inp.model, base.pp, m) {
            for &sp in sps {
                for &zero in zeros {
                    for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                        for &precision in &inp.precisions {
                            out.push(TrainingSetup {
                                micro_batch: b,
                                grad_accum: m,
                                sequence_parallel: sp,
                                zero_stage: zero,
                                recompute,
                                schedule,
                                precision,
                                ..base.clone()
                            });
                        }
                    }
                }
            }
        }
    }
}

/// 1F1B, and interleaved with two chunks per stage where the layers and the
/// micro-batches allow it (Megatron-LM needs `m` a multiple of `p`).
fn schedules(model: &TransformerConfig, pp: u64, m: u64) -> Vec<PipelineSchedule> {
    let mut s = vec![PipelineSchedule::OneFOneB];
    if pp > 1 && model.layers.is_multiple_of(2 * pp) && m.is_multiple_of(pp) {
        s.push(PipelineSchedule::Interleaved { chunks: 2 });
    }
    s
}

fn divisors(n: u64) -> impl Iterator<Item = u64> {
    (1..=n).filter(move |d| n.is_multiple_of(*d))
}

/// The candidate, or why it is discarded; an error only for inputs no layout could use.
pub fn evaluate(
    inp: &PlanInputs,
    s: &TrainingSetup,
) -> Result<std::result::Result<Candidate, String>> {
    let mem = match estimate_memory(&inp.model, s) {
        Ok(m) => m,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let budget = inp.headroom * inp.cluster.gpu.memory_bytes;
    if mem.total() > budget {
        return Ok(Err(format!(
            "does not fit in {:.0}% of {:.0} GiB",
            inp.headroom * 100.0,
            inp.cluster.gpu.memory_bytes / GIB
        )));
    }
    let time = predict(inp, s)?;
    let tokens = (inp.global_batch * inp.model.seq_len) as f64;
    let peak = peak(&inp.cluster.gpu, s.precision)?;
    let model_flops = model_flops_per_token(&inp.model)? * tokens;
    let hardware_flops = hardware_flops_per_token(&inp.model, s.recompute)? * tokens;
    let total = time.total_s();
    let peak_all = total * inp.cluster.gpus as f64 * peak;
    Ok(Ok(Candidate {
        name: describe(s),
        setup: s.clone(),
        memory_bytes: mem.total(),
        mfu: model_flops / peak_all,
        hfu: hardware_flops / peak_all,
        tokens_per_s: tokens / total,
        time,
    }))
}

const GIB: f64 = (1u64 << 30) as f64;

/// The matmul peak of a precision: bf16 tensor cores for mixed precision, fp32 for fp32.
pub(crate) fn peak(gpu: &GpuSpec, p: Precision) -> Result<f64> {
    let dtype = match p {
        Precision::Mixed => DType::Bf16,
        Precision::Fp32 => DType::F32,
    };
    Ok(gpu.matmul_peak(dtype)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs::gpu;

    fn inputs(model: &str, gpus: u64, batch: u64) -> PlanInputs {
        let cluster = Cluster::new(gpu("h100").unwrap(), gpus).unwrap();
        PlanInputs::new(TransformerConfig::preset(model).unwrap(), cluster, batch)
    }

    #[test]
    fn every_layout_uses_every_gpu_and_the_whole_batch() {
        let inp = inputs("gpt3-1.3b", 16, 64);
        let all = layouts(&inp);
        assert!(all.len() > 100, "{}", all.len());
        for s in &all {
            assert_eq!(s.dp * s.tp * s.pp, 16, "{}", describe(s));
            assert_eq!(s.dp * s.micro_batch * s.grad_accum, 64, "{}", describe(s));
        }
    }

    #[test]
    fn a_small_model_on_one_node_prefers_data_parallelism() {
        let p = plan(&inputs("gpt3-1.3b", 8, 256)).unwrap();
        let best = &p.candidates[0];
        assert_eq!((best.setup.tp, best.setup.pp), (1, 1), "{}", best.name);
        assert!(best.mfu > 0.3 && best.mfu <= 0.6, "{}", best.mfu);
    }

    #[test]
    fn a_175b_model_fits_only_split_or_fully_sharded_and_says_why_the_rest_do_not() {
        let p = plan(&inputs("gpt3-175b", 1024, 1536)).unwrap();
        let best = &p.candidates[0];
        assert!(best.memory_bytes <= 0.9 * 80e9, "{}", best.memory_bytes);
        // 175e9 parameters at 16 bytes each of model states need ZeRO-3 or a split.
        for c in &p.candidates {
            let split = c.setup.tp * c.setup.pp > 1 || c.setup.zero_stage == 3;
            assert!(split, "{}", c.name);
        }
        assert!(p.rejected.iter().any(|r| r.0.contains("does not fit")));
    }

    #[test]
    fn the_bubble_shrinks_with_more_micro_batches() {
        let inp = inputs("gpt3-6.7b", 8, 64);
        let s = |m| TrainingSetup {
            pp: 8,
            micro_batch: 64 / m,
            grad_accum: m,
            ..TrainingSetup::default()
        };
        let (few, many) = (
            predict(&inp, &s(8)).unwrap(),
            predict(&inp, &s(64)).unwrap(),
        );
        assert!(few.bubble_s / few.compute_s > 0.8, "{few:?}");
        assert!(many.bubble_s / many.compute_s < 0.12, "{many:?}");
    }

    #[test]
    fn bad_inputs_are_errors() {
        let mut inp = inputs("gpt2", 8, 8);
        inp.efficiency = 1.5;
        assert!(plan(&inp).is_err());
        let mut inp = inputs("gpt2", 8, 8);
        inp.global_batch = 0;
        assert!(plan(&inp).is_err());
    }
}
