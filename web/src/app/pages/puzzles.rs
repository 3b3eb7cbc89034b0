//! GPU puzzles: pick one of the book's puzzles (`brrr_exercises::puzzles`), edit its
//! WGSL, run it on WebGPU and compare with the CPU reference cell by cell.

use crate::app::components::{Banner, BannerKind, DeviceBanner, DeviceState, PageHeader, Select};
use crate::app::device::{Device, acquire};
use crate::app::puzzle_run::{RunError, count_puzzle, race_puzzle, run_puzzle};
use crate::logic::puzzles::{Verdict, cell_text, columns, judge};
use crate::logic::site::PageId;
use brrr_exercises::puzzles::count::AccessCounts;
use brrr_exercises::puzzles::{Puzzle, all};
use std::rc::Rc;
use wasm_bindgen::JsCast;
use web_sys::HtmlTextAreaElement;
use yew::prelude::*;

/// The outcome shown under the editor.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    /// Nothing run yet for this source.
    Idle,
    /// Running.
    Running,
    /// It ran: the inputs, the reference, the verdict and the global-memory accesses
    /// per invocation (or why they could not be counted).
    Ran {
        inputs: Vec<Vec<f32>>,
        want: Vec<f32>,
        verdict: Verdict,
        counts: Result<AccessCounts, String>,
    },
    /// It did not run.
    Failed(RunError),
}

/// The puzzles page.
#[function_component(PuzzlesPage)]
pub fn puzzles_page() -> Html {
    let puzzles = use_memo((), |_| all());
    let index = use_state(|| 0usize);
    let source = use_state(|| {
        puzzles
            .first()
            .map_or(String::new(), |p| p.stub.to_string())
    });
    let outcome = use_state(|| Outcome::Idle);
    let device = use_state(|| DeviceState::Probing);
    {
        let device = device.clone();
        use_effect_with((), move |_| {
            wasm_bindgen_futures::spawn_local(async move {
                device.set(acquire(false).await.state());
            });
        });
    }
    let Some(puzzle) = puzzles.get(*index).copied() else {
        return html! { <Banner kind={BannerKind::Error}>{ "no puzzles" }</Banner> };
    };
    let choose = {
        let (puzzles, index, source, outcome) = (
            puzzles.clone(),
            index.clone(),
            source.clone(),
            outcome.clone(),
        );
        Callback::from(move |v: String| {
            if let Some(i) = v.parse::<usize>().ok().filter(|&i| i < puzzles.len()) {
                index.set(i);
                source.set(puzzles[i].stub.to_string());
                outcome.set(Outcome::Idle);
            }
        })
    };
    let load = |text: &'static str| {
        let (source, outcome) = (source.clone(), outcome.clone());
        Callback::from(move |_| {
            source.set(text.to_string());
            outcome.set(Outcome::Idle);
        })
    };
    let oninput = {
        let source = source.clone();
        Callback::from(move |e: InputEvent| {
            if let Some(t) = e
                .target()
                .and_then(|t| t.dyn_into::<HtmlTextAreaElement>().ok())
            {
                source.set(t.value());
            }
        })
    };
    let run = run_callback(puzzle, &source, &outcome, &device);
    let options: Vec<(String, String)> = puzzles
        .iter()
        .enumerate()
        .map(|(i, p)| (i.to_string(), format!("{}. {}", i + 1, p.title)))
        .collect();
    let running = *outcome == Outcome::Running;
    let no_gpu = matches!(*device, DeviceState::Cpu(_));
    // Tall enough for the whole kernel (the longest is about 45 lines), so it reads
    // without scrolling.
    let rows = (source.lines().count() + 2).clamp(12, 60).to_string();
    html! {
        <section class="page">
            <PageHeader id={PageId::Puzzles} />
            { banner(&device) }
            <div class="layout puzzles">
                <aside class="panel controls">
                    <Select id="puzzle" label="Puzzle" selected={index.to_string()} {options} on_change={choose} />
                    { describe(&puzzle) }
                    <button class="button primary" data-testid="puzzle-run" onclick={run} disabled={running || no_gpu}>
                        { if running { "Running…" } else { "Run on the GPU" } }
                    </button>
                    <div class="button-row">
                        <button class="button" data-testid="puzzle-solution" onclick={load(puzzle.solution)}>{ "Load the solution" }</button>
                        <button class="button" data-testid="puzzle-reset" onclick={load(puzzle.stub)}>{ "Reset to the stub" }</button>
                    </div>
                    <p class="muted small">
                        { format!("Inputs are random integers 0 to 9, fresh each run; `out` has {} zeros after its \
                           last element, so a write past the end is caught rather than hidden by WGSL's bounds checks.",
                           crate::logic::puzzles::OUTPUT_SLACK) }
                    </p>
                </aside>
                <div class="results">
                    <textarea class="wgsl-editor" data-testid="puzzle-source" spellcheck="false"
                        aria-label="WGSL kernel" {rows} value={(*source).clone()} {oninput} />
                    { outcome_view(puzzle.id, &outcome) }
                </div>
            </div>
        </section>
    }
}

/// The banner: the adapter, or that puzzles need WebGPU (they have no CPU fallback).
fn banner(device: &DeviceState) -> Html {
    match device {
        DeviceState::Cpu(why) => html! {
            <Banner kind={BannerKind::CpuFallback}>
                { format!("{why}: the puzzles are WGSL kernels and need WebGPU, so they cannot run here \
                   (Chrome and Edge 113+ have it). You can still read and edit them.") }
            </Banner>
        },
        other => html! { <DeviceBanner state={other.clone()} /> },
    }
}

/// The task and the launch shape of a puzzle.
fn describe(p: &Puzzle) -> Html {
    let names = input_names(p.inputs.len());
    let inputs: Vec<String> = names
        .iter()
        .zip(p.inputs)
        .map(|(n, len)| format!("{n}[{len}]"))
        .collect();
    let [wx, wy, wz] = p.workgroup_size;
    let [gx, gy, gz] = p.workgroups;
    html! {
        <div class="puzzle-task" data-testid="puzzle-task">
            <p><strong>{ p.title }</strong>{ ": " }{ p.task }</p>
            <details class="small" data-testid="puzzle-tip">
                <summary>{ "A tip" }</summary>
                <p>{ p.tip }</p>
            </details>
            <p class="muted small">
                { format!("@workgroup_size({wx}, {wy}, {wz}), {gx}×{gy}×{gz} workgroups; inputs {}; out[{}]; \
                    global-memory budget per invocation: reads ≤ {}, writes ≤ {}. ",
                    inputs.join(", "), p.output_len, p.budget.reads, p.budget.writes) }
                { "File: " }<code>{ p.file() }</code>
            </p>
        </div>
    }
}

/// `a`, `b`, … for the input bindings, as the kernels name them.
fn input_names(n: usize) -> Vec<String> {
    (b'a'..=b'z')
        .take(n)
        .map(|c| (c as char).to_string())
        .collect()
}

fn run_callback(
    puzzle: Puzzle,
    source: &UseStateHandle<String>,
    outcome: &UseStateHandle<Outcome>,
    device: &UseStateHandle<DeviceState>,
) -> Callback<MouseEvent> {
    let (source, outcome, device) = (source.clone(), outcome.clone(), device.clone());
    Callback::from(move |_| {
        let (wgsl, outcome, device) = (Rc::new((*source).clone()), outcome.clone(), device.clone());
        outcome.set(Outcome::Running);
        wasm_bindgen_futures::spawn_local(async move {
            let dev = acquire(false).await;
            device.set(dev.state());
            let Device::Gpu(gpu) = dev else {
                outcome.set(Outcome::Failed(RunError::Gpu("no WebGPU device".into())));
                return;
            };
            // A fresh seed per run, as the native checks draw one per test run.
            let seed = js_sys::Date::now() as u64;
            let inputs = puzzle.random_inputs(seed);
            let want = (puzzle.reference)(&inputs);
            let next = match run_puzzle(&gpu, &puzzle, &wgsl, &inputs).await {
                Ok(buffer) => {
                    let mut verdict = judge(&buffer, &want);
                    // A second run of the kernel rewritten to count its accesses.
                    let counts = count_puzzle(&gpu, &puzzle, &wgsl, &inputs)
                        .await
                        .map_err(|e| match e {
                            RunError::Compile(lines) => lines.join("; "),
                            RunError::Gpu(e) => e,
                        });
                    // A third, rewritten to log shared memory and barriers: a race can
                    // print the right answer. What cannot be checked is not held
                    // against the kernel.
                    let race = race_puzzle(&gpu, &puzzle, &wgsl, &inputs).await;
                    verdict.problems.extend(race.ok().flatten());
                    if let Ok(c) = &counts {
                        verdict.problems.extend(c.over_budget(puzzle.budget));
                    }
                    Outcome::Ran {
                        verdict,
                        counts,
                        inputs,
                        want,
                    }
                }
                Err(e) => Outcome::Failed(e),
            };
            outcome.set(next);
        });
    })
}

fn outcome_view(id: &str, o: &Outcome) -> Html {
    match o {
        Outcome::Idle => html! {
            <p class="muted" data-testid="puzzle-idle">{ "Edit the kernel between the `your code` markers, then run it." }</p>
        },
        Outcome::Running => html! { <p class="muted">{ "Running…" }</p> },
        Outcome::Failed(RunError::Compile(lines)) => html! {
            <div class="puzzle-verdict fail" data-testid="puzzle-compile-error">
                <strong>{ "The WGSL does not compile" }</strong>
                <pre class="compile-errors">{ lines.join("\n") }</pre>
            </div>
        },
        Outcome::Failed(RunError::Gpu(e)) => html! {
            <div class="puzzle-verdict fail" data-testid="puzzle-gpu-error">
                <strong>{ "WebGPU rejected the kernel" }</strong>
                <pre class="compile-errors">{ e.clone() }</pre>
            </div>
        },
        Outcome::Ran {
            inputs,
            want,
            verdict,
            counts,
        } => {
            let names = input_names(inputs.len());
            let rows = names
                .iter()
                .zip(inputs)
                .map(|(n, v)| cells(n, v, None, columns(id, v.len())));
            let pass = verdict.pass();
            let overflow: Vec<f32> = verdict.overflow.iter().map(|(_, v)| *v).collect();
            html! {
                <div>
                    <div class={classes!("puzzle-verdict", if pass { "pass" } else { "fail" })}
                        data-testid="puzzle-verdict" data-pass={pass.to_string()}>
                        { verdict.summary() }
                    </div>
                    <div class="arrays" data-testid="puzzle-arrays">
                        { for rows }
                        { cells("out", &verdict.out, Some(&verdict.ok), columns(id, want.len())) }
                        { cells("expected", want, None, columns(id, want.len())) }
                        if !overflow.is_empty() {
                            { cells("past the end", &overflow, Some(&vec![false; overflow.len()]), overflow.len()) }
                        }
                    </div>
                    { counts_view(counts) }
                </div>
            }
        }
    }
}

/// One array as rows of `cols` cells (a matrix) or one row; with `ok`, wrong cells are marked.
fn cells(name: &str, values: &[f32], ok: Option<&[bool]>, cols: usize) -> Html {
    let items = values.iter().enumerate().map(|(i, v)| {
        let state = ok.map(|ok| if ok.get(i).copied().unwrap_or(false) { "ok" } else { "bad" });
        html! {
            <span class={classes!("cell", state)} title={format!("{name}[{i}]")}>{ cell_text(*v) }</span>
        }
    });
    html! {
        <div class="array-row" data-testid={format!("array-{}", name.replace(' ', "-"))}>
            <span class="array-name"><code>{ name }</code></span>
            <div class="array-cells" style={format!("grid-template-columns: repeat({cols}, max-content)")}>{ for items }</div>
        </div>
    }
}

/// Each invocation's global reads and writes, laid out as the dispatch grid.
fn counts_view(counts: &Result<AccessCounts, String>) -> Html {
    match counts {
        Err(why) => html! {
            <p class="muted small" data-testid="puzzle-counts-unavailable">
                { format!("Global-memory accesses were not counted: {why}") }
            </p>
        },
        Ok(c) => {
            let items = c
                .reads
                .iter()
                .zip(&c.writes)
                .enumerate()
                .map(|(i, (r, w))| {
                    html! {
                        <span class="cell" title={format!("invocation {i}: {r} reads, {w} writes")}>
                            { format!("{r}/{w}") }
                        </span>
                    }
                });
            html! {
                <div class="puzzle-counts" data-testid="puzzle-counts"
                    data-reads={c.total_reads().to_string()} data-writes={c.total_writes().to_string()}>
                    <p class="small">
                        <strong>{ "Global memory, reads/writes per invocation: " }</strong>
                        { c.summary() }
                    </p>
                    <div class="array-cells" style={format!("grid-template-columns: repeat({}, max-content)", c.width.max(1))}>
                        { for items }
                    </div>
                    <p class="muted small">
                        { "Counted by running the kernel a second time, rewritten so that every `a[i]` \
                           and `out[i] = …` also bumps an atomic counter of its invocation." }
                    </p>
                </div>
            }
        }
    }
}
