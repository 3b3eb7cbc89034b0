//! The collectives page: an all-reduce run step by step by
//! `brrr_collectives::Simulation` (through `crate::logic::collectives`), one row of
//! cells per rank, the moves of the current step highlighted, Prev / Next / Play, and
//! the end checked against the crate's reference reduction.

use crate::app::components::{Banner, BannerKind, PageHeader, Select, SizeInput, Stat};
use crate::logic::collectives::{
    ALGORITHMS, Frame, Summary, algorithm_label, cell_text, frames, matches, move_label, reference,
    summary,
};
use crate::logic::site::PageId;
use brrr_collectives::Algorithm;
use brrr_perf::table;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use yew::prelude::*;

/// Milliseconds between steps while playing.
const PLAY_STEP_MS: i32 = 700;

/// What the reader chose.
#[derive(Clone, Copy, PartialEq)]
struct Choice {
    algorithm: Algorithm,
    ranks: usize,
    len: usize,
}

/// The collectives page.
#[function_component(CollectivesPage)]
pub fn collectives_page() -> Html {
    let choice = use_state(|| Choice {
        algorithm: Algorithm::Ring,
        ranks: 4,
        len: 8,
    });
    let step = use_state(|| 0usize);
    let playing = use_state(|| false);
    let run = use_memo(*choice, |c| {
        frames(c.algorithm, c.ranks, c.len)
            .and_then(|f| summary(c.algorithm, c.ranks, c.len, &f).map(|s| (f, s)))
    });
    let last = run.as_ref().as_ref().map_or(0, |(f, _)| f.len() - 1);
    use_play_timer(&step, &playing, last);
    html! {
        <section class="page">
            <PageHeader id={PageId::Collectives} />
            <div class="layout">
                <aside class="panel controls">{ controls(&choice, &step, &playing) }</aside>
                <div class="results">
                    { match run.as_ref() {
                        Ok((f, s)) => results(&choice, f, s, (*step).min(last), &step, &playing),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e.clone() }</Banner> },
                    } }
                </div>
            </div>
        </section>
    }
}

/// While `playing`, advances `step` every [`PLAY_STEP_MS`] and stops at `last`. One
/// timeout per render: the effect re-runs whenever the step changes, and its cleanup
/// cancels a pending timeout when the reader pauses or changes the inputs.
#[hook]
fn use_play_timer(step: &UseStateHandle<usize>, playing: &UseStateHandle<bool>, last: usize) {
    let (step, playing) = (step.clone(), playing.clone());
    let deps = (*step, *playing, last);
    yew::functional::use_effect_with(deps, move |&(now, play, last)| {
        let mut pending: Option<(i32, Closure<dyn FnMut()>)> = None;
        if play && now >= last {
            playing.set(false);
        } else if play {
            let tick = Closure::<dyn FnMut()>::new(move || step.set(now + 1));
            let id = web_sys::window().and_then(|w| {
                w.set_timeout_with_callback_and_timeout_and_arguments_0(
                    tick.as_ref().unchecked_ref(),
                    PLAY_STEP_MS,
                )
                .ok()
            });
            pending = id.map(|id| (id, tick));
        }
        move || {
            if let (Some((id, _tick)), Some(w)) = (pending, web_sys::window()) {
                w.clear_timeout_with_handle(id);
            }
        }
    });
}

fn controls(
    choice: &UseStateHandle<Choice>,
    step: &UseStateHandle<usize>,
    playing: &UseStateHandle<bool>,
) -> Html {
    // Any new input starts the animation over.
    let set = |f: fn(&mut Choice, u64)| {
        let (choice, step, playing) = (choice.clone(), step.clone(), playing.clone());
        Callback::from(move |v: u64| {
            let mut c = *choice;
            f(&mut c, v);
            choice.set(c);
            step.set(0);
            playing.set(false);
        })
    };
    let on_alg = {
        let set_index = set(|c, i| c.algorithm = ALGORITHMS[i as usize % ALGORITHMS.len()]);
        Callback::from(move |name: String| {
            if let Some(i) = ALGORITHMS.iter().position(|a| a.name() == name) {
                set_index.emit(i as u64);
            }
        })
    };
    let options: Vec<(String, String)> = ALGORITHMS
        .iter()
        .map(|a| (a.name().to_string(), algorithm_label(*a).to_string()))
        .collect();
    html! {
        <>
            <Select id="coll-algorithm" label="Algorithm" options={options}
                selected={choice.algorithm.name()} on_change={on_alg} />
            <SizeInput id="coll-ranks" label="ranks" value={choice.ranks as u64} min={2} max={8} linear=true
                on_change={set(|c, v| c.ranks = v as usize)} />
            <SizeInput id="coll-len" label="buffer length (f32 elements)" value={choice.len as u64} min={1} max={24} linear=true
                on_change={set(|c, v| c.len = v as usize)} />
            <p class="muted small">
                { "Rank r starts with r + 1 in every element, so the all-reduce (sum) ends with n(n+1)/2 everywhere \
                   and the partial sums on the way say which ranks they came from." }
            </p>
        </>
    }
}

fn buttons(
    step: &UseStateHandle<usize>,
    playing: &UseStateHandle<bool>,
    now: usize,
    last: usize,
) -> Html {
    let go = |to: usize| {
        let (step, playing) = (step.clone(), playing.clone());
        Callback::from(move |_: MouseEvent| {
            playing.set(false);
            step.set(to);
        })
    };
    let toggle = {
        let (step, playing) = (step.clone(), playing.clone());
        Callback::from(move |_: MouseEvent| {
            if !*playing && now >= last {
                step.set(0);
            }
            playing.set(!*playing);
        })
    };
    html! {
        <div class="button-row">
            <button class="button" data-testid="coll-first" disabled={now == 0} onclick={go(0)}>{ "◀◀ Start" }</button>
            <button class="button" data-testid="coll-prev" disabled={now == 0} onclick={go(now.saturating_sub(1))}>{ "◀ Prev" }</button>
            <button class="button primary" data-testid="coll-play" onclick={toggle}>{ if **playing { "Pause" } else { "▶ Play" } }</button>
            <button class="button" data-testid="coll-next" disabled={now >= last} onclick={go((now + 1).min(last))}>{ "Next ▶" }</button>
            <button class="button" data-testid="coll-last" disabled={now >= last} onclick={go(last)}>{ "End ▶▶" }</button>
            <span class="muted" data-testid="coll-step" data-value={now.to_string()}>{ format!("step {now} of {last}") }</span>
        </div>
    }
}

fn results(
    choice: &Choice,
    frames: &[Frame],
    s: &Summary,
    now: usize,
    step: &UseStateHandle<usize>,
    playing: &UseStateHandle<bool>,
) -> Html {
    let last = frames.len() - 1;
    let frame = &frames[now];
    let want = reference(choice.ranks, choice.len);
    html! {
        <>
            { stats(choice, s) }
            { buttons(step, playing, now, last) }
            { grid(frame, &want, now == last) }
            { moves(frame, now) }
            if now == last { { verdict(frame, &want) } }
        </>
    }
}

fn stats(choice: &Choice, s: &Summary) -> Html {
    let bytes = (choice.len * crate::logic::collectives::ELEMENT_BYTES) as f64;
    let (model_steps, model_bytes) = match s.model {
        Some(m) => (
            html! { <Stat label={format!("latency terms ({} model)", m.name)} text={table::sig3(m.latency_terms)}
            value={m.latency_terms} id="coll-model-steps" note="α count, brrr-perf alpha-beta" /> },
            html! { <Stat label={format!("bytes / rank ({} model)", m.name)} text={table::sig3(m.bytes_per_rank)}
            value={m.bytes_per_rank} id="coll-model-bytes" note="brrr-perf alpha-beta" /> },
        ),
        None => (
            html! { <Stat label="alpha-beta model" text="—" note="brrr-perf models ring and tree only" /> },
            html! {},
        ),
    };
    html! {
        <div class="stats">
            <Stat label="Steps" text={s.steps.to_string()} value={s.steps as f64} id="coll-steps" strong=true
                note={format!("{} messages", s.messages)} />
            <Stat label="Max bytes sent / rank" text={s.max_bytes_sent.to_string()} value={s.max_bytes_sent as f64}
                id="coll-bytes" note={format!("per rank: {}", s.bytes_sent.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(", "))} />
            <Stat label="Buffer" text={format!("{bytes} B")} value={bytes} id="coll-buffer" note={format!("{} × f32", choice.len)} />
            { model_steps }
            { model_bytes }
        </div>
    }
}

/// One row per rank; cells written in this step are marked `recv`, cells read by a
/// sender `send`; at the end every cell is `ok` or `bad` against the reference.
fn grid(frame: &Frame, want: &[f32], at_end: bool) -> Html {
    let rows = frame.buffers.iter().enumerate().map(|(r, buf)| {
        let cells = buf.iter().enumerate().map(|(i, &x)| {
            let recv = frame.moves.iter().any(|m| m.dst == r && m.range.contains(&i));
            let send = frame.moves.iter().any(|m| m.src == r && m.src != m.dst && m.src_range.contains(&i));
            let good = want.get(i).is_some_and(|&w| matches(&[x], &[w]));
            let check = at_end.then_some(if good { "ok" } else { "bad" });
            let class = classes!("cell", recv.then_some("recv"), send.then_some("send"), check);
            html! { <span class={class}>{ cell_text(x) }</span> }
        });
        let mut outgoing: Vec<usize> = frame
            .moves
            .iter()
            .filter(|m| m.src == r && m.src != m.dst)
            .map(|m| m.dst)
            .collect();
        outgoing.sort_unstable();
        outgoing.dedup();
        let outgoing: Vec<String> = outgoing.iter().map(|d| d.to_string()).collect();
        html! {
            <div class="array-row" data-testid={format!("coll-rank-{r}")} data-ok={matches(buf, want).to_string()}>
                <div class="array-name">{ format!("rank {r}") }</div>
                <div class="array-cells" style={format!("grid-template-columns: repeat({}, minmax(34px, 1fr)) 16ch", buf.len())}>
                    { for cells }
                    <span class="coll-out muted small">{ if outgoing.is_empty() { String::new() } else { format!("→ {}", outgoing.join(",")) } }</span>
                </div>
            </div>
        }
    });
    html! { <div class="arrays coll-grid" data-testid="coll-grid">{ for rows }</div> }
}

fn moves(frame: &Frame, now: usize) -> Html {
    if now == 0 {
        return html! { <p class="muted" data-testid="coll-moves">{ "Step 0: every rank holds its own buffer. Press Next or Play." }</p> };
    }
    let items = frame
        .moves
        .iter()
        .map(|m| html! { <li>{ move_label(m) }</li> });
    html! {
        <div data-testid="coll-moves">
            <p class="small"><strong>{ format!("Step {now}: ") }</strong>
                <span class="coll-key send">{ "sent" }</span>{ " " }<span class="coll-key recv">{ "received" }</span></p>
            <ul class="coll-moves small">{ for items }</ul>
        </div>
    }
}

fn verdict(frame: &Frame, want: &[f32]) -> Html {
    let ok = frame.buffers.iter().all(|b| matches(b, want));
    let shown = want.first().map_or(String::new(), |&x| cell_text(x));
    let text = if ok {
        format!(
            "Every rank holds the reference sum ({shown} in every element), computed by brrr_collectives::reference_reduce."
        )
    } else {
        "Some rank differs from the reference sum (cells marked red).".to_string()
    };
    html! {
        <div class={classes!("puzzle-verdict", if ok { "pass" } else { "fail" })} data-testid="coll-verdict" data-pass={ok.to_string()}>
            { text }
        </div>
    }
}
