//! Chapter "Three regimes and rooflines": ops on H100 and A100, the roofline figure,
//! and the classifier on hypothetical measurements.

use crate::md::{Md, page, sig3};
use brrr_perf::roofline::{AttentionShape, OpCost, Regime, Roofline};
use brrr_perf::specs::gpu;
use brrr_perf::table::{bytes, duration, flops, flops_per_s, percent};
use brrr_perf::{DType, Result, Unit};

/// The ops the chapter discusses, in bf16, with a short label: GPT-2-sized shapes
/// (width 768, 8 sequences of 1024 tokens, 12 heads, vocabulary 50304).
fn ops() -> Result<Vec<(&'static str, OpCost)>> {
    let attention = AttentionShape {
        batch: 8,
        heads: 12,
        seq: 1024,
        head_dim: 64,
        causal: true,
        fused: true,
    };
    let unfused = AttentionShape {
        fused: false,
        ..attention
    };
    Ok(vec![
        ("GEMM 4096³", OpCost::gemm(4096, 4096, 4096, DType::Bf16)?),
        (
            "QKV projection",
            OpCost::gemm(8192, 2304, 768, DType::Bf16)?,
        ),
        (
            "output projection",
            OpCost::gemm(8192, 768, 768, DType::Bf16)?,
        ),
        (
            "projection of 16 tokens",
            OpCost::gemm(16, 768, 768, DType::Bf16)?,
        ),
        (
            "attention, fused",
            OpCost::attention(attention, DType::Bf16)?,
        ),
        (
            "attention, unfused",
            OpCost::attention(unfused, DType::Bf16)?,
        ),
        (
            "softmax over the vocabulary",
            OpCost::softmax(8192, 50304, DType::Bf16)?,
        ),
        ("LayerNorm", OpCost::layernorm(8192, 768, DType::Bf16)?),
        (
            "residual add",
            OpCost::elementwise(8192 * 768, 1.0, 2, 1, DType::Bf16)?,
        ),
    ])
}

/// The table of ops on one GPU: intensity, the ridge of the ceiling they run under,
/// predicted time and regime.
fn ops_table(gpu_id: &str) -> Result<String> {
    let g = gpu(gpu_id)?;
    let mut t = Md::new(&[
        "op (bf16)",
        "FLOPs",
        "min bytes",
        "intensity (FLOP/B)",
        "ridge (FLOP/B)",
        "time",
        "regime",
    ]);
    for (label, op) in ops()? {
        let roof = Roofline::for_op(&g, &op, DType::Bf16)?;
        let p = roof.predict(&op);
        t.row(vec![
            label.to_string(),
            flops(op.flops),
            bytes(op.bytes),
            sig3(p.intensity),
            sig3(p.ridge),
            duration(p.time_s),
            regime_word(p.regime),
        ]);
    }
    Ok(page(&format!(
        "On the {} ({}): tensor-core bf16 peak {} for matmul-shaped ops, the vector \
         (CUDA-core) peak for the rest, {} of HBM bandwidth.\n\n{}",
        g.name,
        g.id,
        flops_per_s(g.peak(DType::Bf16, Unit::Tensor)?),
        brrr_perf::table::bandwidth(g.memory_bandwidth),
        t.render()
    )))
}

/// `compute`, `memory`, `overhead`: short enough for a table column.
fn regime_word(r: Regime) -> String {
    match r {
        Regime::Compute => "compute",
        Regime::Memory => "memory",
        Regime::Overhead => "overhead",
    }
    .to_string()
}

/// Hypothetical measurements (inputs, not results) judged by the classifier.
fn classify_table() -> Result<String> {
    let g = gpu("h100")?;
    let cases: [(OpCost, f64, &str); 4] = [
        (
            OpCost::gemm(4096, 4096, 4096, DType::Bf16)?,
            200e-6,
            "GEMM 4096³",
        ),
        (
            OpCost::elementwise(1 << 28, 1.0, 2, 1, DType::Bf16)?,
            0.6e-3,
            "add of 2²⁸ elements",
        ),
        (
            OpCost::elementwise(1 << 12, 1.0, 2, 1, DType::Bf16)?,
            5e-6,
            "add of 4096 elements: one launch",
        ),
        (
            OpCost::gemm(16, 768, 768, DType::Bf16)?,
            20e-6,
            "GEMM 16×768×768 behind Python",
        ),
    ];
    let mut t = Md::new(&[
        "op (bf16)",
        "measured (hypothetical)",
        "roofline time",
        "of compute peak",
        "of bandwidth",
        "regime",
    ]);
    for (op, measured, what) in cases {
        let roof = Roofline::for_op(&g, &op, DType::Bf16)?;
        let c = roof.classify(&op, measured)?;
        t.row(vec![
            what.to_string(),
            duration(measured),
            duration(c.predicted.time_s),
            percent(c.compute_fraction),
            percent(c.memory_fraction),
            regime_word(c.regime),
        ]);
    }
    Ok(page(&t.render()))
}

/// The roofline figure: H100's tensor-core and vector ceilings, with the ops placed.
fn roofline_svg() -> Result<String> {
    let g = gpu("h100")?;
    let rooflines = vec![
        Roofline::for_gpu(&g, DType::Bf16, Unit::Tensor)?,
        Roofline::for_gpu(&g, DType::Bf16, Unit::Vector)?,
    ];
    let mut preds = Vec::new();
    for (_, op) in ops()? {
        let roof = Roofline::for_op(&g, &op, DType::Bf16)?;
        preds.push(roof.predict(&op));
    }
    brrr_perf::plot::roofline_svg("H100 SXM, bf16", &rooflines, &preds, &[])
}

/// The chapter's files.
pub fn files() -> Result<Vec<(String, String)>> {
    Ok(vec![
        ("regimes-ops-h100.md".into(), ops_table("h100")?),
        ("regimes-ops-a100.md".into(), ops_table("a100")?),
        ("regimes-classify.md".into(), classify_table()?),
        ("regimes-roofline.svg".into(), roofline_svg()?),
    ])
}
