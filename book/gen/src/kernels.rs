//! Chapter "Kernels": the matmul versions' global-memory intensity, and fusion.

use crate::md::{Md, page, sig3};
use brrr_perf::roofline::{OpCost, Roofline};
use brrr_perf::specs::gpu;
use brrr_perf::table::{bytes, duration, flops_per_s};
use brrr_perf::{DType, Result, Unit};
use brrr_wgpu::MatmulKernel;

/// Every version of `shaders/matmul.wgsl`: a 16 × 16 workgroup computes a `tile × tile`
/// block of C, walking k; per step of k it loads `2 · tile` f32 values from global memory
/// per unit of k and does `2 · tile²` FLOPs, so its global-memory intensity is
/// `tile / 4` FLOP/byte (the naive kernel, `tile = 1` in effect, re-reads both operands
/// for every output: 2 FLOPs per 8 bytes).
fn matmul_table() -> Result<String> {
    let a100 = gpu("a100")?;
    let roof = Roofline::for_gpu(&a100, DType::F32, Unit::Vector)?;
    let mut t = Md::new(&[
        "version",
        "C tile per workgroup",
        "outputs per invocation",
        "intensity from global memory (FLOP/B)",
        "A100 fp32 ceiling at that intensity",
    ]);
    for k in MatmulKernel::ALL {
        let (tile, per_inv) = match k {
            MatmulKernel::V1Naive => (1, 1),
            _ => (k.tile(), (k.tile() / 16).pow(2)),
        };
        let intensity = tile as f64 / 4.0;
        let shown_tile = k.tile();
        t.row(vec![
            format!("`{}`", k.name()),
            format!("{shown_tile} × {shown_tile}"),
            per_inv.to_string(),
            sig3(intensity),
            flops_per_s(roof.attainable(intensity)),
        ]);
    }
    Ok(page(&format!(
        "{}\nThe A100's fp32 ridge point is {} FLOP/byte ({} over {}).\n",
        t.render(),
        sig3(roof.ridge()),
        flops_per_s(roof.peak_flops),
        brrr_perf::table::bandwidth(roof.bandwidth)
    )))
}

/// A chain of element-wise ops over 2^28 f32 elements on an A100, fused and not.
fn fusion_table() -> Result<String> {
    let a100 = gpu("a100")?;
    let n = 1u64 << 28;
    let mut t = Md::new(&[
        "ops in the chain",
        "bytes, unfused",
        "bytes, fused",
        "time, unfused",
        "time, fused",
        "speed-up",
    ]);
    for ops in [1u64, 2, 4, 8] {
        let un = OpCost::elementwise_chain(n, ops, DType::F32, false)?;
        let fu = OpCost::elementwise_chain(n, ops, DType::F32, true)?;
        let roof = Roofline::for_op(&a100, &un, DType::F32)?;
        let (tu, tf) = (roof.predict(&un).time_s, roof.predict(&fu).time_s);
        t.row(vec![
            ops.to_string(),
            bytes(un.bytes),
            bytes(fu.bytes),
            duration(tu),
            duration(tf),
            format!("{}×", sig3(tu / tf)),
        ]);
    }
    Ok(page(&format!(
        "2^28 f32 elements ({}) on an A100 SXM 80GB, roofline times:\n\n{}",
        bytes(n as f64 * 4.0),
        t.render()
    )))
}

/// The `v2_tiled` section of `shaders/matmul.wgsl`, as brrr-wgpu compiles it (without
/// the `common.wgsl` prelude every kernel gets).
fn v2_source() -> Result<String> {
    let full = brrr_wgpu::kernel_source(brrr_wgpu::Family::Matmul, "v2_tiled", &[])
        .map_err(|e| brrr_perf::PerfError::Invalid(e.to_string()))?;
    let section = full
        .strip_prefix(brrr_wgpu::shaders::COMMON)
        .unwrap_or(&full)
        .trim();
    Ok(page(&format!("```wgsl\n{section}\n```\n")))
}

/// The chapter's files.
pub fn files() -> Result<Vec<(String, String)>> {
    Ok(vec![
        ("kernels-matmul.md".into(), matmul_table()?),
        ("kernels-fusion.md".into(), fusion_table()?),
        ("kernels-v2-tiled.md".into(), v2_source()?),
    ])
}
