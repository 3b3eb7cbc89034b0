//! Activation recomputation: a GPT shape and a strategy, planned by `brrr-checkpoint`
//! (through `crate::logic::checkpointing`); what each segment keeps, the extra forward
//! compute, and the memory curve through forward and backward against the budget.

use crate::app::components::{
    Banner, BannerKind, Chart, PageHeader, Select, Series, SeriesStyle, SizeInput, Stat,
};
use crate::app::util::edit;
use crate::logic::checkpointing::{
    CheckpointInput, CheckpointView, Kept, MAX_LAYERS, STRATEGIES, curve_points, op_tips, plan,
};
use crate::logic::site::PageId;
use brrr_checkpoint::GptShape;
use brrr_perf::table;
use yew::prelude::*;

/// The checkpointing page.
#[function_component(CheckpointingPage)]
pub fn checkpointing_page() -> Html {
    let input = use_state(CheckpointInput::default);
    let result = plan(&input);
    html! {
        <section class="page">
            <PageHeader id={PageId::Checkpointing} />
            <div class="layout">
                <aside class="panel controls">
                    { shape_controls(&input) }
                    { strategy_controls(&input, result.as_ref().ok()) }
                </aside>
                <div class="results">
                    { match &result {
                        Ok(v) => results(v),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e.to_string() }</Banner> },
                    } }
                </div>
            </div>
        </section>
    }
}

fn shape_controls(input: &UseStateHandle<CheckpointInput>) -> Html {
    let s = &input.shape;
    let size = |id: &'static str,
                label: &'static str,
                value: usize,
                (min, max): (u64, u64),
                set: fn(&mut GptShape, usize)| {
        let on_change = edit(input, move |i: &mut CheckpointInput, v: u64| {
            set(&mut i.shape, usize::try_from(v).unwrap_or(usize::MAX));
        });
        let linear = max <= 256;
        html! { <SizeInput id={id} label={label} value={value as u64} {min} {max} {linear} {on_change} /> }
    };
    html! {
        <>
            { size("ckpt-layers", "layers", s.n_layer, (1, MAX_LAYERS), |s, v| s.n_layer = v) }
            { size("ckpt-width", "width C", s.n_embd, (8, 16384), |s, v| s.n_embd = v) }
            { size("ckpt-heads", "attention heads", s.n_head, (1, 128), |s, v| s.n_head = v) }
            { size("ckpt-context", "context T (tokens)", s.seq_len, (8, 32768), |s, v| s.seq_len = v) }
            { size("ckpt-batch", "micro-batch B (sequences)", s.batch, (1, 512), |s, v| s.batch = v) }
            { size("ckpt-vocab", "vocabulary", s.vocab_size, (2, 1 << 18), |s, v| s.vocab_size = v) }
            <p class="muted small">{ "Activations in f32 (4 bytes), as brrr trains." }</p>
        </>
    }
}

fn strategy_controls(
    input: &UseStateHandle<CheckpointInput>,
    view: Option<&CheckpointView>,
) -> Html {
    let options: Vec<(String, String)> = STRATEGIES
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let on_strategy = edit(input, |i: &mut CheckpointInput, k: String| i.strategy = k);
    let segments = input.shape.n_layer as u64 + 1;
    let every = html! {
        <SizeInput id="ckpt-every" label="K (segments per group)" value={input.every as u64} min={1} max={segments} linear=true
            on_change={edit(input, |i: &mut CheckpointInput, v: u64| i.every = usize::try_from(v).unwrap_or(1))} />
    };
    // The budget slider runs from the smallest feasible budget to the peak without
    // recomputation, both from the planner.
    let budget = view.and_then(|v| v.budget.map(|b| (b, v.min_budget, v.none_peak)));
    let budget = budget.map(|(b, lo, hi)| {
        html! {
            <>
                <SizeInput id="ckpt-budget" label="memory budget (bytes)" value={b} min={lo} max={hi}
                    on_change={edit(input, |i: &mut CheckpointInput, v: u64| i.budget = Some(v))} />
                <p class="muted small" data-testid="ckpt-budget-text">{ format!("{}, from the smallest feasible {} to the {} held without recomputation.",
                    table::bytes_binary(b as f64), table::bytes_binary(lo as f64), table::bytes_binary(hi as f64)) }</p>
            </>
        }
    });
    html! {
        <>
            <Select id="ckpt-strategy" label="Strategy" options={options} selected={input.strategy.clone()} on_change={on_strategy} />
            if input.strategy == "every" { { every } }
            { budget.unwrap_or_default() }
        </>
    }
}

fn results(v: &CheckpointView) -> Html {
    let peak = v.curve.peak as f64;
    let saved = 1.0 - peak / v.none_peak as f64;
    let inputs = v.segments.iter().filter(|s| s.kept == Kept::Input).count();
    let recomputed: usize = v.segments.iter().map(|s| s.recomputed).sum();
    html! {
        <>
            <div class="stats">
                <Stat label="Peak memory" text={table::bytes_binary(peak)} value={peak} id="ckpt-peak" strong=true
                    note={format!("{} less than without recomputation", table::percent(saved))} />
                <Stat label="Extra forward compute" text={format!("{:.1} %", v.extra_percent)} value={v.extra_percent} id="ckpt-extra"
                    note={format!("{recomputed} segment forwards run again")} />
                <Stat label="Peak without recomputation" text={table::bytes_binary(v.none_peak as f64)} value={v.none_peak as f64} id="ckpt-none-peak" />
                <Stat label="All activations" text={table::bytes_binary(v.activations as f64)} value={v.activations as f64} id="ckpt-activations"
                    note="every input and stash, held after a forward without recomputation" />
                <Stat label="Smallest feasible budget" text={table::bytes_binary(v.min_budget as f64)} value={v.min_budget as f64} id="ckpt-min-budget" />
                <Stat label="Kept inputs" text={inputs.to_string()} value={inputs as f64} id="ckpt-kept-inputs"
                    note={format!("of {} segments", v.segments.len())} />
            </div>
            <h2>{ format!("What the forward keeps ({})", strategy_text(v)) }</h2>
            { segment_row(v) }
            <h2>{ "Memory through the forward and the backward" }</h2>
            { memory_chart(v) }
            <details>
                <summary>{ format!("The schedule ({} ops)", v.schedule.ops.len()) }</summary>
                <pre class="ckpt-schedule" data-testid="ckpt-schedule">{ v.schedule.to_text() }</pre>
            </details>
            <p class="muted small">
                { "Bytes per segment counted from brrr-nn's stashes (GptShape::chain); the curve is Schedule::simulate's \
                   model, checked against the device's allocator in brrr-checkpoint's tests. Compute in FLOPs of the forward \
                   GEMMs. The budget's schedule is the cheapest that fits (Beaumont et al. 2019)." }
            </p>
        </>
    }
}

/// The strategy by name (`sqrt`, `every:4`), a budget in binary units.
fn strategy_text(v: &CheckpointView) -> String {
    match v.budget {
        Some(b) => format!("budget of {}", table::bytes_binary(b as f64)),
        None => v.strategy.to_string(),
    }
}

/// The row of boxes: one per segment, coloured by what the first forward keeps.
fn segment_row(v: &CheckpointView) -> Html {
    let boxes = v.segments.iter().map(|s| {
        let what = match s.kept {
            Kept::All => "keeps its stash",
            Kept::Selective => "keeps its stash without attention's scores",
            Kept::Input => "keeps its input only",
            Kept::Dropped => "keeps nothing",
        };
        let title = format!("{}: {what}; recomputed {} time(s) in the backward", s.name, s.recomputed);
        html! {
            <div class={classes!("ckpt-box", s.kept.key())} data-testid="ckpt-seg" data-kept={s.kept.key()}
                data-recomputed={s.recomputed.to_string()} title={title}>
                <span>{ &s.name }</span>
                if s.recomputed > 0 { <small>{ format!("↻{}", s.recomputed) }</small> }
            </div>
        }
    });
    let legend = [Kept::Input, Kept::All, Kept::Selective, Kept::Dropped].map(|k| {
        let text = match k {
            Kept::Input => "kept input",
            Kept::All => "kept all (stash)",
            Kept::Selective => "kept all but the scores",
            Kept::Dropped => "dropped",
        };
        html! { <span class="legend-item"><i class={classes!("ckpt-swatch", k.key())}></i>{ text }</span> }
    });
    html! {
        <>
            <div class="ckpt-row" data-testid="ckpt-row">{ for boxes }</div>
            <div class="legend">{ for legend }<span class="legend-item">{ "↻n: recomputed n times" }</span></div>
        </>
    }
}

fn memory_chart(v: &CheckpointView) -> Html {
    let (during, after) = curve_points(&v.curve);
    let last = during.len() as f64;
    let mut during = Series::new("during each op", "#2563eb", SeriesStyle::LinePoints, during);
    during.tips = op_tips(v);
    let mut series = vec![
        during,
        Series::new("after each op", "#94a3b8", SeriesStyle::Line, after),
    ];
    let (line, name, color) = match v.budget {
        Some(b) => (b, "budget", "#dc2626"),
        None => (v.none_peak, "peak without recomputation", "#f59e0b"),
    };
    series.push(Series::new(
        format!("{name} ({})", table::bytes_binary(line as f64)),
        color,
        SeriesStyle::Line,
        vec![(1.0, line as f64), (last, line as f64)],
    ));
    let fwd = v.schedule.forward_len() as f64;
    html! {
        <Chart id="ckpt-chart" x_label="op (forward, then backward with its recomputations)" y_label="bytes held"
            series={series} y_include={Some(0.0)} x_marks={vec![(fwd + 0.5, "backward →".to_string())]} />
    }
}
