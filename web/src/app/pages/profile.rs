//! The profile page: `crate::logic::profile::view` of a trace, recorded by a few training
//! steps run in this tab (brrr-train's `Trainer` on brrr-cpu, through brrr-profile's
//! `ProfiledBackend`), or read from a file written by `brrr train --profile --trace FILE`.

use crate::app::components::{Banner, BannerKind, PageHeader, Stat};
use crate::app::trainer::{config, corpus, make_trainer};
use crate::app::util::{now_s, yield_now};
use crate::logic::profile::{ProfileView, Timeline, colour, view};
use crate::logic::sampling::preset;
use crate::logic::site::PageId;
use brrr_cpu::CpuBackend;
use brrr_perf::trace::Tracer;
use brrr_profile::{OpRow, ProfiledBackend};
use std::sync::Arc;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use yew::prelude::*;

/// Steps a run in the tab takes; the first is left out of the tables (warm-up).
const STEPS: u64 = 4;
/// The training page's preset the run uses.
const PRESET: &str = "tiny";

#[derive(Clone, Debug, PartialEq, Default)]
enum State {
    #[default]
    Idle,
    Busy(String),
    Done(Box<ProfileView>, String),
    Failed(String),
}

/// The profile page.
#[function_component(ProfilePage)]
pub fn profile_page() -> Html {
    let state = use_state(State::default);
    let run = {
        let state = state.clone();
        Callback::from(move |_: MouseEvent| {
            state.set(State::Busy("training…".into()));
            wasm_bindgen_futures::spawn_local(profile_run(state.clone()));
        })
    };
    let open = {
        let state = state.clone();
        Callback::from(move |e: Event| {
            let input: Option<web_sys::HtmlInputElement> =
                e.target().and_then(|t| t.dyn_into().ok());
            if let Some(file) = input.and_then(|i| i.files()).and_then(|f| f.get(0)) {
                state.set(State::Busy(format!("reading {}…", file.name())));
                wasm_bindgen_futures::spawn_local(read_trace(file, state.clone()));
            }
        })
    };
    let busy = matches!(*state, State::Busy(_));
    html! {
        <section class="page">
            <PageHeader id={PageId::Profile} />
            <div class="layout">
                <aside class="panel controls">
                    <button class="button primary" data-testid="profile-run" onclick={run} disabled={busy}>
                        { format!("Profile {STEPS} training steps here") }
                    </button>
                    <label class="field">
                        <span>{ "…or open a trace" }</span>
                        <input type="file" accept=".json,application/json" data-testid="profile-file" onchange={open} disabled={busy} />
                    </label>
                    <p class="muted small">
                        { format!("The run: brrr-train's Trainer on the training page's “{PRESET}” GPT, on brrr-cpu compiled to wasm \
                           (one thread), every backend op timed by brrr-profile's ProfiledBackend and every layer's forward and \
                           backward marked as a region. The tables are brrr-profile's, computed from the trace exactly as \
                           `brrr train --profile` prints them; the first step is left out (it allocates). A browser's clock \
                           is coarse (0.1 ms in a page that is not cross-origin isolated), so a short op reads as 0 or \
                           0.1 ms: its total over many calls is right, one call is not. A trace from \
                           `brrr train --profile --trace run.json` opens here too, from any machine, timed to the \
                           microsecond.") }
                    </p>
                </aside>
                <div class="results">{ results(&state) }</div>
            </div>
        </section>
    }
}

fn results(state: &State) -> Html {
    match state {
        State::Idle => html! { <p class="muted">{ "Profile a run, or open a trace." }</p> },
        State::Busy(what) => html! { <p class="muted" data-testid="profile-busy">{ what }</p> },
        State::Failed(e) => html! { <Banner kind={BannerKind::Error}>{ e }</Banner> },
        State::Done(v, source) => done(v, source),
    }
}

/// Records `STEPS` steps in this tab and shows their view.
async fn profile_run(state: UseStateHandle<State>) {
    let outcome = async {
        let corpus = corpus().await.map_err(|e| e.to_string())?;
        let tracer = Arc::new(Tracer::with_clock(Box::new(|| now_s() * 1e6)));
        let cpu = ProfiledBackend::with_tracer(CpuBackend::new(), tracer.clone())
            .map_err(|e| e.to_string())?;
        let mut trainer = make_trainer(&cpu, config(&preset(PRESET), STEPS), &corpus)
            .map_err(|e| e.to_string())?;
        trainer.set_shared_tracer(tracer.clone());
        for i in 1..=STEPS {
            state.set(State::Busy(format!("training: step {i} of {STEPS}…")));
            yield_now().await;
            trainer.step().await.map_err(|e| e.to_string())?;
        }
        view(&tracer.to_chrome_value())
    }
    .await;
    state.set(match outcome {
        Ok(v) => State::Done(Box::new(v), format!("{STEPS} steps run in this tab")),
        Err(e) => State::Failed(e),
    });
}

/// Reads a trace file chosen by the reader and shows its view.
async fn read_trace(file: web_sys::File, state: UseStateHandle<State>) {
    let name = file.name();
    let outcome = async {
        let text = JsFuture::from(file.text())
            .await
            .map_err(|e| format!("reading {name}: {e:?}"))?
            .as_string()
            .ok_or_else(|| format!("reading {name}: not text"))?;
        let trace: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{name} is not a JSON trace: {e}"))?;
        view(&trace).map_err(|e| format!("{name}: {e}"))
    }
    .await;
    state.set(match outcome {
        Ok(v) => State::Done(Box::new(v), name),
        Err(e) => State::Failed(e),
    });
}

fn done(v: &ProfileView, source: &str) -> Html {
    let per_step = v.wall_ms / v.steps.max(1) as f64;
    html! {
        <>
            <div class="stats">
                <Stat label="Time per step" text={format!("{per_step:.1} ms")} value={per_step} id="profile-step-ms" strong=true
                    note={format!("{} step(s) of {source}", v.steps)} />
                <Stat label="In backend ops" text={format!("{:.1}%", 100.0 * v.in_ops)} value={v.in_ops} id="profile-in-ops"
                    note={"the rest is the host between ops"} />
                <Stat label="Longest op kind" text={v.ops.first().map_or(String::new(), |r| r.kind.clone())} id="profile-top"
                    note={v.ops.first().map_or(String::new(), |r| format!("{:.1}% of the time", 100.0 * r.share))} />
            </div>
            <h3>{ "The last step" }</h3>
            { timeline(&v.timeline) }
            <h3>{ "By op kind" }</h3>
            { table(&v.ops, "profile-ops", "op") }
            <h3>{ "By layer, all blocks together" }</h3>
            <p class="muted small">{ "Regions nest: a block's time and rates include its layers'." }</p>
            { table(&v.layers, "profile-layers", "layer") }
        </>
    }
}

fn table(rows: &[OpRow], id: &'static str, what: &'static str) -> Html {
    let body = rows.iter().map(|r| {
        html! {
            <tr>
                <td><span class="swatch" style={format!("background:{}", colour(&r.kind))}></span><code>{ &r.kind }</code></td>
                <td class="num">{ r.stats.calls }</td>
                <td class="num">{ format!("{:.2}", r.stats.total_us / 1e3) }</td>
                <td class="num">{ format!("{:.1}%", 100.0 * r.share) }</td>
                <td class="num">{ format!("{:.2}", r.flops_per_s / 1e9) }</td>
                <td class="num">{ format!("{:.2}", r.bytes_per_s / 1e9) }</td>
            </tr>
        }
    });
    html! {
        <table class="table" data-testid={id}>
            <thead><tr>
                <th>{ what }</th><th>{ "calls" }</th><th>{ "total ms" }</th><th>{ "share" }</th>
                <th>{ "GFLOP/s" }</th><th>{ "GB/s" }</th>
            </tr></thead>
            <tbody>{ for body }</tbody>
        </table>
    }
}

/// The step's spans as an SVG: a row per lane, each span a rectangle at its time.
fn timeline(t: &Timeline) -> Html {
    const W: f64 = 1000.0;
    const LABEL: f64 = 120.0;
    const ROW: f64 = 22.0;
    let h = ROW * t.lanes.len() as f64 + 20.0;
    let x = |ms: f64| LABEL + (W - LABEL) * ms / t.dur_ms.max(1e-9);
    let labels = t.lanes.iter().enumerate().map(|(i, l)| {
        html! { <text x="0" y={format!("{:.1}", ROW * i as f64 + 15.0)} class="small">{ l }</text> }
    });
    let bars = t.bars.iter().map(|b| {
        let (x0, x1) = (x(b.start_ms), x(b.start_ms + b.dur_ms));
        html! {
            <rect x={format!("{x0:.2}")} y={format!("{:.1}", ROW * b.lane as f64 + 2.0)}
                width={format!("{:.2}", (x1 - x0).max(0.5))} height={format!("{:.1}", ROW - 4.0)}
                fill={colour(&b.name)}>
                <title>{ format!("{}: {:.3} ms at {:.3} ms", b.name, b.dur_ms, b.start_ms) }</title>
            </rect>
        }
    });
    let axis_y = ROW * t.lanes.len() as f64 + 14.0;
    html! {
        <svg class="timeline" data-testid="profile-timeline" viewBox={format!("0 0 {W} {h}")} width="100%">
            { for labels }
            { for bars }
            <text x={format!("{LABEL}")} y={format!("{axis_y:.1}")} class="small">{ "0 ms" }</text>
            <text x={format!("{W}")} y={format!("{axis_y:.1}")} text-anchor="end" class="small">
                { format!("{:.1} ms", t.dur_ms) }
            </text>
        </svg>
    }
}
