//! Data loading: the loader and the training step on a timeline with prefetching off and
//! on (simulated by `crate::logic::data_loading` from the reader's times), and documents
//! packed into rows and balanced over ranks by `brrr_data::pack` compiled to wasm32.

use crate::app::components::{Banner, BannerKind, PageHeader, SizeInput, Stat};
use crate::app::util::edit;
use crate::logic::data_loading::{
    BalanceView, LoaderInput, LoaderView, MAX_DOCS, MAX_LEN, MAX_STEPS, PackInput, PackView, Span,
    Timeline, balance_view, loader_view, pack_view,
};
use crate::logic::site::PageId;
use brrr_perf::table;
use yew::prelude::*;

/// The data-loading page.
#[function_component(DataLoadingPage)]
pub fn data_loading_page() -> Html {
    html! {
        <section class="page">
            <PageHeader id={PageId::DataLoading} />
            <h2>{ "The loader and the step, with prefetching off and on" }</h2>
            <PrefetchTimeline />
            <h2>{ "Packing documents into rows, balancing them over ranks" }</h2>
            <PackingBalance />
        </section>
    }
}

#[function_component(PrefetchTimeline)]
fn prefetch_timeline() -> Html {
    let input = use_state(LoaderInput::default);
    let ms = |id: &'static str, label: &'static str, value: f64, set: fn(&mut LoaderInput, u64)| {
        html! { <SizeInput id={id} label={label} value={value as u64} min={1} max={1000} linear=true on_change={edit(&input, set)} /> }
    };
    let view = loader_view(&input);
    html! {
        <div class="layout">
            <aside class="panel controls">
                { ms("dl-load", "producing a batch (ms)", input.load_ms, |i, v| i.load_ms = v as f64) }
                { ms("dl-step", "one training step (ms)", input.step_ms, |i, v| i.step_ms = v as f64) }
                <SizeInput id="dl-depth" label="prefetch depth (channel slots)" value={input.depth as u64} min={1} max={8} linear=true
                    on_change={edit(&input, |i: &mut LoaderInput, v: u64| i.depth = v as usize)} />
                <SizeInput id="dl-steps" label="steps" value={input.steps as u64} min={1} max={MAX_STEPS as u64} linear=true
                    on_change={edit(&input, |i: &mut LoaderInput, v: u64| i.steps = v as usize)} />
                <p class="muted small">{ "A simulation of the two ways brrr-data feeds the trainer, from the times set here: the trainer \
                    producing each batch itself, or brrr_data::Prefetcher's thread handing batches over a channel of “depth” slots \
                    (brrr train --prefetch N). Make producing slower than a step to see the loader set the pace." }</p>
            </aside>
            <div class="results">
                { match view {
                    Ok(v) => timeline_results(&v),
                    Err(e) => html! { <Banner kind={BannerKind::Error}>{ e }</Banner> },
                } }
            </div>
        </div>
    }
}

fn timeline_results(v: &LoaderView) -> Html {
    let n = v.off.steps.len() as f64;
    let span = v.off.total_ms.max(v.on.total_ms).max(1.0);
    html! {
        <>
            <div class="stats">
                <Stat label="Without prefetching" text={format!("{:.0} ms", v.off.total_ms)} value={v.off.total_ms} id="dl-total-off"
                    note={format!("waiting {:.0} ms ({})", v.off.wait_ms, table::percent(v.off.wait_ms / v.off.total_ms.max(1e-9)))} />
                <Stat label="With prefetching" text={format!("{:.0} ms", v.on.total_ms)} value={v.on.total_ms} id="dl-total-on" strong=true
                    note={format!("waiting {:.0} ms ({})", v.on.wait_ms, table::percent(v.on.wait_ms / v.on.total_ms.max(1e-9)))} />
                <Stat label="Speed-up" text={format!("{:.2}×", v.speedup)} value={v.speedup} id="dl-speedup" />
                <Stat label="Wait per step, steady" text={format!("{:.0} → {:.0} ms", v.steady_wait_off_ms, v.steady_wait_on_ms)}
                    value={v.steady_wait_on_ms} id="dl-steady-wait" note={format!("over {n:.0} steps: {:.1} → {:.1} ms on average",
                        v.off.wait_ms / n, v.on.wait_ms / n)} />
            </div>
            { timeline_svg("dl-timeline-off", "prefetching off", &v.off, span) }
            { timeline_svg("dl-timeline-on", "prefetching on", &v.on, span) }
            <div class="legend">
                <span class="legend-item"><i class="dl-swatch load"></i>{ "producing a batch" }</span>
                <span class="legend-item"><i class="dl-swatch blocked"></i>{ "producer blocked: channel full" }</span>
                <span class="legend-item"><i class="dl-swatch step"></i>{ "training step" }</span>
                <span class="legend-item"><i class="dl-swatch wait"></i>{ "trainer waiting for data" }</span>
            </div>
        </>
    }
}

const TW: f64 = 720.0;
const LANE: f64 = 26.0;
const LABEL: f64 = 70.0;

/// Two lanes (loader, trainer) of one timeline; `span` ms is the full width, shared by
/// both timelines so their lengths compare.
fn timeline_svg(id: &'static str, title: &str, t: &Timeline, span: f64) -> Html {
    let x = |ms: f64| LABEL + ms / span * (TW - LABEL - 8.0);
    let rect = |s: &Span, lane: f64, class: &'static str| {
        let w = (x(s.end) - x(s.start)).max(0.5);
        // Batch numbers on what the loader makes and the trainer runs; a blocked or a
        // waiting span belongs to the batch beside it.
        let label = (w > 16.0 && matches!(class, "load" | "step")).then(|| s.batch.to_string());
        let y = 18.0 + lane * (LANE + 6.0);
        html! {
            <g>
                <rect class={classes!("dl", class)} x={format!("{:.1}", x(s.start))} y={y.to_string()} width={format!("{w:.1}")} height={LANE.to_string()}>
                    <title>{ format!("batch {}: {:.0}–{:.0} ms", s.batch, s.start, s.end) }</title>
                </rect>
                if let Some(l) = label {
                    <text x={format!("{:.1}", x(s.start) + w / 2.0)} y={(y + 17.0).to_string()} text-anchor="middle" class="dl-num">{ l }</text>
                }
            </g>
        }
    };
    let height = 18.0 + 2.0 * (LANE + 6.0) + 4.0;
    html! {
        <svg class="dl-timeline" data-testid={id} data-total={format!("{}", t.total_ms)} viewBox={format!("0 0 {TW} {height}")} role="img" aria-label={title.to_string()}>
            <text x="0" y="12" class="dl-title">{ format!("{title}: {:.0} ms", t.total_ms) }</text>
            <text x="0" y={(18.0 + 17.0).to_string()} class="dl-lane">{ "loader" }</text>
            <text x="0" y={(18.0 + LANE + 6.0 + 17.0).to_string()} class="dl-lane">{ "trainer" }</text>
            { for t.loads.iter().map(|s| rect(s, 0.0, "load")) }
            { for t.blocked.iter().map(|s| rect(s, 0.0, "blocked")) }
            { for t.waits.iter().map(|s| rect(s, 1.0, "wait")) }
            { for t.steps.iter().map(|s| rect(s, 1.0, "step")) }
        </svg>
    }
}

#[function_component(PackingBalance)]
fn packing_balance() -> Html {
    let input = use_state(PackInput::default);
    let size = |id: &'static str,
                label: &'static str,
                value: usize,
                (min, max): (u64, u64),
                set: fn(&mut PackInput, u64)| {
        html! { <SizeInput id={id} label={label} value={value as u64} {min} {max} linear={max <= 256} on_change={edit(&input, set)} /> }
    };
    let view = pack_view(&input).and_then(|p| balance_view(&p.lens, input.world).map(|b| (p, b)));
    html! {
        <div class="layout">
            <aside class="panel controls">
                { size("dl-docs", "documents", input.docs, (1, MAX_DOCS as u64), |i, v| i.docs = v as usize) }
                { size("dl-maxlen", "longest document (tokens)", input.max_len, (16, MAX_LEN as u64), |i, v| i.max_len = v as usize) }
                { size("dl-seq", "context (slots per row)", input.seq, (16, MAX_LEN as u64), |i, v| i.seq = v as usize) }
                { size("dl-world", "ranks", input.world, (1, 16), |i, v| i.world = v as usize) }
                { size("dl-seed", "seed", input.seed as usize, (0, 1000), |i, v| i.seed = v) }
                <p class="muted small">{ "Lengths from brrr_data::pack::long_tailed_lengths (Pareto-tailed: many short documents, a few long), \
                    packed by pack_documents (first-fit decreasing, positions restarting at each document, a segment id per document \
                    so attention stays inside it) and balanced by balance (longest first onto the cheapest rank, cost Σ len²)." }</p>
            </aside>
            <div class="results">
                { match view {
                    Ok((p, b)) => pack_results(&p, &b),
                    Err(e) => html! { <Banner kind={BannerKind::Error}>{ e }</Banner> },
                } }
            </div>
        </div>
    }
}

/// The most packed rows drawn.
const MAX_ROWS_DRAWN: usize = 40;

fn pack_results(p: &PackView, b: &BalanceView) -> Html {
    let rows = (0..p.rows.min(MAX_ROWS_DRAWN)).map(|r| {
        let pieces = p.placed.iter().filter(|x| x.row == r).map(|x| {
            let style = format!(
                "left:{:.3}%;width:{:.3}%;background:hsl({},65%,62%)",
                100.0 * x.start as f64 / p.seq as f64,
                100.0 * x.len as f64 / p.seq as f64,
                (x.piece * 47) % 360
            );
            html! { <div class="dl-piece" {style} title={format!("document piece {}: {} slots from {}", x.piece, x.len, x.start)}></div> }
        });
        html! { <div class="dl-row" data-testid="dl-row">{ for pieces }</div> }
    });
    let more = p.rows.saturating_sub(MAX_ROWS_DRAWN);
    html! {
        <>
            <div class="stats">
                <Stat label="Packed rows" text={p.rows.to_string()} value={p.rows as f64} id="dl-rows" strong=true
                    note={format!("{} filled with real targets", table::percent(p.fill))} />
                <Stat label="One document per row" text={p.padded_rows.to_string()} value={p.padded_rows as f64} id="dl-padded-rows"
                    note={format!("{} filled, the rest padding", table::percent(p.padded_fill))} />
                <Stat label="Imbalance, round robin" text={format!("{:.2}", b.imbalance_before)} value={b.imbalance_before} id="dl-imbalance-before"
                    note="slowest rank's Σ len² over the mean" />
                <Stat label="Imbalance, balanced" text={format!("{:.2}", b.imbalance_after)} value={b.imbalance_after} id="dl-imbalance-after" strong=true />
            </div>
            <h3>{ format!("{} documents in {} rows of {} slots", p.lens.len(), p.rows, p.seq) }</h3>
            <div class="dl-rows" data-testid="dl-packing">{ for rows }</div>
            if more > 0 { <p class="muted small">{ format!("… and {more} more rows") }</p> }
            <h3>{ "Attention cost per rank (Σ len²)" }</h3>
            { balance_bars(b) }
        </>
    }
}

fn balance_bars(b: &BalanceView) -> Html {
    let max = b
        .before
        .iter()
        .chain(&b.after)
        .cloned()
        .fold(0.0, f64::max)
        .max(1e-9);
    let bar = |c: f64, class: &'static str| {
        html! { <div class={classes!("dl-bar", class)} style={format!("width:{:.2}%", 100.0 * c / max)} title={format!("{c:.0}")}></div> }
    };
    let rows = b
        .before
        .iter()
        .zip(&b.after)
        .enumerate()
        .map(|(r, (&x, &y))| {
            html! {
                <div class="dl-rank" data-testid="dl-rank">
                    <span class="dl-rank-label">{ format!("rank {r}") }</span>
                    <div class="dl-bars">{ bar(x, "before") }{ bar(y, "after") }</div>
                </div>
            }
        });
    html! {
        <>
            <div data-testid="dl-balance">{ for rows }</div>
            <div class="legend">
                <span class="legend-item"><i class="dl-swatch before"></i>{ "round robin" }</span>
                <span class="legend-item"><i class="dl-swatch after"></i>{ "balanced" }</span>
            </div>
        </>
    }
}
