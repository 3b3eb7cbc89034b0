//! Chapter "What a GPU is": the spec table, and tile/wave quantization on an A100.

use crate::md::{Md, page, sig3};
use brrr_perf::roofline::{gemm_quantization, round_up};
use brrr_perf::specs::gpus;
use brrr_perf::table::{bandwidth, bytes_binary, flops_per_s, percent};
use brrr_perf::{DType, Result, Unit};

/// Every GPU of brrr-perf's table: SMs, memory, bandwidth, L2, the two peaks, the ridge.
fn spec_table() -> Result<String> {
    let mut t = Md::new(&[
        "GPU",
        "SMs",
        "memory",
        "bandwidth",
        "L2",
        "fp32 vector",
        "bf16 tensor",
        "ridge (FLOP/B)",
    ]);
    for g in gpus() {
        // Volta has no bf16: its tensor cores take fp16.
        let tensor = g
            .peak(DType::Bf16, Unit::Tensor)
            .or_else(|_| g.peak(DType::F16, Unit::Tensor))?;
        t.row(vec![
            format!("`{}`", g.id),
            g.sm_count.to_string(),
            bytes_binary(g.memory_bytes),
            bandwidth(g.memory_bandwidth),
            g.l2_bytes.map(bytes_binary).unwrap_or_else(|| "–".into()),
            flops_per_s(g.peak(DType::F32, Unit::Vector)?),
            flops_per_s(tensor),
            sig3(tensor / g.memory_bandwidth),
        ]);
    }
    Ok(page(&format!(
        "{}\nPeaks are dense FLOP/s (fp16 for the V100, which has no bf16); the ridge is \
         the tensor-core peak over the bandwidth.\n",
        t.render()
    )))
}

/// Output shapes around one full wave of 128×128 tiles on 108 SMs, and GPT-2's
/// vocabulary before and after padding.
fn waves_table() -> Result<String> {
    let sms = 108;
    let vocab_padded = round_up(50257, 64)?;
    let shapes: [(u64, u64, &str); 6] = [
        (1536, 1152, "12 × 9 tiles: exactly one wave"),
        (1664, 1152, "one more row of tiles"),
        (3072, 2304, "four full waves"),
        (3200, 2304, "a sliver of a fifth wave"),
        (8192, 50257, "GPT-2's logits, vocabulary 50257"),
        (8192, vocab_padded, "vocabulary padded to a multiple of 64"),
    ];
    let mut t = Md::new(&[
        "output m × n",
        "tiles",
        "waves",
        "tile efficiency",
        "wave efficiency",
        "useful",
        "note",
    ])
    .left(&[6]);
    for (m, n, note) in shapes {
        let q = gemm_quantization(m, n, 128, 128, sms, 1)?;
        t.row(vec![
            format!("{m} × {n}"),
            q.tiles.to_string(),
            sig3(q.waves),
            percent(q.tile_efficiency),
            percent(q.wave_efficiency),
            percent(q.efficiency),
            note.to_string(),
        ]);
    }
    Ok(page(&format!(
        "128 × 128 output tiles, one resident per SM, {sms} SMs (an A100):\n\n{}",
        t.render()
    )))
}

/// The chapter's files.
pub fn files() -> Result<Vec<(String, String)>> {
    Ok(vec![
        ("gpu-specs.md".into(), spec_table()?),
        ("gpu-waves.md".into(), waves_table()?),
    ])
}
