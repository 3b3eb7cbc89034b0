//! The pipeline page: pick p, m, v and a schedule; `brrr-pp` generates, validates and
//! simulates it (through `crate::logic::pipeline`), and the page draws the timeline
//! (stages × time, F/B/W coloured, idle time pale red), the bubble beside the closed
//! form, and the micro-batches each stage holds.

use crate::app::components::{Banner, BannerKind, PageHeader, Select, SizeInput, Stat};
use crate::app::util::edit;
use crate::logic::pipeline::{
    MAX_CHUNKS, MAX_MICRO_BATCHES, MAX_STAGES, PipelineInput, PipelineView, SCHEDULES, view,
};
use crate::logic::site::PageId;
use brrr_perf::table;
use yew::prelude::*;

/// Drawing size of the timeline (the SVG scales to the page's width).
const WIDTH: f64 = 1000.0;
const ROW: f64 = 28.0;
const LEFT: f64 = 64.0;

/// The pipeline page.
#[function_component(PipelinePage)]
pub fn pipeline_page() -> Html {
    let input = use_state(PipelineInput::default);
    let result = view(&input);
    html! {
        <section class="page">
            <PageHeader id={PageId::Pipeline} />
            <div class="layout">
                <aside class="panel controls">{ controls(&input) }</aside>
                <div class="results">
                    { match &result {
                        Ok(v) => results(v),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e.clone() }</Banner> },
                    } }
                </div>
            </div>
        </section>
    }
}

fn controls(input: &UseStateHandle<PipelineInput>) -> Html {
    let options: Vec<(String, String)> = SCHEDULES
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let size = |id: &'static str,
                label: &'static str,
                value: usize,
                max: usize,
                set: fn(&mut PipelineInput, usize)| {
        let on_change = edit(input, move |i: &mut PipelineInput, v: u64| {
            set(i, usize::try_from(v).unwrap_or(1));
        });
        html! { <SizeInput id={id} label={label} value={value as u64} min={1} max={max as u64} linear=true {on_change} /> }
    };
    html! {
        <>
            <Select id="pp-schedule" label="Schedule" options={options} selected={input.schedule.clone()}
                on_change={edit(input, |i: &mut PipelineInput, k: String| i.schedule = k)} />
            { size("pp-stages", "stages p", input.p, MAX_STAGES, |i, v| i.p = v) }
            { size("pp-micro-batches", "micro-batches m", input.m, MAX_MICRO_BATCHES, |i, v| i.m = v) }
            if input.schedule == "interleaved" {
                { size("pp-chunks", "chunks per stage v", input.v, MAX_CHUNKS, |i, v| i.v = v) }
            }
            <p class="muted small">{ "F = B = W = 1 per stage; an interleaved chunk costs 1/v of that." }</p>
        </>
    }
}

fn results(v: &PipelineView) -> Html {
    let t = &v.timeline;
    let theory = v.theory.map_or("-".to_string(), table::percent);
    html! {
        <>
            <div class="stats">
                <Stat label="Bubble (simulated)" text={table::percent(v.bubble)} value={v.bubble} id="pp-bubble" strong=true
                    note="idle share of all stages' time in one step" />
                <Stat label="Bubble (theory)" text={theory} value={v.theory} id="pp-theory"
                    note={if v.kind == brrr_pp::ScheduleKind::ZbH2 { "for steps back to back" } else { "closed form" }} />
                <Stat label="Back to back" text={table::percent(v.steady)} value={v.steady} id="pp-steady"
                    note="bubble when each stage starts the next step as soon as it is done" />
                <Stat label="Step time" text={format!("{:.2}", t.makespan)} value={t.makespan} id="pp-makespan"
                    note="in units of one F" />
            </div>
            { timeline(v) }
            { stage_table(v) }
        </>
    }
}

fn timeline(v: &PipelineView) -> Html {
    let p = v.timeline.p;
    let height = ROW * p as f64 + 8.0;
    let inner = WIDTH - LEFT - 8.0;
    let rows = (0..p).map(|r| {
        let y = ROW * r as f64 + 4.0;
        html! {
            <g>
                <text x="4" y={format!("{:.1}", y + ROW * 0.6)} font-size="12">{ format!("stage {r}") }</text>
                <rect x={LEFT.to_string()} y={format!("{y:.1}")} width={format!("{inner:.1}")} height={format!("{:.1}", ROW - 4.0)} fill="#f6dcdc" />
            </g>
        }
    });
    let blocks = v.blocks.iter().map(|b| {
        let x = LEFT + b.x * inner;
        let w = (b.w * inner).max(0.5);
        let y = ROW * b.stage as f64 + 4.0;
        let label = (w > 7.0 * b.label.len() as f64).then(|| html! {
            <text x={format!("{:.1}", x + w / 2.0)} y={format!("{:.1}", y + ROW * 0.55)} font-size="11" fill="white" text-anchor="middle">{ b.label.clone() }</text>
        });
        html! {
            <g>
                <rect x={format!("{x:.2}")} y={format!("{y:.1}")} width={format!("{w:.2}")} height={format!("{:.1}", ROW - 4.0)} fill={b.colour} stroke="white" stroke-width="0.5">
                    <title>{ b.tip.clone() }</title>
                </rect>
                { label.unwrap_or_default() }
            </g>
        }
    });
    html! {
        <div class="panel" data-testid="pp-timeline">
            <svg viewBox={format!("0 0 {WIDTH} {height:.0}")} width="100%" role="img" aria-label="pipeline timeline">
                { for rows }
                { for blocks }
            </svg>
            <p class="muted small">{ "F blue, B green, W orange, BW (B and W fused) teal; pale red is idle. Hover a block for its action and times." }</p>
        </div>
    }
}

fn stage_table(v: &PipelineView) -> Html {
    let t = &v.timeline;
    let rows = (0..t.p).map(|r| {
        html! {
            <tr>
                <td>{ r }</td>
                <td class="num">{ table::percent(t.idle_fraction(r)) }</td>
                <td class="num" data-testid={format!("pp-in-flight-{r}")}>{ t.peak_in_flight[r] }</td>
                <td class="num">{ t.peak_pending_w[r] }</td>
                <td><code class="small">{ v.orders[r].clone() }</code></td>
            </tr>
        }
    });
    html! {
        <div class="panel">
            <table class="table">
                <thead><tr><th>{ "stage" }</th><th>{ "idle" }</th><th>{ "activations in flight (peak)" }</th><th>{ "pending W (peak)" }</th><th>{ "order" }</th></tr></thead>
                <tbody>{ for rows }</tbody>
            </table>
            <p class="muted small">{ "Interleaved: in flight counts chunk stashes, each 1/v of a stage's layers." }</p>
        </div>
    }
}
