//! The layout planner: `crate::logic::plan::search` as a table of the best layouts (the
//! shares of each step) and a chart of every layout that fits, time against memory.

use crate::app::components::{
    Banner, BannerKind, Chart, GpuPicker, PageHeader, Select, Series, SeriesStyle, SizeInput, Stat,
};
use crate::app::util::edit;
use crate::logic::memory::{preset_menu, preset_of};
use crate::logic::plan::{PlanInput, points, search};
use crate::logic::roofline::find_gpu;
use crate::logic::site::PageId;
use brrr_perf::memory::TransformerConfig;
use brrr_perf::plan::{Plan, PlanInputs};
use brrr_perf::table;
use yew::prelude::*;

/// How many of the best layouts the table lists.
const TOP: usize = 10;

/// The layout planner page.
#[function_component(PlanPage)]
pub fn plan_page() -> Html {
    let input = use_state(PlanInput::default);
    let result = find_gpu(&input.gpu).and_then(|g| search(&input, &g));
    html! {
        <section class="page">
            <PageHeader id={PageId::Plan} />
            <div class="layout">
                <aside class="panel controls">{ controls(&input) }</aside>
                <div class="results">
                    { match &result {
                        Ok((inp, p)) => results(inp, p),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e.to_string() }</Banner> },
                    } }
                </div>
            </div>
        </section>
    }
}

fn controls(input: &UseStateHandle<PlanInput>) -> Html {
    let presets = preset_menu();
    let on_preset = edit(input, |i: &mut PlanInput, name: String| {
        if let Ok(cfg) = TransformerConfig::preset(&name) {
            i.model = cfg;
        }
    });
    let m = &input.model;
    let size = |id: &'static str,
                label: &'static str,
                value: u64,
                (min, max): (u64, u64),
                set: fn(&mut PlanInput, u64)| {
        let on_change = edit(input, move |i: &mut PlanInput, v: u64| set(i, v));
        html! { <SizeInput id={id} label={label} {value} {min} {max} {on_change} /> }
    };
    html! {
        <>
            <GpuPicker selected={input.gpu.clone()} on_change={edit(input, |i: &mut PlanInput, id: String| i.gpu = id)} />
            { size("gpus", "GPUs", input.gpus, (1, 4096), |i, v| i.gpus = v) }
            { size("batch", "global batch (sequences per step)", input.global_batch, (1, 1 << 16), |i, v| i.global_batch = v) }
            { size("efficiency", "GEMM efficiency (% of peak)", input.efficiency_pct, (1, 100), |i, v| i.efficiency_pct = v) }
            <Select id="preset" label="Model" options={presets} selected={preset_of(m).unwrap_or("custom")} on_change={on_preset} />
            { size("layers", "layers", m.layers, (1, 256), |i, v| i.model.layers = v) }
            { size("hidden", "hidden size", m.hidden, (1, 65536), |i, v| { i.model.hidden = v; i.model.ffn_hidden = v.saturating_mul(4) }) }
            { size("heads", "attention heads", m.heads, (1, 512), |i, v| i.model.heads = v) }
            { size("seq", "sequence length", m.seq_len, (1, 1 << 20), |i, v| i.model.seq_len = v) }
        </>
    }
}

fn results(inp: &PlanInputs, p: &Plan) -> Html {
    let Some(best) = p.candidates.first() else {
        let why = p.rejected.first().map_or(
            "no layout divides the batch and the GPUs".to_string(),
            |r| r.0.clone(),
        );
        return html! { <Banner kind={BannerKind::Error}>{ format!("No layout fits: {} layouts tried; most common reason: {why}. Add GPUs, or shrink the model or the sequence.", p.considered) }</Banner> };
    };
    let tokens = (inp.global_batch * inp.model.seq_len) as f64;
    html! {
        <>
            <Banner kind={BannerKind::Info}>{ format!("Best: {} — {} per step, {} MFU, limited by {}.",
                best.name, table::duration(best.time.total_s()), table::percent(best.mfu), best.time.limit()) }</Banner>
            <div class="stats">
                <Stat label="Layouts tried" text={p.considered.to_string()} value={p.considered as f64} id="considered" />
                <Stat label="That fit" text={p.candidates.len().to_string()} value={p.candidates.len() as f64} id="fit" strong=true />
                <Stat label="Tokens / step" text={table::count(tokens)} value={tokens} id="tokens" />
                <Stat label="Throughput" text={format!("{} tok/s", table::count(best.tokens_per_s))} value={best.tokens_per_s} id="throughput" />
            </div>
            { best_table(p) }
            { chart(p) }
            { rejected(p) }
        </>
    }
}

fn best_table(p: &Plan) -> Html {
    let rows = p.candidates.iter().take(TOP).enumerate().map(|(i, c)| {
        let s = &c.time;
        let share = |x: f64| table::percent(x / s.total_s());
        html! {
            <tr>
                <td class="num">{ i + 1 }</td>
                <td><code class="small">{ c.name.clone() }</code></td>
                <td class="num">{ table::bytes_binary(c.memory_bytes) }</td>
                <td class="num">{ table::duration(s.total_s()) }</td>
                <td class="num">{ table::percent(c.mfu) }</td>
                <td class="num">{ share(s.tp_s) }</td>
                <td class="num">{ share(s.dp_exposed_s) }</td>
                <td class="num">{ share(s.bubble_s + s.pp_s) }</td>
                <td>{ s.limit() }</td>
            </tr>
        }
    });
    html! {
        <div class="panel table-wrap">
            <table class="table" data-testid="plan-table">
                <thead><tr><th>{ "#" }</th><th>{ "layout" }</th><th>{ "memory/GPU" }</th><th>{ "step" }</th><th>{ "MFU" }</th>
                    <th>{ "tp comm" }</th><th>{ "dp exposed" }</th><th>{ "pipeline" }</th><th>{ "limited by" }</th></tr></thead>
                <tbody>{ for rows }</tbody>
            </table>
            <p class="muted small">{ "Shares of each step. Compute at the GEMM efficiency, less where the widest GEMM is memory-bound; tensor-parallel all-reduces not overlapped; data-parallel collectives hidden under the last micro-batch's backward as brrr-dp schedules them; bubble (p − 1)/(v·m). The same search as `brrr plan`." }</p>
        </div>
    }
}

fn chart(p: &Plan) -> Html {
    let pts = points(p);
    let split = pts.len().min(TOP);
    let series = vec![
        Series::new(
            "other layouts that fit",
            "#94a3b8",
            SeriesStyle::Points,
            pts[split..].to_vec(),
        ),
        Series::new(
            format!("best {split}"),
            "#2563eb",
            SeriesStyle::Points,
            pts[..split].to_vec(),
        ),
    ];
    html! {
        <Chart id="plan-chart" x_label="predicted seconds per step" y_label="GiB per GPU" series={series} y_include={Some(0.0)} />
    }
}

fn rejected(p: &Plan) -> Html {
    let rows = p.rejected.iter().take(5).map(|(reason, n, example)| {
        html! { <li>{ format!("{n} discarded: {reason} (e.g. {example})") }</li> }
    });
    html! { <ul class="muted small" data-testid="plan-rejected">{ for rows }</ul> }
}
