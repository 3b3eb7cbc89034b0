//! The data-parallel page: `crate::logic::data_parallel::view` as two lanes (the
//! backward part by part, each bucket's ring all-reduce on the communication stream), the
//! communication left exposed, and per ZeRO stage what one rank holds and sends.

use crate::app::components::{
    Banner, BannerKind, PageHeader, Segment, Select, SizeInput, StackedBar, Stat, Toggle,
};
use crate::app::util::edit;
use crate::logic::data_parallel::{
    DpInput, DpView, MAX_LAYERS, MAX_RANKS, StageRow, Timeline, preset_options, view,
};
use crate::logic::site::PageId;
use brrr_perf::table;
use yew::prelude::*;

/// Drawing size of the timeline (the SVG scales to the page's width).
const WIDTH: f64 = 1000.0;
const LANE: f64 = 34.0;
const LEFT: f64 = 110.0;

/// The data-parallel page.
#[function_component(DataParallelPage)]
pub fn data_parallel_page() -> Html {
    let input = use_state(DpInput::default);
    html! {
        <section class="page">
            <PageHeader id={PageId::DataParallel} />
            <div class="layout">
                <aside class="panel controls">{ controls(&input) }</aside>
                <div class="results">
                    { match view(&input) {
                        Ok(v) => results(&input, &v),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e }</Banner> },
                    } }
                </div>
            </div>
        </section>
    }
}

fn controls(input: &UseStateHandle<DpInput>) -> Html {
    let size = |id: &'static str,
                label: &'static str,
                value: u64,
                (min, max): (u64, u64),
                set: fn(&mut DpInput, u64)| {
        let on_change = edit(input, move |i: &mut DpInput, v: u64| set(i, v));
        html! { <SizeInput id={id} label={label} {value} {min} {max} linear={max <= 256} {on_change} /> }
    };
    let custom = input.preset == "custom";
    html! {
        <>
            <Select id="dp-preset" label="Model" options={preset_options()} selected={input.preset.clone()}
                on_change={edit(input, |i: &mut DpInput, k: String| i.preset = k)} />
            if custom {
                { size("dp-layers", "layers L", input.layers, (1, MAX_LAYERS), |i, v| i.layers = v) }
                { size("dp-hidden", "width C", input.hidden, (1, 65536), |i, v| i.hidden = v) }
                { size("dp-seq", "context T", input.seq, (1, 1 << 20), |i, v| i.seq = v) }
                { size("dp-vocab", "vocabulary V", input.vocab, (1, 1 << 20), |i, v| i.vocab = v) }
            }
            <Toggle id="dp-mixed" label="mixed precision (2-byte gradients)" checked={input.mixed}
                on_change={edit(input, |i: &mut DpInput, b: bool| i.mixed = b)} />
            { size("dp-ranks", "ranks n", input.ranks, (1, MAX_RANKS), |i, v| i.ranks = v) }
            { size("dp-bucket", "bucket size (MiB)", input.bucket_mib, (1, 1024), |i, v| i.bucket_mib = v) }
            { size("dp-first-bucket", "first bucket (MiB)", input.first_bucket_mib, (1, 1024), |i, v| i.first_bucket_mib = v) }
            { size("dp-layer-us", "backward per block (µs)", input.layer_us, (1, 1_000_000), |i, v| i.layer_us = v) }
            { size("dp-link", "link bandwidth (GB/s, one way)", input.link_gbs, (1, 10_000), |i, v| i.link_gbs = v) }
            { size("dp-alpha", "latency α per message (µs)", input.alpha_us, (0, 1000), |i, v| i.alpha_us = v) }
            <p class="muted small">{ "A model, not a measurement: every block's backward takes the time above, the tied LM head's that time × V/(12C), the embeddings' none. Buckets in reverse parameter order (brrr_dp::assign_buckets), one communication stream." }</p>
        </>
    }
}

fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

fn results(input: &DpInput, v: &DpView) -> Html {
    let Ok(t) = &v.timeline else {
        let why = v.timeline.as_ref().err().cloned().unwrap_or_default();
        return html! {
            <>
                <div class="stats">
                    <Stat label="Parameters Ψ" text={table::count(v.params)} value={v.params} id="dp-params" />
                </div>
                <Banner kind={BannerKind::Info}>{ format!("No bucket timeline for this model: {why}") }</Banner>
                { zero_table(input, v) }
            </>
        };
    };
    html! {
        <>
            <div class="stats">
                <Stat label="Parameters Ψ" text={table::count(v.params)} value={v.params} id="dp-params" />
                <Stat label="Buckets" text={t.comms.len().to_string()} value={t.comms.len() as f64} id="dp-buckets" />
                <Stat label="Backward" text={ms(t.backward)} value={t.backward} id="dp-backward" />
                <Stat label="All-reduces" text={ms(t.comm_total)} value={t.comm_total} id="dp-comm"
                    note="sum of the buckets' ring all-reduce times" />
                <Stat label="Exposed" text={ms(t.exposed)} value={t.exposed} id="dp-exposed" strong=true
                    note="communication after the backward ends" />
                <Stat label="Hidden" text={table::percent(t.hidden)} value={t.hidden} id="dp-hidden" strong=true
                    note="share of communication time inside the backward" />
            </div>
            { timeline(t) }
            { zero_table(input, v) }
        </>
    }
}

fn lane_rect(x0: f64, x1: f64, y: f64, fill: &str, tip: String, label: &str) -> Html {
    let w = (x1 - x0).max(0.5);
    let text = (w > 7.0 * label.len() as f64).then(|| html! {
        <text x={format!("{:.1}", x0 + w / 2.0)} y={format!("{:.1}", y + LANE * 0.55)} font-size="11" fill="white" text-anchor="middle">{ label.to_string() }</text>
    });
    html! {
        <g>
            <rect x={format!("{x0:.2}")} y={format!("{y:.1}")} width={format!("{w:.2}")} height={format!("{:.1}", LANE - 6.0)} fill={fill.to_string()} stroke="white" stroke-width="0.5">
                <title>{ tip }</title>
            </rect>
            { text.unwrap_or_default() }
        </g>
    }
}

fn timeline(t: &Timeline) -> Html {
    let inner = WIDTH - LEFT - 8.0;
    let span = t.end.max(1e-12);
    let x = |s: f64| LEFT + s / span * inner;
    let height = 2.0 * LANE + 28.0;
    let parts = t.parts.iter().filter(|p| p.end > p.start).map(|p| {
        let tip = format!("backward {}: {} – {}", p.name, ms(p.start), ms(p.end));
        lane_rect(x(p.start), x(p.end), 4.0, "#3b6fb6", tip, &p.name)
    });
    let comms = t.comms.iter().map(|c| {
        let tip = format!(
            "all-reduce bucket {}: {} parameters, {}, ready at {}, {} – {}",
            c.bucket,
            c.params,
            table::bytes_binary(c.bytes),
            ms(c.ready),
            ms(c.start),
            ms(c.end)
        );
        let fill = if c.end > t.backward + 1e-15 {
            "#c0504d"
        } else {
            "#e08a2c"
        };
        lane_rect(
            x(c.start),
            x(c.end),
            4.0 + LANE,
            fill,
            tip,
            &format!("b{}", c.bucket),
        )
    });
    let end_x = x(t.backward);
    html! {
        <div class="panel" data-testid="dp-timeline">
            <svg viewBox={format!("0 0 {WIDTH} {height:.0}")} width="100%" role="img" aria-label="backward and all-reduce timeline">
                <text x="4" y={format!("{:.1}", 4.0 + LANE * 0.55)} font-size="12">{ "backward" }</text>
                <text x="4" y={format!("{:.1}", 4.0 + LANE * 1.55)} font-size="12">{ "all-reduce" }</text>
                { for parts }
                { for comms }
                <line x1={format!("{end_x:.1}")} x2={format!("{end_x:.1}")} y1="0" y2={format!("{:.0}", 2.0 * LANE + 6.0)} stroke="#333" stroke-dasharray="4 3" />
                <text x={format!("{:.1}", LEFT)} y={format!("{:.0}", height - 4.0)} font-size="11">{ "0" }</text>
                <text x={format!("{:.1}", end_x)} y={format!("{:.0}", height - 4.0)} font-size="11" text-anchor="middle">{ format!("backward ends {}", ms(t.backward)) }</text>
                <text x={format!("{:.1}", WIDTH - 8.0)} y={format!("{:.0}", height - 4.0)} font-size="11" text-anchor="end">{ ms(t.end) }</text>
            </svg>
            <p class="muted small">{ "Blue: backward of the head, the blocks from the last, the embeddings. Orange: a bucket's all-reduce inside the backward; red: one that ends after it. Hover a block for its times and size." }</p>
        </div>
    }
}

fn bar(row: &StageRow) -> Vec<Segment> {
    let s = &row.states;
    [
        ("weights", s.weights, "#3b6fb6"),
        ("gradients", s.gradients, "#e08a2c"),
        ("master weights", s.master_weights, "#7a5cad"),
        ("optimizer states", s.optimizer_states, "#4f9a5b"),
    ]
    .into_iter()
    // f32 training keeps no master copy: no empty entry in the legend.
    .filter(|part| part.1 > 0.0)
    .map(|(label, value, color)| Segment {
        label: label.to_string(),
        value,
        color: color.to_string(),
    })
    .collect()
}

fn zero_table(input: &DpInput, v: &DpView) -> Html {
    const NAMES: [&str; 4] = [
        "0 (DDP)",
        "1: optimizer states sharded",
        "2: + gradients",
        "3 (FSDP): + weights",
    ];
    // Every bar on the scale of DDP's (the capacity line marks it), so that the stages
    // compare by length.
    let ddp = v.stages.first().map_or(0.0, |r| r.states.total());
    let rows = v.stages.iter().map(|row| {
        let k = row.stage;
        let total = row.states.total();
        html! {
            <div class="zero-stage">
                <h3>{ format!("ZeRO {}", NAMES[usize::from(k)]) }</h3>
                <p>
                    { "per rank " }
                    <strong data-testid={format!("dp-mem-{k}")} data-value={total.to_string()}>{ table::bytes_binary(total) }</strong>
                    { ", sends per step " }
                    <strong data-testid={format!("dp-sent-{k}")} data-value={row.sent.to_string()}>{ table::bytes(row.sent) }</strong>
                </p>
                <StackedBar id={format!("dp-bar-{k}")} segments={bar(row)} capacity={Some((ddp, "ZeRO 0 (DDP)".to_string()))} />
            </div>
        }
    });
    let precision = if input.mixed {
        "mixed precision: 2Ψ weights + 2Ψ gradients + 4Ψ master + 8Ψ Adam moments (ZeRO's K = 12)"
    } else {
        "f32 as brrr-dp trains: 4Ψ weights + 4Ψ gradients + 8Ψ AdamW moments"
    };
    html! {
        <div class="panel" data-testid="dp-zero">
            <h2>{ format!("What one of {} ranks holds and sends", input.ranks) }</h2>
            { for rows }
            <p class="muted small">{ format!(
                "Model states only (brrr_perf::memory::model_state_bytes), {precision}. Sent: a ring moves (n−1)/n of each volume per rank; ZeRO 0–2 send 2Ψ gradient elements (all-reduce, or reduce-scatter + all-gather), ZeRO 3 3Ψ (weights all-gathered in the forward and again in the backward, gradients reduce-scattered)."
            ) }</p>
        </div>
    }
}
