//! The tensor-parallelism page: `crate::logic::tensor_parallel::view` as a table of the
//! block's matrices (whole, per rank, how split), what a chosen rank holds, and the
//! collectives one block sends per pass.

use crate::app::components::{Banner, BannerKind, PageHeader, SizeInput, Stat, Toggle};
use crate::app::util::edit;
use crate::logic::site::PageId;
use crate::logic::tensor_parallel::{TpInput, TpView, view};
use brrr_perf::table;
use brrr_perf::tensor_parallel::PassComm;
use yew::prelude::*;

fn dims(d: &[u64]) -> String {
    let parts: Vec<String> = d.iter().map(|x| x.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// The tensor-parallelism page.
#[function_component(TensorParallelPage)]
pub fn tensor_parallel_page() -> Html {
    let input = use_state(TpInput::default);
    let rank = use_state(|| 0u64);
    let r = (*rank).min(input.tp.saturating_sub(1));
    html! {
        <section class="page">
            <PageHeader id={PageId::TensorParallel} />
            <div class="layout">
                <aside class="panel controls">{ controls(&input, &rank) }</aside>
                <div class="results">
                    { match view(&input) {
                        Ok(v) => results(&input, &v, r),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e }</Banner> },
                    } }
                </div>
            </div>
        </section>
    }
}

fn controls(input: &UseStateHandle<TpInput>, rank: &UseStateHandle<u64>) -> Html {
    let size = |id: &'static str,
                label: &'static str,
                value: u64,
                max: u64,
                set: fn(&mut TpInput, u64)| {
        let on_change = edit(input, move |i: &mut TpInput, v: u64| set(i, v));
        html! { <SizeInput id={id} label={label} {value} min={1} {max} {on_change} /> }
    };
    let on_rank = {
        let rank = rank.clone();
        Callback::from(move |v: u64| rank.set(v))
    };
    html! {
        <>
            { size("tp", "TP (tensor-parallel ranks)", input.tp, 16, |i, v| i.tp = v) }
            <Toggle id="sp" label="sequence parallelism" checked={input.sp}
                on_change={edit(input, |i: &mut TpInput, b: bool| i.sp = b)} />
            <SizeInput id="rank" label="show rank" value={**rank} min={0} max={input.tp.saturating_sub(1).max(1)} linear=true on_change={on_rank} />
            { size("hidden", "width C", input.hidden, 65536, |i, v| i.hidden = v) }
            { size("heads", "attention heads H", input.heads, 512, |i, v| i.heads = v) }
            { size("seq", "sequence length T", input.seq, 1 << 17, |i, v| i.seq = v) }
            { size("batch", "micro-batch B", input.micro_batch, 1024, |i, v| i.micro_batch = v) }
            { size("vocab", "vocabulary V", input.vocab, 1 << 18, |i, v| i.vocab = v) }
        </>
    }
}

fn pass_text(p: &PassComm) -> String {
    let mut parts = Vec::new();
    for (name, c) in [
        ("all-reduce", p.all_reduce),
        ("reduce-scatter", p.reduce_scatter),
        ("all-gather", p.all_gather),
    ] {
        if c.calls > 0 {
            parts.push(format!(
                "{} × {name} of {}",
                c.calls,
                table::count((c.elements / c.calls) as f64)
            ));
        }
    }
    parts.join(", ")
}

fn results(input: &TpInput, v: &TpView, r: u64) -> Html {
    let rows = v.pieces.iter().map(|p| {
        html! {
            <tr>
                <td><code>{ p.name }</code></td>
                <td>{ dims(&p.full) }</td>
                <td>{ dims(&p.shard) }</td>
                <td>{ p.split }</td>
                <td>{ p.rank_holds(input, r) }</td>
            </tr>
        }
    });
    let (whole, mine) = v.block_params;
    let (act1, act_r) = v.block_activations;
    html! {
        <>
            <div class="stats">
                <Stat label="Block parameters per rank" text={format!("{} of {}", table::count(mine), table::count(whole))} value={mine} id="params-rank" strong=true />
                <Stat label="Block activations per rank" text={format!("{} of {} elements", table::count(act_r), table::count(act1))} value={act_r} id="activations-rank"
                    note={"kept for the backward (f32, no dropout)"} />
                <Stat label="Sent per block, forward" text={format!("{} elements", table::count(v.sent.0 as f64))} value={v.sent.0 as f64} id="sent-forward"
                    note={pass_text(&v.forward)} />
                <Stat label="Sent per block, backward" text={format!("{} elements", table::count(v.sent.1 as f64))} value={v.sent.1 as f64} id="sent-backward"
                    note={pass_text(&v.backward)} />
            </div>
            <table class="table" data-testid="tp-pieces">
                <thead><tr><th>{ "parameter" }</th><th>{ "whole" }</th><th>{ "per rank" }</th><th>{ "split" }</th><th>{ format!("rank {r} holds") }</th></tr></thead>
                <tbody>{ for rows }</tbody>
            </table>
            <p class="muted small">
                { "Column-parallel layers keep a slice of the output features and need the whole input; row-parallel ones keep the matching \
                   slice of the input features and produce partial sums, added by the all-reduce after them (Shoeybi et al. 2019). \
                   With sequence parallelism the residual stream between them is split along the sequence, and each all-reduce becomes \
                   a reduce-scatter and an all-gather of the same size (Korthikanti et al. 2022); the backward gathers the two \
                   column-parallel inputs once more. Elements sent per rank assume ring algorithms." }
            </p>
        </>
    }
}
