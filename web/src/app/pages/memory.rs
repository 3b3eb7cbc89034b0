//! The memory calculator: `crate::logic::memory::estimate` as a stacked bar against the
//! chosen GPU's capacity.

use crate::app::components::{
    Banner, BannerKind, GpuPicker, PageHeader, Segment, Select, SizeInput, StackedBar, Stat, Toggle,
};
use crate::app::util::edit;
use crate::logic::memory::{
    LORA_RANKS, MemoryInput, MemoryView, OPTIMIZERS, SCHEDULES, estimate, lora_from_key, lora_key,
    optimizer_key, precision_key, preset_menu, preset_of, recompute_key, schedule_from_key,
    schedule_key, states_caption,
};
use crate::logic::roofline::find_gpu;
use crate::logic::site::PageId;
use brrr_perf::memory::{Optimizer, PipelineSchedule, Precision, Recompute, TransformerConfig};
use brrr_perf::table;
use yew::prelude::*;

/// Colours of the bar's parts, in `MemoryBreakdown::rows` order.
const COLORS: [&str; 6] = [
    "#2563eb", "#7c3aed", "#0891b2", "#16a34a", "#f59e0b", "#94a3b8",
];

fn opts(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The memory calculator page.
#[function_component(MemoryPage)]
pub fn memory_page() -> Html {
    let input = use_state(MemoryInput::default);
    let result = find_gpu(&input.gpu).and_then(|g| estimate(&input, &g).map(|v| (g, v)));
    html! {
        <section class="page">
            <PageHeader id={PageId::Memory} />
            <div class="layout">
                <aside class="panel controls">{ model_controls(&input) }{ layout_controls(&input) }</aside>
                <div class="results">
                    { match &result {
                        Ok((g, v)) => results(g, v),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e.to_string() }</Banner> },
                    } }
                </div>
            </div>
        </section>
    }
}

fn model_controls(input: &UseStateHandle<MemoryInput>) -> Html {
    let presets = preset_menu();
    let on_preset = edit(input, |i: &mut MemoryInput, name: String| {
        if let Ok(cfg) = TransformerConfig::preset(&name) {
            i.model = cfg;
        }
    });
    let m = &input.model;
    let size = |id: &'static str,
                label: &'static str,
                value: u64,
                max: u64,
                set: fn(&mut TransformerConfig, u64)| {
        let on_change = edit(input, move |i: &mut MemoryInput, v: u64| {
            set(&mut i.model, v);
        });
        html! { <SizeInput id={id} label={label} {value} min={1} {max} {on_change} /> }
    };
    html! {
        <>
            <GpuPicker selected={input.gpu.clone()} on_change={edit(input, |i: &mut MemoryInput, id: String| i.gpu = id)} />
            <Select id="preset" label="Model" options={presets} selected={preset_of(m).unwrap_or("custom")} on_change={on_preset} />
            { size("layers", "layers", m.layers, 256, |c, v| c.layers = v) }
            { size("hidden", "hidden size", m.hidden, 65536, |c, v| { c.hidden = v; c.ffn_hidden = v.saturating_mul(4) }) }
            { size("heads", "attention heads", m.heads, 512, |c, v| c.heads = v) }
            { size("seq", "sequence length", m.seq_len, 1 << 20, |c, v| c.seq_len = v) }
            { size("vocab", "vocabulary", m.vocab, 1 << 20, |c, v| c.vocab = v) }
        </>
    }
}

fn layout_controls(input: &UseStateHandle<MemoryInput>) -> Html {
    let s = &input.setup;
    let degree = |id: &'static str,
                  label: &'static str,
                  value: u64,
                  max: u64,
                  set: fn(&mut MemoryInput, u64)| {
        let on_change = edit(input, move |i: &mut MemoryInput, v: u64| set(i, v));
        html! { <SizeInput id={id} label={label} {value} min={1} {max} {on_change} /> }
    };
    let chunks = match s.schedule {
        PipelineSchedule::Interleaved { chunks } => chunks,
        _ => 2,
    };
    let on_schedule = edit(input, move |i: &mut MemoryInput, k: String| {
        if let Some(sch) = schedule_from_key(&k, chunks) {
            i.setup.schedule = sch;
        }
    });
    html! {
        <>
            <Select id="precision" label="Precision" selected={precision_key(s.precision)}
                options={opts(&[("mixed", "mixed (16-bit + fp32 master)"), ("fp32", "fp32")])}
                on_change={edit(input, |i: &mut MemoryInput, k: String| if let Ok(p) = Precision::parse(&k) { i.setup.precision = p })} />
            <Select id="optimizer" label="Optimizer" selected={optimizer_key(s.optimizer)} options={opts(&OPTIMIZERS)}
                on_change={edit(input, |i: &mut MemoryInput, k: String| if let Ok(o) = Optimizer::parse(&k) { i.setup.optimizer = o })} />
            <Toggle id="offload" label="offload master weights and optimizer states to the host (ZeRO-Offload)" checked={s.offload}
                on_change={edit(input, |i: &mut MemoryInput, b: bool| i.setup.offload = b)} />
            <Select id="lora" label="LoRA fine-tuning" selected={lora_key(s.lora_rank)} options={opts(&LORA_RANKS)}
                on_change={edit(input, |i: &mut MemoryInput, k: String| if let Some(r) = lora_from_key(&k) { i.setup.lora_rank = r })} />
            <Select id="zero" label="ZeRO stage" selected={s.zero_stage.to_string()}
                options={opts(&[("0", "0 (plain data parallel)"), ("1", "1 (optimizer states)"), ("2", "2 (+ gradients)"), ("3", "3 (+ weights)")])}
                on_change={edit(input, |i: &mut MemoryInput, k: String| if let Ok(z) = k.parse() { i.setup.zero_stage = z })} />
            { degree("dp", "DP (data-parallel ranks)", s.dp, 4096, |i, v| i.setup.dp = v) }
            { degree("tp", "TP (tensor-parallel ranks)", s.tp, 64, |i, v| i.setup.tp = v) }
            { degree("pp", "PP (pipeline stages)", s.pp, 128, |i, v| i.setup.pp = v) }
            <Toggle id="sp" label="sequence parallelism (with TP)" checked={s.sequence_parallel}
                on_change={edit(input, |i: &mut MemoryInput, b: bool| i.setup.sequence_parallel = b)} />
            <Select id="schedule" label="Pipeline schedule" selected={schedule_key(s.schedule)} options={opts(&SCHEDULES)} on_change={on_schedule} />
            if matches!(s.schedule, PipelineSchedule::Interleaved { .. }) {
                { degree("chunks", "model chunks per GPU", chunks, 16, |i, v| i.setup.schedule = PipelineSchedule::Interleaved { chunks: v }) }
            }
            { degree("micro-batch", "micro-batch (sequences)", s.micro_batch, 1024, |i, v| i.setup.micro_batch = v) }
            { degree("grad-accum", "micro-batches per step", s.grad_accum, 1024, |i, v| i.setup.grad_accum = v) }
            <Select id="recompute" label="Activation recomputation" selected={recompute_key(s.recompute)}
                options={opts(&[("none", "none"), ("selective", "selective (attention core)"), ("full", "full (layer inputs only)")])}
                on_change={edit(input, |i: &mut MemoryInput, k: String| if let Ok(r) = Recompute::parse(&k) { i.setup.recompute = r })} />
        </>
    }
}

fn results(gpu: &brrr_perf::specs::GpuSpec, v: &MemoryView) -> Html {
    let b = &v.breakdown;
    let segments: Vec<Segment> = v
        .parts
        .iter()
        .zip(COLORS)
        .map(|(p, c)| Segment {
            label: p.label.to_string(),
            value: p.bytes,
            color: c.to_string(),
        })
        .collect();
    let verdict = if v.fits {
        html! { <Banner kind={BannerKind::Info}>{ format!("Fits: {} of the {}'s {} ({} free, before the CUDA context and fragmentation).",
        table::bytes_binary(v.total), gpu.name, table::bytes_binary(v.capacity), table::bytes_binary(v.capacity - v.total)) }</Banner> }
    } else {
        html! { <Banner kind={BannerKind::Error}>{ format!("Does not fit: {} needed, the {} holds {}. Shard the states (ZeRO), split the model (TP, PP), recompute activations, or shrink the micro-batch.",
        table::bytes_binary(v.total), gpu.name, table::bytes_binary(v.capacity)) }</Banner> }
    };
    html! {
        <>
            { verdict }
            <div class="stats">
                <Stat label="Per GPU" text={table::bytes_binary(v.total)} value={v.total} id="total" strong=true
                    note={format!("{} of capacity", table::percent(v.total / v.capacity))} />
                <Stat label="Parameters" text={format!("{} params", table::count(b.params_total))} value={b.params_total} id="params" />
                <Stat label="On this GPU" text={format!("{} params", table::count(b.params_per_gpu))} value={b.params_per_gpu} id="params-gpu" />
                <Stat label="GPUs" text={b.gpus.to_string()} value={b.gpus as f64} id="gpus" />
                if b.offloaded > 0.0 {
                    <Stat label="In host memory" text={table::bytes_binary(b.offloaded)} value={b.offloaded} id="offloaded"
                        note="masters and optimizer state (offload)" />
                }
                if b.trained_params < b.params_per_gpu {
                    <Stat label="Trained" text={format!("{} params", table::count(b.trained_params))} value={b.trained_params} id="trained"
                        note={format!("{} of this GPU's (LoRA)", table::percent(b.trained_params / b.params_per_gpu))} />
                }
                <Stat label="Tokens / step" text={table::count(b.tokens_per_step as f64)} value={b.tokens_per_step as f64} id="tokens" />
                <Stat label="Layers / stage" text={b.layers_per_stage.to_string()} value={b.layers_per_stage as f64} id="layers-stage"
                    note={format!("{} micro-batches in flight", table::sig3(b.microbatches_in_flight))} />
            </div>
            <StackedBar id="memory-bar" segments={segments}
                capacity={Some((v.capacity, format!("{} {}", gpu.name, table::bytes_binary(v.capacity))))} />
            <p class="muted small">
                { states_caption(&b.setup) }
                { " Activations per Korthikanti et al. 2022 (Table 2), for the first pipeline stage, which holds the most. \
                   Not counted: the CUDA context, allocator fragmentation and temporary workspaces (typically 1–3 GiB)." }
            </p>
        </>
    }
}
