//! Reports for the `brrr roofline` and `brrr estimate` commands: the computations wired
//! together, rendered as readable text tables, as JSON for scripts, and as SVG plots.
//!
//! The CLI only parses flags into the inputs below and prints what comes back, so the same
//! reports are available to the web app and to tests.

use crate::comms::{self, Algorithm, Collective, Link};
use crate::error::{PerfError, Result, at_least_one, positive};
use crate::flops;
use crate::memory::{
    MemoryBreakdown, Optimizer, Precision, Recompute, TransformerConfig, model_state_bytes,
};
use crate::plot;
use crate::roofline::{self, Classification, OpCost, Prediction, Roofline};
use crate::specs::{DType, GpuSpec, Unit};
use crate::table::{self, Table};
use serde::Serialize;
use serde_json::{Value, json};
use std::fmt;

/// A rendered report: titled tables and notes for people, a JSON value for scripts.
#[derive(Debug, Clone)]
pub struct Report {
    /// Heading.
    pub title: String,
    /// Body, in order.
    pub blocks: Vec<Block>,
    /// Machine-readable form of the same content.
    pub json: Value,
}

/// One piece of a report.
#[derive(Debug, Clone)]
pub enum Block {
    /// A titled table.
    Table(String, Table),
    /// A line of prose (a conclusion, a formula, a warning).
    Note(String),
}

impl Report {
    pub(crate) fn new(title: impl Into<String>, json: Value) -> Self {
        Self {
            title: title.into(),
            blocks: Vec::new(),
            json,
        }
    }

    pub(crate) fn table(&mut self, title: impl Into<String>, t: Table) {
        self.blocks.push(Block::Table(title.into(), t));
    }

    pub(crate) fn note(&mut self, n: impl Into<String>) {
        self.blocks.push(Block::Note(n.into()));
    }

    /// The JSON form, pretty-printed.
    pub fn to_json_string(&self) -> String {
        serde_json::to_string_pretty(&self.json).unwrap_or_else(|_| "null".into())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.title)?;
        writeln!(f, "{}", "=".repeat(self.title.chars().count()))?;
        for b in &self.blocks {
            match b {
                Block::Table(title, t) => {
                    writeln!(f)?;
                    if !title.is_empty() {
                        writeln!(f, "{title}")?;
                    }
                    write!(f, "{t}")?;
                }
                Block::Note(n) => {
                    writeln!(f)?;
                    writeln!(f, "{n}")?;
                }
            }
        }
        Ok(())
    }
}

fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Says which byte units a report uses: capacities binary, traffic and bandwidth decimal.
const UNITS_NOTE: &str =
    "Units: memory capacities in GiB/MiB (2^30/2^20 bytes), bandwidths in GB/s (1e9 bytes/s).";

fn opt_bw(b: Option<f64>) -> String {
    b.map(table::bandwidth).unwrap_or_else(|| "-".into())
}

/// One row per GPU: the headline numbers of the spec table.
pub fn gpu_list(gpus: &[GpuSpec]) -> Report {
    let mut t = Table::new([
        "id",
        "bf16/fp16 TC",
        "fp32",
        "HBM BW",
        "memory",
        "SMs",
        "L2",
        "NVLink",
        "net/GPU",
        "ridge bf16",
    ]);
    for g in gpus {
        let tc = g
            .matmul_peak(DType::Bf16)
            .or_else(|_| g.matmul_peak(DType::F16))
            .ok();
        t.row([
            g.id.clone(),
            tc.map(|(p, _)| table::peak_flops_per_s(p))
                .unwrap_or_else(|| "-".into()),
            g.peak(DType::F32, Unit::Vector)
                .map(table::flops_per_s)
                .unwrap_or_else(|_| "-".into()),
            table::bandwidth(g.memory_bandwidth),
            table::bytes_binary(g.memory_bytes),
            g.sm_count.to_string(),
            g.l2_bytes
                .map(table::bytes_binary)
                .unwrap_or_else(|| "-".into()),
            opt_bw(g.nvlink_bandwidth),
            opt_bw(g.network_bandwidth),
            tc.map(|(p, _)| format!("{} FLOP/B", table::sig3(p / g.memory_bandwidth)))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut r = Report::new(
        "GPU specs (dense peaks; NVLink bidirectional; network per GPU, one way)",
        to_json(&gpus),
    );
    r.table("", t);
    r.note(UNITS_NOTE);
    r.note("Sources: NVIDIA datasheets and architecture whitepapers, cited per entry in brrr-perf's specs.rs.");
    r
}

/// Whether a spec is the measured CPU rather than a GPU.
fn is_cpu(g: &GpuSpec) -> bool {
    g.id == "this-machine"
}

/// Every peak of one GPU with its ridge point.
pub fn gpu_detail(g: &GpuSpec) -> Report {
    let mut t = Table::new(["dtype", "unit", "peak", "ridge point"]);
    for p in &g.peaks {
        t.row([
            p.dtype.to_string(),
            if is_cpu(g) {
                "SIMD units".to_string()
            } else {
                p.unit.to_string()
            },
            table::peak_flops_per_s(p.flops),
            format!("{} FLOP/B", table::sig3(p.flops / g.memory_bandwidth)),
        ]);
    }
    let mut r = Report::new(format!("{} ({})", g.name, g.architecture), to_json(g));
    if is_cpu(g) {
        r.note(format!(
            "memory {} at {} (measured, STREAM triad), {} cores",
            table::bytes_binary(g.memory_bytes),
            table::bandwidth(g.memory_bandwidth),
            g.sm_count
        ));
        r.table(
            "Theoretical peaks and ridge points (peak / measured bandwidth)",
            t,
        );
        r.note(format!("Source: {}", g.source));
        return r;
    }
    r.note(format!(
        "memory {} at {}, {} SMs, L2 {}, NVLink {}, PCIe {}, network {} per GPU, {} GPUs per node",
        table::bytes_binary(g.memory_bytes),
        table::bandwidth(g.memory_bandwidth),
        g.sm_count,
        g.l2_bytes
            .map(table::bytes_binary)
            .unwrap_or_else(|| "-".into()),
        opt_bw(g.nvlink_bandwidth),
        opt_bw(g.pcie_bandwidth),
        opt_bw(g.network_bandwidth),
        g.gpus_per_node
    ));
    r.table("Dense peaks and ridge points (peak / HBM bandwidth)", t);
    r.note(UNITS_NOTE);
    r.note(format!("Source: {}", g.source));
    r
}

/// Ops placed on a GPU's roofline, with optional measured times.
#[derive(Debug, Clone, Serialize)]
pub struct RooflineAnalysis {
    /// GPU id.
    pub gpu: String,
    /// Compute dtype.
    pub dtype: DType,
    /// The rooflines of this dtype (tensor and vector where both exist).
    pub rooflines: Vec<Roofline>,
    /// One prediction per op, each under the roofline it runs on.
    pub predictions: Vec<Prediction>,
    /// Classifications of the ops that came with a measured time.
    pub measured: Vec<Classification>,
    /// Tile/wave quantization of each GEMM (128×128 tiles, one per SM), by op index.
    pub quantization: Vec<(usize, roofline::GemmQuantization)>,
}

/// Places `ops` on `gpu`'s roofline for `dtype`. `unit` forces tensor or vector cores; by
/// default matmuls use tensor cores and the rest vector units. `measured_s[i]`, if present,
/// is op `i`'s measured time in seconds.
pub fn roofline_analysis(
    gpu: &GpuSpec,
    dtype: DType,
    unit: Option<Unit>,
    ops: &[OpCost],
    measured_s: &[Option<f64>],
) -> Result<RooflineAnalysis> {
    if measured_s.len() > ops.len() {
        return Err(PerfError::Invalid(format!(
            "{} measured times for {} ops: give one --op per measured time",
            measured_s.len(),
            ops.len()
        )));
    }
    let mut rooflines = Vec::new();
    for u in [Unit::Tensor, Unit::Vector] {
        if let Ok(r) = Roofline::for_gpu(gpu, dtype, u) {
            rooflines.push(r);
        }
    }
    if rooflines.is_empty() {
        // No peak in this dtype at all (e.g. bf16 on V100): say so rather than guess.
        gpu.peak(dtype, Unit::Vector)?;
    }
    let mut predictions = Vec::new();
    let mut measured = Vec::new();
    let mut quantization = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let r = match unit {
            Some(u) => Roofline::for_gpu(gpu, dtype, u)?,
            None => Roofline::for_op(gpu, op, dtype)?,
        };
        predictions.push(r.predict(op));
        if let Some(Some(t)) = measured_s.get(i) {
            measured.push(r.classify(op, *t)?);
        }
        if let Some([_, m, n, _]) = op.gemm_shape {
            quantization.push((
                i,
                roofline::gemm_quantization(m, n, 128, 128, u64::from(gpu.sm_count), 1)?,
            ));
        }
    }
    Ok(RooflineAnalysis {
        gpu: gpu.id.clone(),
        dtype,
        rooflines,
        predictions,
        measured,
        quantization,
    })
}

impl RooflineAnalysis {
    /// The text/JSON report.
    pub fn report(&self) -> Report {
        let mut r = Report::new(
            format!("Roofline: {} {}", self.gpu, self.dtype),
            to_json(self),
        );
        let mut roofs = Table::new(["roofline", "peak", "bandwidth", "ridge point"]);
        for rl in &self.rooflines {
            roofs.row([
                rl.label.clone(),
                table::peak_flops_per_s(rl.peak_flops),
                table::bandwidth(rl.bandwidth),
                format!("{} FLOP/B", table::sig3(rl.ridge())),
            ]);
        }
        r.table("Ceilings", roofs);
        r.note("Units: bytes and bandwidths decimal (GB = 1e9 bytes, GB/s = 1e9 bytes/s).");
        if !self.predictions.is_empty() {
            let mut t = Table::new([
                "op",
                "FLOPs",
                "min bytes",
                "intensity",
                "compute",
                "memory",
                "predicted",
                "attainable",
                "regime",
            ]);
            for p in &self.predictions {
                t.row([
                    p.op.name.clone(),
                    table::flops(p.op.flops),
                    table::bytes(p.op.bytes),
                    format!("{} FLOP/B", table::sig3(p.intensity)),
                    table::duration(p.compute_s),
                    table::duration(p.memory_s),
                    table::duration(p.time_s),
                    table::flops_per_s(p.attainable_flops),
                    p.regime.to_string(),
                ]);
            }
            r.table("Predicted: time = max(FLOPs / peak, bytes / bandwidth)", t);
        }
        if !self.measured.is_empty() {
            let mut t = Table::new([
                "op",
                "measured",
                "achieved",
                "of compute peak",
                "achieved BW",
                "of bandwidth",
                "overhead",
                "regime",
            ]);
            for c in &self.measured {
                t.row([
                    c.predicted.op.name.clone(),
                    table::duration(c.measured_s),
                    table::flops_per_s(c.achieved_flops),
                    table::percent(c.compute_fraction),
                    table::bandwidth(c.achieved_bandwidth),
                    table::percent(c.memory_fraction),
                    table::duration(c.overhead_s.max(0.0)),
                    c.regime.to_string(),
                ]);
                if c.faster_than_roofline {
                    r.note(format!(
                        "warning: {} ran faster than the roofline allows: the data likely came from L2, or the \
                         FLOP/byte counts are too high",
                        c.predicted.op.name
                    ));
                }
            }
            r.table(
                format!(
                    "Measured (overhead-bound = under {} of both ceilings)",
                    table::percent(roofline::OVERHEAD_THRESHOLD)
                ),
                t,
            );
        }
        if !self.quantization.is_empty() {
            r.table(
                "GEMM tile and wave quantization (128x128 tiles, 1 per SM)",
                self.quantization_table(),
            );
        }
        r
    }

    /// Tile and wave efficiency of each GEMM, and the dimensions to pad for tensor cores.
    fn quantization_table(&self) -> Table {
        let mut t = Table::new([
            "op",
            "tiles",
            "tile efficiency",
            "waves",
            "wave efficiency",
            "alignment",
        ]);
        for (i, q) in &self.quantization {
            let op = &self.predictions[*i].op;
            let align = roofline::tensor_core_alignment(self.dtype);
            let misaligned: Vec<String> = op
                .gemm_shape
                .map(|[_, m, n, k]| {
                    [("m", m), ("n", n), ("k", k)]
                        .into_iter()
                        .filter(|(_, d)| !roofline::is_tensor_core_aligned(*d, self.dtype))
                        .map(|(name, d)| {
                            format!("{name}={d}→{}", roofline::round_up(d, 64).unwrap_or(d))
                        })
                        .collect()
                })
                .unwrap_or_default();
            t.row([
                op.name.clone(),
                format!("{}x{}={}", q.tiles_m, q.tiles_n, q.tiles),
                table::percent(q.tile_efficiency),
                format!("{:.2}", q.waves),
                table::percent(q.wave_efficiency),
                if misaligned.is_empty() {
                    format!("ok (multiples of {align})")
                } else {
                    format!("pad {}", misaligned.join(", "))
                },
            ]);
        }
        t
    }

    /// The SVG roofline plot with the ops on it.
    pub fn svg(&self) -> Result<String> {
        plot::roofline_svg(
            &format!("Roofline: {} {}", self.gpu, self.dtype),
            &self.rooflines,
            &self.predictions,
            &self.measured,
        )
    }
}

/// The memory breakdown as a report; with a GPU, whether it fits.
pub fn memory_report(m: &MemoryBreakdown, gpu: Option<&GpuSpec>) -> Report {
    let total = m.total();
    let fits = gpu.map(|g| total <= g.memory_bytes);
    let mut r = Report::new(
        "Training memory per GPU (first pipeline stage)",
        json!({"breakdown": to_json(m), "total_bytes": total, "activations_bytes": m.activations(),
               "gpu": gpu.map(|g| g.id.clone()), "capacity_bytes": gpu.map(|g| g.memory_bytes), "fits": fits}),
    );
    let s = &m.setup;
    let c = &m.model;
    r.note(format!(
        "model: {} params (l={}, h={}, a={}, s={}, V={}); {} params per GPU shard",
        table::count(m.params_total),
        c.layers,
        c.hidden,
        c.heads,
        c.seq_len,
        c.vocab,
        table::count(m.params_per_gpu)
    ));
    r.note(format!(
        "layout: {} GPUs = DP {} × TP {} × PP {}{}; ZeRO-{}; {:?} precision, {:?}; recompute {:?}; \
         micro-batch {}, {} micro-batches/step → global batch {} seqs ({} tokens)",
        m.gpus,
        s.dp,
        s.tp,
        s.pp,
        if s.sequence_parallel { " + SP" } else { "" },
        s.zero_stage,
        s.precision,
        s.optimizer,
        s.recompute,
        s.micro_batch,
        s.grad_accum,
        m.global_batch,
        table::count(m.tokens_per_step as f64)
    ));
    let rows: Vec<_> = m
        .rows()
        .into_iter()
        .filter(|(label, b)| *b > 0.0 || !label.starts_with("ZeRO"))
        .collect();
    r.table("", memory_table(&rows, total));
    if let Some(rank) = s.lora_rank {
        r.note(format!(
            "LoRA rank {rank}: {} adapter parameters trained ({} of the shard's), every weight \
             frozen (Hu et al. 2021)",
            table::count(m.trained_params),
            table::percent(m.trained_params / m.params_per_gpu)
        ));
    }
    if s.offload {
        r.note(format!(
            "offload: {} of f32 master weights and optimizer states in host memory, not on \
             the GPU (ZeRO-Offload, Ren et al. 2021)",
            table::bytes_binary(m.offloaded)
        ));
    }
    r.note(format!(
        "activations: {} per layer per micro-batch × {} layers × {} micro-batches in flight + {} outside the layers \
         (Korthikanti et al. 2022, Table 2 and Section 4.3)",
        table::bytes_binary(m.activations_per_layer),
        m.layers_per_stage,
        table::sig3(m.microbatches_in_flight),
        table::bytes_binary(m.activations_other)
    ));
    if let Some(g) = gpu {
        r.note(format!(
            "{}: {} of {} ({}) — {}. Not counted: CUDA context, allocator fragmentation, workspaces (~1-3 GiB).",
            g.id,
            table::bytes_binary(total),
            table::bytes_binary(g.memory_bytes),
            table::percent(total / g.memory_bytes),
            if total <= g.memory_bytes { "fits" } else { "does NOT fit" }
        ));
    }
    r
}

/// The memory breakdown's table: `(component, bytes)` rows, their shares of `total`,
/// and a total row.
fn memory_table(rows: &[(&str, f64)], total: f64) -> Table {
    let mut t = Table::new([
        "component",
        "memory (binary: MiB = 2^20, GiB = 2^30 bytes)",
        "share",
    ]);
    let share = |b: f64| table::percent(if total > 0.0 { b / total } else { 0.0 });
    for &(label, b) in rows {
        t.row([label.to_string(), table::bytes_binary(b), share(b)]);
    }
    t.row([
        "total".to_string(),
        table::bytes_binary(total),
        "100.0%".into(),
    ]);
    t
}

/// Model-state memory per GPU of `params` parameters with no shape known: weights,
/// gradients, master weights and optimizer states under ZeRO `zero_stage` over `dp`
/// ranks ([`crate::memory::model_state_bytes`]). Activations need the model's shape and
/// are left out, which the report says.
pub fn model_states_report(
    params: f64,
    precision: Precision,
    optimizer: Optimizer,
    zero_stage: u8,
    dp: u64,
    gpu: Option<&GpuSpec>,
) -> Result<Report> {
    let m = model_state_bytes(params, precision, optimizer, zero_stage, dp)?;
    let total = m.total();
    let mut r = Report::new(
        "Model-state memory per GPU",
        json!({"params": params, "states": to_json(&m), "total_bytes": total,
               "gpu": gpu.map(|g| g.id.clone()), "capacity_bytes": gpu.map(|g| g.memory_bytes),
               "fits": gpu.map(|g| total <= g.memory_bytes), "activations_bytes": Value::Null}),
    );
    r.note(format!(
        "{} params; DP {dp}, ZeRO-{zero_stage}; {precision:?} precision, {optimizer:?}",
        table::count(params)
    ));
    let rows = [
        ("weights", m.weights),
        ("gradients", m.gradients),
        ("master weights", m.master_weights),
        ("optimizer states", m.optimizer_states),
    ];
    r.table("", memory_table(&rows, total));
    r.note(
        "Activations are not counted: --params gives no shape. Give the model (--model \
         PRESET, or --layers/--hidden/--heads) for them and for tensor and pipeline \
         parallelism.",
    );
    if let Some(g) = gpu {
        r.note(format!(
            "{}: the model states alone take {} of {} ({}).",
            g.id,
            table::bytes_binary(total),
            table::bytes_binary(g.memory_bytes),
            table::percent(total / g.memory_bytes),
        ));
    }
    Ok(r)
}

/// The SVG memory bar.
pub fn memory_svg(m: &MemoryBreakdown, gpu: Option<&GpuSpec>) -> Result<String> {
    let title = format!(
        "Memory per GPU: {} params, DP{} TP{} PP{}, ZeRO-{}",
        table::count(m.params_total),
        m.setup.dp,
        m.setup.tp,
        m.setup.pp,
        m.setup.zero_stage
    );
    plot::memory_svg(&title, m, gpu.map(|g| g.memory_bytes))
}

/// Inputs of the time/efficiency estimate.
#[derive(Debug, Clone)]
pub struct TimeInputs {
    /// Parameters `N` for `6ND` (from the model when one is given).
    pub params: f64,
    /// Training tokens `D`.
    pub tokens: f64,
    /// The architecture, for the attention term, Megatron's formula and HFU.
    pub model: Option<TransformerConfig>,
    /// The GPU.
    pub gpu: GpuSpec,
    /// Compute dtype (its matmul peak is the MFU denominator).
    pub dtype: DType,
    /// GPUs in the cluster.
    pub gpus: u64,
    /// Assumed MFU for the time-to-train.
    pub mfu: f64,
    /// A measured step time, seconds, with `tokens_per_step`, for measured MFU/HFU.
    pub step_time_s: Option<f64>,
    /// Tokens per optimizer step (global batch × sequence length).
    pub tokens_per_step: Option<f64>,
    /// A measured cluster throughput in tokens/s (alternative to a step time).
    pub tokens_per_s: Option<f64>,
    /// Recomputation in the measured run, for HFU.
    pub recompute: Recompute,
}

/// Training FLOPs, time-to-train at an MFU, and (given a measurement) achieved MFU/HFU.
pub fn time_report(inp: &TimeInputs) -> Result<Report> {
    let (peak, unit) = inp.gpu.matmul_peak(inp.dtype)?;
    let est = flops::estimate_time(
        inp.params,
        inp.tokens,
        inp.model.as_ref(),
        inp.gpus,
        peak,
        inp.mfu,
    )?;
    let mut j =
        json!({"estimate": to_json(&est), "gpu": inp.gpu.id, "dtype": inp.dtype, "unit": unit});
    let (t, counted) = estimate_table(inp, &est, peak, unit);
    let mut r = Report::new(
        format!("Training time on {} × {}", inp.gpus, inp.gpu.id),
        Value::Null,
    );
    r.table("", t);
    j["flops_counted"] = json!(counted);
    if est.flops_with_attention.is_none() {
        r.note(
            "Attention's FLOPs are not counted: --params gives no shape. A model (--model \
             PRESET, or --layers/--hidden/--seq-len) adds PaLM's 12·l·s·h per token, as MFU \
             counts it: about s/(6h) more time for a GPT (N ≈ 12·l·h²), 3% for GPT-3 175B, \
             22% for GPT-2 small.",
        );
    }
    if let Some(tps) = measured_tokens_per_s(inp)? {
        let (m, mj, mfu) = measured_table(inp, tps, peak)?;
        r.table("Measured", m);
        if mfu > 1.0 {
            r.note(format!(
                "warning: MFU above 100%: {} GPUs cannot compute that fast; check the \
                 measurement, --gpus and --dtype",
                inp.gpus
            ));
        }
        j["measured"] = mj;
    }
    r.json = j;
    Ok(r)
}

/// The estimate's table (parameters, tokens, FLOPs, peak, time, throughput) and which
/// FLOPs the time counts.
fn estimate_table(
    inp: &TimeInputs,
    est: &flops::TimeEstimate,
    peak: f64,
    unit: crate::specs::Unit,
) -> (Table, &'static str) {
    let mut t = Table::new(["quantity", "value", "formula"]);
    t.row([
        "parameters N".to_string(),
        format!("{} params", table::count(est.params)),
        String::new(),
    ]);
    t.row([
        "tokens D".to_string(),
        format!("{} tokens", table::count(est.tokens)),
        String::new(),
    ]);
    t.row([
        "training FLOPs".to_string(),
        table::flops(est.flops_6nd),
        "6·N·D (Kaplan et al. 2020)".into(),
    ]);
    if let Some(f) = est.flops_with_attention {
        t.row([
            "  with attention".to_string(),
            table::flops(f),
            "+ 12·l·s·h·D (PaLM, App. B)".into(),
        ]);
    }
    t.row([
        "cluster peak".to_string(),
        table::flops_per_s(peak * inp.gpus as f64),
        format!(
            "{} × {} ({} {})",
            inp.gpus,
            table::peak_flops_per_s(peak),
            inp.dtype,
            unit
        ),
    ]);
    // The time counts the attention term whenever the shape is known, as the MFU below
    // does (PaLM's convention); with --params alone it cannot, and says so rather than
    // giving the same model two different times silently.
    let counted = match est.flops_with_attention {
        Some(_) => "(6·N·D + attention)",
        None => "6·N·D",
    };
    t.row([
        format!("time at {} MFU", table::percent(inp.mfu)),
        table::duration(est.seconds),
        format!("{counted} / (GPUs × peak × MFU)"),
    ]);
    t.row([
        "throughput".to_string(),
        format!("{} tokens/s", table::count(est.tokens_per_s)),
        format!(
            "{} tokens/s per GPU",
            table::count(est.tokens_per_s / inp.gpus as f64)
        ),
    ]);
    (t, counted)
}

/// The measured cluster throughput, from a step time and its tokens or given directly;
/// `None` without a measurement.
fn measured_tokens_per_s(inp: &TimeInputs) -> Result<Option<f64>> {
    match (inp.step_time_s, inp.tokens_per_step, inp.tokens_per_s) {
        (Some(st), Some(tps), _) => Ok(Some(
            positive("tokens per step", tps)? / positive("step time", st)?,
        )),
        (None, None, Some(t)) => Ok(Some(positive("tokens/s", t)?)),
        (Some(_), None, _) => Err(PerfError::Invalid(
            "a step time needs the tokens per step (--batch-tokens)".into(),
        )),
        (None, Some(_), _) => Err(PerfError::Invalid(
            "tokens per step need a measured step time (--step-time)".into(),
        )),
        (None, None, None) => Ok(None),
    }
}

/// The "Measured" table at `tps` tokens/s: achieved FLOPs, MFU, and with a model HFU
/// and Megatron's per-iteration count; its JSON and the MFU.
fn measured_table(inp: &TimeInputs, tps: f64, peak: f64) -> Result<(Table, Value, f64)> {
    let flops_per_token = match &inp.model {
        Some(c) => flops::model_flops_per_token(c)?,
        None => 6.0 * inp.params,
    };
    let achieved = flops::tokens_per_s_to_flops(tps, flops_per_token)?;
    let mfu = achieved / (peak * inp.gpus as f64);
    let mut m = Table::new(["quantity", "value", "formula"]);
    m.row([
        "throughput".to_string(),
        format!("{} tokens/s", table::count(tps)),
        format!("{} tokens/s per GPU", table::count(tps / inp.gpus as f64)),
    ]);
    m.row([
        "model FLOPs per token".to_string(),
        table::flops(flops_per_token),
        if inp.model.is_some() {
            "6·N + 12·l·s·h"
        } else {
            "6·N"
        }
        .into(),
    ]);
    m.row([
        "achieved per GPU".to_string(),
        table::flops_per_s(achieved / inp.gpus as f64),
        "tokens/s × FLOPs/token / GPUs".into(),
    ]);
    m.row([
        "MFU".to_string(),
        table::percent(mfu),
        "achieved / peak".into(),
    ]);
    let mut mj = json!({"tokens_per_s": tps, "model_flops_per_token": flops_per_token,
                        "achieved_flops_per_gpu": achieved / inp.gpus as f64, "mfu": mfu});
    if let Some(c) = &inp.model {
        let hw = flops::hardware_flops_per_token(c, inp.recompute)?;
        let hfu = tps * hw / (peak * inp.gpus as f64);
        m.row([
            "HFU".to_string(),
            table::percent(hfu),
            format!("incl. {:?} recomputation", inp.recompute),
        ]);
        mj["hfu"] = json!(hfu);
        if let Some(st) = inp.step_time_s {
            let batch = (tps * st / c.seq_len as f64).round().max(1.0) as u64;
            let f = flops::megatron_flops_per_iteration(
                batch, c.seq_len, c.layers, c.hidden, c.vocab, true,
            )?;
            let x = f / (st * inp.gpus as f64);
            m.row([
                "Megatron eq. (3)".to_string(),
                format!("{} per GPU", table::flops_per_s(x)),
                format!("96·B·s·l·h²(1 + s/6h + V/16lh), B={batch}"),
            ]);
            mj["megatron_flops_per_gpu"] = json!(x);
        }
    }
    Ok((m, mj, mfu))
}

/// Inputs of the communication report.
#[derive(Debug, Clone)]
pub struct CommsInputs {
    /// The GPU (its NVLink/PCIe and network bandwidths are used).
    pub gpu: GpuSpec,
    /// Ranks in the collective.
    pub gpus: u64,
    /// Message size in bytes (the full buffer).
    pub bytes: f64,
    /// Compute dtype for the peak `C`.
    pub dtype: DType,
    /// Model width `D` for the parallelism rooflines.
    pub d_model: Option<f64>,
    /// MLP width `F`.
    pub d_ff: Option<f64>,
    /// Tokens per GPU per step, to judge data parallelism.
    pub tokens_per_gpu: Option<f64>,
    /// Mixture of experts: (experts, top-k).
    pub moe: Option<(u64, u64)>,
    /// Latency override in seconds (else the defaults per level).
    pub alpha_s: Option<f64>,
}

/// Checks the comms inputs before any arithmetic, so that a bad flag is an error even when the
/// part of the report that uses it is not printed.
///
/// One GPU is an error rather than a table of zeros: a collective over one rank moves nothing
/// and takes 0 s, so its bandwidths (bytes / 0 s) are undefined.
fn validate_comms_inputs(inp: &CommsInputs) -> Result<()> {
    if inp.gpus < 2 {
        return Err(PerfError::OutOfRange {
            name: "GPUs",
            value: inp.gpus as f64,
            expected: "at least 2: a collective over one GPU communicates nothing (0 s)",
        });
    }
    if !(inp.bytes.is_finite() && inp.bytes >= 1.0) {
        return Err(PerfError::OutOfRange {
            name: "message bytes",
            value: inp.bytes,
            expected: "finite and at least 1 byte",
        });
    }
    for (name, v) in [
        ("d_model", inp.d_model),
        ("d_ff", inp.d_ff),
        ("tokens per GPU", inp.tokens_per_gpu),
    ] {
        if let Some(v) = v {
            positive(name, v)?;
        }
    }
    if let Some(a) = inp.alpha_s {
        Link::new(a, 1.0)?;
    }
    if let Some((e, k)) = inp.moe {
        at_least_one("experts", e)?;
        at_least_one("top-k", k)?;
        if k > e {
            return Err(PerfError::Invalid(format!(
                "top-k {k} exceeds the {e} experts"
            )));
        }
    }
    Ok(())
}

/// Collective costs at both levels (within a node, across nodes) and the parallelism
/// rooflines of the JAX scaling book's GPU chapter.
pub fn comms_report(inp: &CommsInputs) -> Result<Report> {
    validate_comms_inputs(inp)?;
    let g = &inp.gpu;
    let (c, _) = g.matmul_peak(inp.dtype)?;
    let node = u64::from(g.gpus_per_node.max(1));
    let mut r = Report::new(
        format!(
            "Communication on {} × {}: {} message",
            inp.gpus,
            g.id,
            table::bytes(inp.bytes)
        ),
        Value::Null,
    );
    let levels = comms_levels(inp, node, &mut r)?;
    let (t, rows) = collectives_table(inp, &levels)?;
    r.table(
        "Alpha-beta costs (algbw = bytes / time; busbw = algbw · 2(n−1)/n for all-reduce, \
         algbw · (n−1)/n for reduce-scatter, all-gather and all-to-all, algbw for broadcast: \
         nccl-tests PERFORMANCE.md)",
        t,
    );
    r.note("Units: message sizes in GB and bandwidths in GB/s, both decimal (1e9 bytes).");
    let (p, pj) = parallelism_table(inp, c, node)?;
    if !p.is_empty() {
        r.table(
            format!(
                "Parallelism rooflines (C = {} {}; Austin et al., scaling book ch. 12)",
                table::flops_per_s(c),
                inp.dtype
            ),
            p,
        );
    }
    r.json = json!({"gpu": g.id, "gpus": inp.gpus, "bytes": inp.bytes, "collectives": rows, "parallelism": pj});
    Ok(r)
}

/// The links the report prices: within a node, and across nodes when the ranks span
/// more than one (a note on `r` where the spec has no network figure).
fn comms_levels(inp: &CommsInputs, node: u64, r: &mut Report) -> Result<Vec<(&'static str, Link)>> {
    let g = &inp.gpu;
    let mut levels: Vec<(&str, Link)> = Vec::new();
    // Link::new checks the latency: a negative or NaN --alpha-us is an error, not a row.
    let with_alpha = |l: Link| Link::new(inp.alpha_s.unwrap_or(l.alpha_s), l.bandwidth);
    if let Ok(l) = Link::intra_node(g) {
        levels.push(("intra-node", with_alpha(l)?));
    }
    if inp.gpus > node {
        match Link::inter_node(g) {
            Ok(l) => levels.push(("inter-node", with_alpha(l)?)),
            Err(e) => r.note(format!("no inter-node figures: {e}")),
        }
    }
    if levels.is_empty() {
        return Err(PerfError::MissingSpec {
            gpu: g.name.clone(),
            what: "any interconnect bandwidth".into(),
        });
    }
    Ok(levels)
}

/// Every collective and algorithm at every level: the table and its JSON rows.
fn collectives_table(inp: &CommsInputs, levels: &[(&str, Link)]) -> Result<(Table, Vec<Value>)> {
    let mut rows = Vec::new();
    let mut t = Table::new([
        "level",
        "collective",
        "algorithm",
        "link BW",
        "α",
        "time",
        "algbw",
        "busbw",
    ]);
    for (level, link) in levels {
        for coll in Collective::ALL {
            for algo in [Algorithm::Ring, Algorithm::Tree] {
                let Ok(time) = comms::collective_time(coll, algo, inp.gpus, inp.bytes, *link)
                else {
                    continue;
                };
                // With n ≥ 2 ranks and at least a byte, every collective takes time > 0.
                let alg = comms::alg_bandwidth(inp.bytes, time)?;
                let bus = comms::bus_bandwidth(coll, inp.gpus, inp.bytes, time)?;
                t.row([
                    level.to_string(),
                    coll.name().to_string(),
                    format!("{algo:?}").to_lowercase(),
                    table::bandwidth(link.bandwidth),
                    table::duration(link.alpha_s),
                    table::duration(time),
                    table::bandwidth(alg),
                    table::bandwidth(bus),
                ]);
                rows.push(
                    json!({"level": level, "collective": coll, "algorithm": algo, "link": link,
                                  "time_s": time, "algbw": alg, "busbw": bus}),
                );
            }
        }
    }
    Ok((t, rows))
}

/// The parallelism rooflines (scaling book ch. 12) the inputs allow: the table and its
/// JSON.
fn parallelism_table(inp: &CommsInputs, c: f64, node: u64) -> Result<(Table, Value)> {
    let g = &inp.gpu;
    let w_gpu = g.intra_node_bandwidth().ok();
    let w_node = g.node_egress_bandwidth().ok();
    let mut p = Table::new(["condition", "value", "formula"]);
    let mut pj = json!({"peak_flops": c, "gpu_egress": w_gpu, "node_egress": w_node});
    if let Some(w) = w_gpu {
        let v = comms::dp_critical_tokens_per_gpu(c, w)?;
        p.row([
            "DP/FSDP within a node: min tokens per GPU".to_string(),
            format!("{v:.0}"),
            "C / W_gpu".into(),
        ]);
        pj["dp_min_tokens_intra"] = json!(v);
    }
    if let Some(w) = w_node {
        let v = comms::dp_critical_tokens_per_gpu(c, w)?;
        p.row([
            "DP/FSDP across nodes: min tokens per GPU".to_string(),
            format!("{v:.0}"),
            "C / W_node".into(),
        ]);
        pj["dp_min_tokens_inter"] = json!(v);
        if let Some((e, k)) = inp.moe {
            let v = comms::moe_dp_critical_tokens_per_gpu(c, w, e, k)?;
            p.row([
                format!("MoE DP (E={e}, k={k}) across nodes"),
                format!("{v:.0}"),
                "E/k · C / W_node".into(),
            ]);
            pj["moe_dp_min_tokens_inter"] = json!(v);
        }
    }
    if let (Some(f), Some(w)) = (inp.d_ff, w_gpu) {
        let v = comms::tp_max_degree(f, c, w)?;
        p.row([
            format!("TP within a node (F={f:.0}): max degree"),
            format!("{v:.1}"),
            "F · W_gpu / C".into(),
        ]);
        pj["tp_max_degree_intra"] = json!(v);
    }
    if let (Some(tpg), Some(d), Some(f)) = (inp.tokens_per_gpu, inp.d_model, inp.d_ff) {
        let w = if inp.gpus > node { w_node } else { w_gpu };
        if let Some(w) = w {
            let dp = comms::data_parallel(tpg, d, f, c, w)?;
            p.row([
                format!("DP with {tpg:.0} tokens/GPU (per MLP layer, backward)"),
                format!(
                    "{} math vs {} comms",
                    table::duration(dp.math_s),
                    table::duration(dp.comms_s)
                ),
                if dp.compute_bound {
                    "compute-bound"
                } else {
                    "COMMS-BOUND"
                }
                .into(),
            ]);
            pj["dp"] = to_json(&dp);
        }
    }
    if let (Some(d), Some(f), Some((_, k)), Some(w)) = (inp.d_model, inp.d_ff, inp.moe, w_node)
        && inp.gpus > node
    {
        let tokens = inp.tokens_per_gpu.unwrap_or(1.0) * inp.gpus as f64;
        let ep = comms::expert_parallel(tokens, d, f, k, inp.gpus, node, c, w)?;
        p.row([
            format!("EP over {} GPUs: min d_ff", inp.gpus),
            format!("{:.0}", ep.critical),
            "C/W · (Z−8)/k · min(8k/Z, 1)".into(),
        ]);
        pj["ep"] = to_json(&ep);
    }
    Ok((p, pj))
}

/// `brrr estimate serve`: the cache's bytes per token, the batch that fits, and the
/// decode step at each batch size against the roofline.
pub fn serve_report(
    cfg: &TransformerConfig,
    gpu: &GpuSpec,
    e: &crate::serve::ServeEstimate,
    s: &crate::serve::ServeSetup,
) -> Report {
    let mut r = Report::new(
        format!("Serving {} params on {}", table::count(e.params), gpu.id),
        json!({"estimate": to_json(e), "setup": to_json(s), "gpu": gpu.id}),
    );
    r.note(format!(
        "weights: {} ({} bytes a parameter); KV cache: {} a token (2 · {} layers · {} wide · {} bytes)",
        table::bytes_binary(e.weight_bytes),
        s.weight_bytes,
        table::bytes_binary(e.kv_bytes_per_token),
        cfg.layers,
        cfg.hidden,
        s.kv_bytes
    ));
    r.note(format!(
        "cache: {} of {} ({}% usable) holds {} tokens: {} requests of {} tokens at once",
        table::bytes_binary(e.cache_bytes),
        table::bytes_binary(gpu.memory_bytes),
        100.0 * s.memory_fraction,
        table::count(e.max_tokens),
        e.max_batch,
        s.context
    ));
    let mut t = Table::new([
        "batch",
        "bytes read",
        "FLOPs",
        "at bandwidth",
        "at peak",
        "bound",
        "tokens/s at most",
    ]);
    for row in &e.rows {
        t.row([
            row.batch.to_string(),
            table::bytes(row.bytes),
            table::count(row.flops),
            format!("{:.3} ms", 1e3 * row.memory_s),
            format!("{:.3} ms", 1e3 * row.compute_s),
            if row.memory_bound {
                "memory"
            } else {
                "compute"
            }
            .to_string(),
            table::count(row.tokens_per_s),
        ]);
    }
    r.table(
        "One decode step (weights read once, each request's cache read whole)",
        t,
    );
    r.note(
        "Decode reads every weight once a step whatever the batch, so batching multiplies \
         tokens per second until the caches' bytes or the compute peak take over.",
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{TrainingSetup, estimate_memory};
    use crate::specs::gpu;

    #[test]
    fn reports_render() {
        let a100 = gpu("a100").unwrap();
        let ops = [
            OpCost::gemm(8192, 50257, 768, DType::Bf16).unwrap(),
            OpCost::softmax(8192, 50304, DType::Bf16).unwrap(),
        ];
        let a = roofline_analysis(&a100, DType::Bf16, None, &ops, &[Some(2e-3)]).unwrap();
        let text = a.report().to_string();
        assert!(
            text.contains("compute-bound") && text.contains("memory-bound"),
            "{text}"
        );
        assert!(text.contains("pad n=50257→50304"), "{text}");
        assert!(a.svg().unwrap().contains("<svg"));
        assert!(roofline_analysis(&a100, DType::Bf16, None, &ops[..1], &[None, None]).is_err());
        assert!(
            gpu_list(&crate::specs::gpus())
                .to_string()
                .contains("h100-sxm")
        );

        let m = estimate_memory(
            &TransformerConfig::preset("gpt2").unwrap(),
            &TrainingSetup::default(),
        )
        .unwrap();
        let text = memory_report(&m, Some(&a100)).to_string();
        assert!(text.contains("fits"), "{text}");

        let t = time_report(&t_inputs_for_test(&a100)).unwrap();
        assert!(t.to_string().contains("3.150e23"), "{t}");
        // --params alone: 6ND, and the report says attention is missing; with the
        // model's shape the time counts attention and says so.
        let text = t.to_string();
        assert!(
            text.contains("6·N·D / (GPUs") && text.contains("not counted"),
            "{text}"
        );
        let gpt3 = TransformerConfig::preset("gpt3-175b").unwrap();
        let with = time_report(&TimeInputs {
            model: Some(gpt3),
            ..t_inputs_for_test(&a100)
        })
        .unwrap();
        let text = with.to_string();
        assert!(
            text.contains("(6·N·D + attention) / (GPUs") && !text.contains("not counted"),
            "{text}"
        );
        assert_eq!(with.json["flops_counted"], "(6·N·D + attention)");

        let c = comms_report(&CommsInputs {
            gpu: gpu("h100").unwrap(),
            gpus: 16,
            bytes: 1e9,
            dtype: DType::Bf16,
            d_model: Some(8192.0),
            d_ff: Some(28672.0),
            tokens_per_gpu: Some(4096.0),
            moe: None,
            alpha_s: None,
        })
        .unwrap();
        let s = c.to_string();
        assert!(s.contains("inter-node") && s.contains("2474"), "{s}");
    }

    /// GPT-3's run (175B params, 300B tokens) on 1024 A100s at 50% MFU, no model shape.
    fn t_inputs_for_test(gpu: &GpuSpec) -> TimeInputs {
        TimeInputs {
            params: 175e9,
            tokens: 300e9,
            model: None,
            gpu: gpu.clone(),
            dtype: DType::Bf16,
            gpus: 1024,
            mfu: 0.5,
            step_time_s: None,
            tokens_per_step: None,
            tokens_per_s: None,
            recompute: Recompute::None,
        }
    }
}
