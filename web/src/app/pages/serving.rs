//! The serving page: set the requests, the KV cache and the token budget; brrr-serve's
//! scheduler runs them (through `crate::logic::serving`), and the page draws each step's
//! tokens by request (prefill chunks pale, decodes solid), the KV blocks in use and
//! cached under it, and the totals beside the same requests served one at a time.
//! Below, speculative decoding: brrr-serve's acceptance rule on stand-in distributions,
//! tokens per target forward and speed-up against `k` beside the formulas; and quantized
//! weights: brrr-serve's formats on a matrix with outliers, bytes against error.

use crate::app::components::{
    Banner, BannerKind, Chart, PageHeader, Series, SeriesStyle, SizeInput, Stat, Toggle,
};
use crate::app::util::edit;
use crate::logic::quantization::{COLS, MAX_OUTLIER, QuantInput, QuantView};
use crate::logic::serving::{
    MAX_BLOCKS, MAX_OUTPUT, MAX_PROMPT, MAX_REQUESTS, ServingInput, ServingView, view,
};
use crate::logic::site::PageId;
use crate::logic::speculative::{SpecInput, SpecView};
use yew::prelude::*;

/// Drawing size of the timeline (the SVG scales to the page's width).
const WIDTH: f64 = 1000.0;
const TOKENS_H: f64 = 180.0;
const BLOCKS_H: f64 = 90.0;

/// The serving page.
#[function_component(ServingPage)]
pub fn serving_page() -> Html {
    let input = use_state(ServingInput::default);
    let result = view(&input);
    let spec = use_state(SpecInput::default);
    let spec_result = crate::logic::speculative::view(&spec);
    let quant = use_state(QuantInput::default);
    let quant_result = crate::logic::quantization::view(&quant);
    html! {
        <section class="page">
            <PageHeader id={PageId::Serving} />
            <div class="layout">
                <aside class="panel controls">{ controls(&input) }</aside>
                <div class="results">
                    { match &result {
                        Ok(v) => results(&input, v),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e.clone() }</Banner> },
                    } }
                </div>
            </div>
            <h2>{ "Speculative decoding" }</h2>
            <div class="layout">
                <aside class="panel controls">{ spec_controls(&spec) }</aside>
                <div class="results">
                    { match &spec_result {
                        Ok(v) => spec_results(&spec, v),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e.clone() }</Banner> },
                    } }
                </div>
            </div>
            <h2>{ "Quantized weights" }</h2>
            <div class="layout">
                <aside class="panel controls">{ quant_controls(&quant) }</aside>
                <div class="results">
                    { match &quant_result {
                        Ok(v) => quant_results(v),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e.clone() }</Banner> },
                    } }
                </div>
            </div>
        </section>
    }
}

fn controls(input: &UseStateHandle<ServingInput>) -> Html {
    let size = |id: &'static str,
                label: &'static str,
                value: usize,
                (min, max): (usize, usize),
                set: fn(&mut ServingInput, usize)| {
        let on_change = edit(input, move |i: &mut ServingInput, v: u64| {
            set(i, usize::try_from(v).unwrap_or(1));
        });
        html! { <SizeInput id={id} label={label} value={value as u64} min={min as u64} max={max as u64} {on_change} /> }
    };
    html! {
        <>
            { size("serve-requests", "requests", input.requests, (1, MAX_REQUESTS), |i, v| i.requests = v) }
            { size("serve-gap", "steps between arrivals", input.arrival_gap, (0, 64), |i, v| i.arrival_gap = v) }
            { size("serve-prompt", "prompt tokens", input.prompt, (1, MAX_PROMPT), |i, v| {
                i.prompt = v;
                i.shared_prefix = i.shared_prefix.min(v);
            }) }
            { size("serve-shared", "shared prefix tokens", input.shared_prefix, (0, input.prompt), |i, v| i.shared_prefix = v) }
            { size("serve-output", "output tokens", input.output, (1, MAX_OUTPUT), |i, v| i.output = v) }
            { size("serve-block", "tokens per KV block", input.block_size, (1, 64), |i, v| i.block_size = v) }
            { size("serve-blocks", "KV blocks", input.num_blocks, (1, MAX_BLOCKS), |i, v| i.num_blocks = v) }
            { size("serve-budget", "tokens per step", input.max_batch_tokens, (1, 2048), |i, v| i.max_batch_tokens = v) }
            { size("serve-seqs", "requests running at most", input.max_seqs, (1, MAX_REQUESTS), |i, v| i.max_seqs = v) }
            <Toggle id="serve-prefix" label="prefix caching" checked={input.prefix_caching}
                on_change={edit(input, |i: &mut ServingInput, on: bool| i.prefix_caching = on)} />
            <p class="muted small">{ "The model is a stand-in that always samples the same token: \
                what the scheduler does depends only on how many tokens each request has and wants." }</p>
        </>
    }
}

fn results(input: &ServingInput, v: &ServingView) -> Html {
    let (b, one) = (&v.batched, &v.one_at_a_time);
    let speedup = one.steps as f64 / b.steps.max(1) as f64;
    let mean = |l: &[usize]| l.iter().sum::<usize>() as f64 / l.len().max(1) as f64;
    html! {
        <>
            if b.cut || one.cut {
                <Banner kind={BannerKind::Info}>{ "A run needed more steps than the page simulates; its numbers are for the steps run." }</Banner>
            }
            <div class="stats">
                <Stat label="Steps, continuous batching" text={b.steps.to_string()} value={b.steps as f64} id="serve-steps" strong=true
                    note={format!("{speedup:.1}× fewer than one request at a time ({})", one.steps)} />
                <Stat label="Mean latency" text={format!("{:.1} steps", mean(&b.latency))} value={mean(&b.latency)} id="serve-latency"
                    note={format!("arrival to last token; {:.1} one at a time", mean(&one.latency))} />
                <Stat label="Tokens computed" text={b.computed.to_string()} value={b.computed as f64} id="serve-computed"
                    note={format!("{} prompt tokens from the prefix cache", b.prefix_hits)} />
                <Stat label="Preemptions" text={b.preemptions.to_string()} value={b.preemptions as f64} id="serve-preempt"
                    note={format!("peak {} of {} KV blocks in use", b.peak_blocks, input.num_blocks)} />
            </div>
            { timeline(input, v) }
        </>
    }
}

/// A request's colour: hues spread around the wheel.
fn colour(i: usize, decode: bool) -> String {
    let hue = (i * 137) % 360;
    match decode {
        true => format!("hsl({hue}, 65%, 45%)"),
        false => format!("hsl({hue}, 65%, 78%)"),
    }
}

fn timeline(input: &ServingInput, v: &ServingView) -> Html {
    let n = v.steps.len().max(1);
    let w = WIDTH / n as f64;
    let budget = input.max_batch_tokens.max(1) as f64;
    let total = input.num_blocks.max(1) as f64;
    let columns = v.steps.iter().enumerate().map(|(t, s)| {
        let x = t as f64 * w;
        let mut y = TOKENS_H;
        let bars = s.work.iter().map(|&(i, len, decode)| {
            let h = TOKENS_H * len as f64 / budget;
            y -= h;
            let kind = if decode { "decode" } else { "prefill" };
            html! {
                <rect x={format!("{x:.2}")} y={format!("{y:.2}")} width={format!("{:.2}", w.max(0.5))} height={format!("{h:.2}")} fill={colour(i, decode)}>
                    <title>{ format!("step {t}: request {i}, {len} {kind} token(s)") }</title>
                </rect>
            }
        }).collect::<Html>();
        let used = BLOCKS_H * s.blocks_used as f64 / total;
        let cached = BLOCKS_H * (s.blocks_used.max(s.blocks_cached)) as f64 / total;
        let base = TOKENS_H + 12.0 + BLOCKS_H;
        html! {
            <g>
                { bars }
                <rect x={format!("{x:.2}")} y={format!("{:.2}", base - cached)} width={format!("{:.2}", w.max(0.5))} height={format!("{cached:.2}")} fill="#cfd8e3" />
                <rect x={format!("{x:.2}")} y={format!("{:.2}", base - used)} width={format!("{:.2}", w.max(0.5))} height={format!("{used:.2}")} fill="#5b6b80">
                    <title>{ format!("step {t}: {} blocks in use, {} cached, {} running, {} waiting", s.blocks_used, s.blocks_cached, s.running, s.waiting) }</title>
                </rect>
            </g>
        }
    });
    let height = TOKENS_H + 12.0 + BLOCKS_H + 4.0;
    html! {
        <div class="panel" data-testid="serve-timeline">
            <svg viewBox={format!("0 0 {WIDTH} {height:.0}")} width="100%" role="img" aria-label="serving timeline">
                <line x1="0" x2={WIDTH.to_string()} y1="0.5" y2="0.5" stroke="#999" stroke-dasharray="4 3" />
                { for columns }
            </svg>
            <p class="muted small">{ "Top: each step's tokens by request, up to the budget (the dashed line); \
                pale is prefill, solid is decode: one token per request, the thin strips at the \
                bottom. Bottom: KV blocks in use (dark) and kept for prefix caching (light), out \
                of the whole cache. Hover for numbers." }</p>
        </div>
    }
}

fn spec_controls(input: &UseStateHandle<SpecInput>) -> Html {
    let quality = edit(input, |i: &mut SpecInput, v: u64| {
        i.quality = u32::try_from(v).unwrap_or(100)
    });
    let cost = edit(input, |i: &mut SpecInput, v: u64| {
        i.cost = u32::try_from(v).unwrap_or(200)
    });
    html! {
        <>
            <SizeInput id="spec-quality" label="draft quality (% of the target's distribution)" value={u64::from(input.quality)} min={0} max={100} linear=true on_change={quality} />
            <SizeInput id="spec-cost" label="draft forward's cost (% of the target's)" value={u64::from(input.cost)} min={0} max={200} linear=true on_change={cost} />
            <p class="muted small">{ "brrr-serve's acceptance rule, run on stand-in distributions: \
                the draft's is the target's mixed with noise. A proposal x is kept with probability \
                min(1, p(x)/q(x)); the first one rejected is replaced by a draw from max(0, p − q). \
                Each k runs 1,000 steps." }</p>
        </>
    }
}

fn spec_results(input: &SpecInput, v: &SpecView) -> Html {
    let best = &v.rows[v.best_k - 1];
    let points = |f: fn(&crate::logic::speculative::SpecRow) -> f64| {
        v.rows
            .iter()
            .map(|r| (r.k as f64, f(r)))
            .collect::<Vec<_>>()
    };
    let series = vec![
        Series::new(
            "tokens per target forward, measured",
            "#2b6cb0",
            SeriesStyle::Points,
            points(|r| r.tokens),
        ),
        Series::new(
            "(1 − α^(k+1)) / (1 − α)",
            "#2b6cb0",
            SeriesStyle::Line,
            points(|r| r.tokens_formula),
        ),
        Series::new(
            "speed-up, measured",
            "#c05621",
            SeriesStyle::Points,
            points(|r| r.speedup),
        ),
        Series::new(
            "the formula over k·c + 1",
            "#c05621",
            SeriesStyle::Line,
            points(|r| r.speedup_formula),
        ),
    ];
    html! {
        <>
            <div class="stats">
                <Stat label="Acceptance rate" text={format!("{:.2}", v.alpha)} value={v.alpha} id="spec-alpha" strong=true
                    note={format!("α, proposals kept; Σ min(p, q) predicts {:.2}", v.alpha_predicted)} />
                <Stat label="Best k" text={v.best_k.to_string()} value={v.best_k as f64} id="spec-best-k"
                    note={format!("{:.2}× the target alone, {:.2} tokens a forward (c = {:.2})", best.speedup, best.tokens, f64::from(input.cost) / 100.0)} />
            </div>
            <Chart id="spec-chart" x_label="k (draft tokens proposed per step)" y_label="tokens per forward / speed-up"
                series={series} y_include={Some(0.0)} />
        </>
    }
}

fn quant_controls(input: &UseStateHandle<QuantInput>) -> Html {
    let outlier = edit(input, |i: &mut QuantInput, v: u64| {
        i.outlier = u32::try_from(v).unwrap_or(MAX_OUTLIER)
    });
    let group = edit(input, |i: &mut QuantInput, v: u64| {
        i.group = usize::try_from(v).unwrap_or(COLS)
    });
    html! {
        <>
            <SizeInput id="quant-outlier" label="outliers (× the typical weight)" value={u64::from(input.outlier)} min={1} max={u64::from(MAX_OUTLIER)} linear=true on_change={outlier} />
            <SizeInput id="quant-group" label="weights per int4 scale" value={input.group as u64} min={1} max={COLS as u64} on_change={group} />
            <p class="muted small">{ format!("brrr-serve's formats on a {}×{COLS} stand-in weight \
                matrix: small weights, and one in 200 an outlier. A scale is set by the largest \
                weight it covers, so an outlier coarsens every weight sharing its scale: a row's \
                for int8, a group's for int4, the whole tensor's for fp8. Scales are f16 and \
                counted in the bytes.", crate::logic::quantization::ROWS) }</p>
        </>
    }
}

fn quant_results(v: &QuantView) -> Html {
    let rows = v.rows.iter().map(|r| {
        html! {
            <tr data-testid="quant-row" data-format={r.format.clone()} data-error={format!("{:e}", r.rel_rms_error)}>
                <td>{ &r.format }</td>
                <td class="num">{ format!("{:.3}", r.bytes_per_weight) }</td>
                <td class="num">{ format!("{:.2}×", 4.0 / r.bytes_per_weight) }</td>
                <td class="num">{ format!("{:.2}%", 100.0 * r.rel_rms_error) }</td>
                <td class="num">{ format!("{:.2}%", 100.0 * r.rel_max_error) }</td>
            </tr>
        }
    });
    let int4 = v.rows.iter().find(|r| r.format.starts_with("int4"));
    html! {
        <>
            if let Some(r) = int4 {
                <div class="stats">
                    <Stat label="int4 error" text={format!("{:.2}%", 100.0 * r.rel_rms_error)} value={r.rel_rms_error} id="quant-int4-error" strong=true
                        note={format!("RMS, of the ordinary weights' RMS; {:.3} bytes a weight", r.bytes_per_weight)} />
                </div>
            }
            <div class="table-wrap"><table class="table" data-testid="quant-table">
                <thead><tr><th>{ "format" }</th><th class="num">{ "bytes per weight" }</th><th class="num">{ "smaller than f32" }</th>
                    <th class="num">{ "RMS error" }</th><th class="num">{ "largest error" }</th></tr></thead>
                <tbody>{ for rows }</tbody>
            </table></div>
            <p class="muted small">{ "Errors are on the weights that are not outliers, relative to their RMS. \
                A decode step reads every weight, so bytes per weight bound its speed (see the \
                chapter's table from brrr bench quant for what each format does to perplexity)." }</p>
        </>
    }
}
