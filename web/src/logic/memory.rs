//! The memory calculator: a transformer and a training layout in, the per-GPU bytes of
//! `brrr_perf::memory::estimate_memory` out, as the parts of a stacked bar.

use brrr_perf::Result;
use brrr_perf::memory::{
    MemoryBreakdown, Optimizer, PRESETS, PipelineSchedule, Precision, Recompute, TrainingSetup,
    TransformerConfig, estimate_memory,
};
use brrr_perf::specs::GpuSpec;

/// Everything the calculator's controls set.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryInput {
    /// The model (a preset's shape, or edited).
    pub model: TransformerConfig,
    /// The layout: degrees, batch, precision, optimizer, ZeRO, recomputation, schedule.
    pub setup: TrainingSetup,
    /// `brrr_perf::specs` id of the GPU whose capacity the bar is drawn against.
    pub gpu: String,
}

impl Default for MemoryInput {
    /// GPT-2 XL (1.6 G parameters) with mixed-precision Adam on one A100 80GB, micro-batch 8:
    /// it does not fit, which is where the controls become interesting.
    fn default() -> Self {
        MemoryInput {
            model: TransformerConfig::preset("gpt2-xl")
                .unwrap_or_else(|_| TransformerConfig::gpt(48, 1600, 25, 1024, 50257)),
            setup: TrainingSetup {
                micro_batch: 8,
                ..TrainingSetup::default()
            },
            gpu: "a100-sxm-80gb".into(),
        }
    }
}

/// The preset names (the model menu), from `brrr_perf::memory::PRESETS`.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.0).collect()
}

/// The model menu: every preset, then "custom" (what the menu shows for an edited shape).
pub fn preset_menu() -> Vec<(String, String)> {
    let mut menu: Vec<(String, String)> = preset_names()
        .into_iter()
        .map(|n| (n.to_string(), n.to_string()))
        .collect();
    menu.push(("custom".into(), "custom".into()));
    menu
}

/// The preset whose shape `cfg` has, if any (the menu shows "custom" otherwise).
pub fn preset_of(cfg: &TransformerConfig) -> Option<&'static str> {
    preset_names()
        .into_iter()
        .find(|name| TransformerConfig::preset(name).is_ok_and(|p| p == *cfg))
}

/// Schedule menu keys.
pub const SCHEDULES: [(&str, &str); 3] = [
    ("1f1b", "1F1B"),
    ("gpipe", "GPipe"),
    ("interleaved", "interleaved 1F1B"),
];

/// The menu key of a schedule.
pub fn schedule_key(s: PipelineSchedule) -> &'static str {
    match s {
        PipelineSchedule::OneFOneB => "1f1b",
        PipelineSchedule::GPipe => "gpipe",
        PipelineSchedule::Interleaved { .. } => "interleaved",
    }
}

/// The schedule for a menu key; interleaved with `chunks` model chunks per GPU.
pub fn schedule_from_key(key: &str, chunks: u64) -> Option<PipelineSchedule> {
    match key {
        "1f1b" => Some(PipelineSchedule::OneFOneB),
        "gpipe" => Some(PipelineSchedule::GPipe),
        "interleaved" => Some(PipelineSchedule::Interleaved { chunks }),
        _ => None,
    }
}

/// Menu keys and labels of the optimizers.
pub const OPTIMIZERS: [(&str, &str); 6] = [
    ("adam", "Adam / AdamW"),
    ("adam8bit", "8-bit Adam"),
    (
        "galore:128",
        "GaLore, rank 128 (Adam on projected gradients)",
    ),
    ("galore:512", "GaLore, rank 512"),
    ("sgd-momentum", "SGD + momentum"),
    ("sgd", "SGD"),
];

/// The menu key of an optimizer.
pub fn optimizer_key(o: Optimizer) -> &'static str {
    match o {
        Optimizer::Adam => "adam",
        Optimizer::Adam8bit => "adam8bit",
        Optimizer::SgdMomentum => "sgd-momentum",
        Optimizer::Sgd => "sgd",
        // The menu offers these two ranks; any other is shown as the nearer one.
        Optimizer::GaLore { rank } if rank >= 320 => "galore:512",
        Optimizer::GaLore { .. } => "galore:128",
    }
}

/// Menu keys and labels of LoRA (off, or fine-tuning at a rank).
pub const LORA_RANKS: [(&str, &str); 4] = [
    ("off", "off (every weight trains)"),
    ("8", "rank 8 (weights frozen)"),
    ("64", "rank 64"),
    ("256", "rank 256"),
];

/// The menu key of a LoRA rank; a rank the menu does not offer shows as the nearest
/// offered one below it.
pub fn lora_key(rank: Option<u64>) -> &'static str {
    match rank {
        None => "off",
        Some(r) if r >= 256 => "256",
        Some(r) if r >= 64 => "64",
        Some(_) => "8",
    }
}

/// The LoRA rank of a menu key (`None` inside: off); `None` for a key not on the menu.
pub fn lora_from_key(key: &str) -> Option<Option<u64>> {
    match key {
        "off" => Some(None),
        k => k.parse().ok().filter(|&r| r > 0).map(Some),
    }
}

/// The caption under the bar: where its model-state bytes per parameter come from,
/// for the setup shown (not a fixed "2 + 2 + 12").
pub fn states_caption(setup: &TrainingSetup) -> String {
    let (w, g, m) = setup.precision.bytes_per_param();
    let k = setup.optimizer.state_bytes_per_param();
    let optimizer = OPTIMIZERS
        .iter()
        .find(|(key, _)| *key == optimizer_key(setup.optimizer))
        .map_or("the optimizer", |o| o.1);
    let mut text = format!(
        "Model states per ZeRO (Rajbhandari et al. 2020, §3.1): {} weights and gradients \
         of {w} + {g} bytes per parameter, {m} of f32 master and {k} of {optimizer} state",
        match setup.precision {
            Precision::Mixed => "16-bit",
            Precision::Fp32 => "fp32",
        }
    );
    if matches!(setup.optimizer, Optimizer::GaLore { .. }) {
        text.push_str(" (GaLore: less for the layers' matrices, priced at their rank)");
    }
    if let Some(r) = setup.lora_rank {
        text.push_str(&format!(
            "; with LoRA rank {r} only the adapters have gradients, masters and optimizer \
             state (Hu et al. 2021)"
        ));
    }
    if setup.offload {
        text.push_str("; offload keeps the masters and optimizer state in host memory, off the bar (Ren et al. 2021)");
    }
    text.push('.');
    text
}

/// The menu key of a precision.
pub fn precision_key(p: Precision) -> &'static str {
    match p {
        Precision::Fp32 => "fp32",
        Precision::Mixed => "mixed",
    }
}

/// The menu key of a recomputation strategy.
pub fn recompute_key(r: Recompute) -> &'static str {
    match r {
        Recompute::None => "none",
        Recompute::Selective => "selective",
        Recompute::Full => "full",
    }
}

/// One part of the bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    /// Its name in `MemoryBreakdown::rows`.
    pub label: &'static str,
    /// Bytes on this GPU.
    pub bytes: f64,
}

/// What the calculator shows.
#[derive(Clone, Debug)]
pub struct MemoryView {
    /// `brrr_perf`'s breakdown.
    pub breakdown: MemoryBreakdown,
    /// The bar's parts, in `MemoryBreakdown::rows` order.
    pub parts: Vec<Part>,
    /// Their sum, `MemoryBreakdown::total`.
    pub total: f64,
    /// The GPU's capacity in bytes.
    pub capacity: f64,
    /// `total ≤ capacity`.
    pub fits: bool,
}

/// The estimate for `input` against `gpu`'s memory.
pub fn estimate(input: &MemoryInput, gpu: &GpuSpec) -> Result<MemoryView> {
    let breakdown = estimate_memory(&input.model, &input.setup)?;
    let parts = breakdown
        .rows()
        .into_iter()
        .map(|(label, bytes)| Part { label, bytes })
        .collect();
    let total = breakdown.total();
    Ok(MemoryView {
        parts,
        total,
        capacity: gpu.memory_bytes,
        fits: total <= gpu.memory_bytes,
        breakdown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::roofline::find_gpu;

    fn a100() -> GpuSpec {
        find_gpu("a100-sxm-80gb").unwrap()
    }

    #[test]
    fn gpt2_xl_mixed_adam_is_16_bytes_per_param_of_states() {
        let input = MemoryInput::default();
        let v = estimate(&input, &a100()).unwrap();
        let p = input.model.params();
        let states: f64 = v.parts[..4].iter().map(|p| p.bytes).sum();
        assert_eq!(states, 16.0 * p);
        assert_eq!(v.parts[0].bytes, 2.0 * p, "bf16 weights");
        assert!((v.total - v.parts.iter().map(|p| p.bytes).sum::<f64>()).abs() < 1.0);
        assert_eq!(preset_of(&input.model), Some("gpt2-xl"));
        assert!(!v.fits, "the default starts over capacity");
    }

    #[test]
    fn zero3_over_8_shards_every_state() {
        let mut input = MemoryInput::default();
        let before = estimate(&input, &a100()).unwrap();
        (input.setup.zero_stage, input.setup.dp) = (3, 8);
        let after = estimate(&input, &a100()).unwrap();
        for i in 0..4 {
            assert_eq!(
                after.parts[i].bytes,
                before.parts[i].bytes / 8.0,
                "{}",
                after.parts[i].label
            );
        }
        assert!(after.parts[5].bytes > 0.0, "ZeRO-3 gathers one layer");
    }

    #[test]
    fn offload_and_lora_take_states_off_the_gpu() {
        let mut input = MemoryInput::default();
        let before = estimate(&input, &a100()).unwrap();
        input.setup.offload = true;
        let off = estimate(&input, &a100()).unwrap();
        // Master weights and moments (parts 2 and 3) leave for the host.
        assert_eq!(off.parts[2].bytes + off.parts[3].bytes, 0.0);
        assert_eq!(
            off.breakdown.offloaded,
            before.parts[2].bytes + before.parts[3].bytes
        );
        assert!(states_caption(&input.setup).contains("offload"));
        input.setup = TrainingSetup {
            lora_rank: Some(8),
            ..MemoryInput::default().setup
        };
        let lora = estimate(&input, &a100()).unwrap();
        assert!(
            lora.parts[1].bytes < before.parts[1].bytes / 100.0,
            "gradients"
        );
        assert!(states_caption(&input.setup).contains("LoRA rank 8"));
        assert!(states_caption(&MemoryInput::default().setup).contains("2 + 2 bytes"));
    }

    #[test]
    fn bad_layouts_are_errors_not_panics() {
        let mut input = MemoryInput::default();
        input.setup.tp = 3; // 25 heads do not split 3 ways
        assert!(estimate(&input, &a100()).is_err());
        input.setup.tp = 1;
        input.setup.pp = 5; // 48 layers do not split 5 ways
        assert!(estimate(&input, &a100()).is_err());
    }

    #[test]
    fn menus_round_trip() {
        for (k, _) in SCHEDULES {
            assert_eq!(schedule_key(schedule_from_key(k, 2).unwrap()), k);
        }
        for (k, _) in OPTIMIZERS {
            assert_eq!(optimizer_key(Optimizer::parse(k).unwrap()), k);
        }
        for r in ["none", "selective", "full"] {
            assert_eq!(recompute_key(Recompute::parse(r).unwrap()), r);
        }
        assert_eq!(precision_key(Precision::parse("mixed").unwrap()), "mixed");
        for (k, _) in LORA_RANKS {
            assert_eq!(lora_key(lora_from_key(k).unwrap()), k);
        }
        assert_eq!(lora_from_key("0"), None);
    }
}
