//! Kernels live: brrr-wgpu's kernels (or brrr-cpu's) timed in the reader's browser.

use crate::app::bench::{
    bench_attention, bench_dispatch, bench_fusion, bench_gemm, bench_row_kernel, time_call,
};
use crate::app::components::{
    Banner, BannerKind, Chart, DeviceBanner, DeviceState, PageHeader, Select, Series, SeriesStyle,
    Stat, Toggle,
};
use crate::app::device::{Device, acquire};
use crate::logic::attention::{
    AttentionRow, AttentionSize, BATCH, HEAD_DIM, HEADS, TOLERANCE, seq_lens,
};
use crate::logic::kernels::{Measurement, RowKernel, gemm_sizes, overhead_sizes, row_sizes};
use crate::logic::site::PageId;
use brrr_backend::{Backend, DType, HostData, Result};
use brrr_cpu::{ATTENTION_QUERY_ROWS, CpuBackend};
use brrr_perf::table;
use brrr_wgpu::MatmulKernel;
use std::cell::Cell;
use std::rc::Rc;
use yew::prelude::*;

const COLORS: [&str; 5] = ["#94a3b8", "#f59e0b", "#16a34a", "#2563eb", "#9333ea"];

/// Everything measured so far.
#[derive(Clone, Debug, Default, PartialEq)]
struct Results {
    gemm: Vec<Measurement>,
    rows: Vec<Measurement>,
    fusion: Vec<(Measurement, Measurement, f64)>,
    overhead: Vec<Measurement>,
    attention: Vec<AttentionRow>,
    /// Why the attention section ran on brrr-cpu when the page's device is WebGPU.
    attention_note: Option<String>,
    status: String,
    running: bool,
    error: Option<String>,
}

/// The kernels page.
#[function_component(KernelsPage)]
pub fn kernels_page() -> Html {
    let device = use_state(|| DeviceState::Probing);
    let force_cpu = use_state(|| false);
    let quick = use_state(|| false);
    let results = use_state(Results::default);
    let alive = use_mut_ref(|| Rc::new(Cell::new(true)));
    {
        let (device, alive) = (device.clone(), alive.borrow().clone());
        use_effect_with((), move |_| {
            wasm_bindgen_futures::spawn_local(async move {
                device.set(acquire(false).await.state());
            });
            move || alive.set(false)
        });
    }
    let run = {
        let (device, results, alive) = (device.clone(), results.clone(), alive.borrow().clone());
        let (force_cpu, quick) = (*force_cpu, *quick);
        Callback::from(move |_| {
            let (device, results, alive) = (device.clone(), results.clone(), alive.clone());
            wasm_bindgen_futures::spawn_local(async move {
                let dev = acquire(force_cpu).await;
                device.set(dev.state());
                let mut r = Results {
                    running: true,
                    ..Results::default()
                };
                results.set(r.clone());
                if let Err(e) = run_all(&dev, quick, &mut r, &results, &alive).await {
                    r.error = Some(e.to_string());
                }
                r.running = false;
                r.status = if r.error.is_some() {
                    "stopped".into()
                } else {
                    "done".into()
                };
                results.set(r);
            });
        })
    };
    let r = &*results;
    html! {
        <section class="page">
            <PageHeader id={PageId::Kernels} />
            <DeviceBanner state={(*device).clone()} />
            <div class="layout">
                <aside class="panel controls">
                    <Select id="device" label="Device" selected={if *force_cpu { "cpu" } else { "auto" }}
                        options={vec![("auto".into(), "WebGPU if present".into()), ("cpu".into(), "CPU (brrr-cpu in wasm)".into())]}
                        on_change={{ let f = force_cpu.clone(); Callback::from(move |s: String| f.set(s == "cpu")) }} />
                    <Toggle id="quick" label="quick run (small sizes)" checked={*quick}
                        on_change={{ let q = quick.clone(); Callback::from(move |b: bool| q.set(b)) }} />
                    <button class="button primary" data-testid="run" onclick={run} disabled={r.running}>
                        { if r.running { "Running…" } else { "Run the kernels" } }
                    </button>
                    <p class="muted small" data-testid="status">{ &r.status }</p>
                    <p class="muted small">
                        { "Each number is the time of a batch of calls between two synchronizations, divided by the \
                           batch size; batches grow until they last 0.2 s (0.05 s in a quick run). On a software adapter \
                           (SwiftShader) these are a CPU emulating a GPU: the shapes of the curves, not GPU speeds." }
                    </p>
                </aside>
                <div class="results">
                    if let Some(e) = &r.error { <Banner kind={BannerKind::Error}>{ e.clone() }</Banner> }
                    { gemm_section(r) }
                    { rows_section(r) }
                    { fusion_section(r) }
                    { attention_section(r) }
                    { overhead_section(r) }
                </div>
            </div>
        </section>
    }
}

async fn run_all(
    dev: &Device,
    quick: bool,
    r: &mut Results,
    out: &UseStateHandle<Results>,
    alive: &Rc<Cell<bool>>,
) -> Result<()> {
    let min_s = if quick { 0.05 } else { 0.2 };
    let mut progress = |r: &mut Results, status: String| {
        r.status = status;
        out.set(r.clone());
        alive.get()
    };
    match dev {
        Device::Gpu(g) => {
            for n in gemm_sizes(quick) {
                for k in MatmulKernel::ALL {
                    if !progress(r, format!("matmul {} at n = {n}", k.name())) {
                        return Ok(());
                    }
                    let m = bench_gemm(g, k.name(), n, min_s, |s, a, b, c| {
                        g.gemm_with(k, s, a, b, c)
                    })
                    .await?;
                    r.gemm.push(m);
                }
            }
            run_common(g, quick, min_s, r, &mut progress).await?;
            for n in overhead_sizes(quick) {
                if !progress(r, format!("overhead at n = {n}")) {
                    return Ok(());
                }
                r.overhead
                    .push(bench_dispatch(g, "one submission per kernel", n, min_s).await?);
                r.overhead.push(one_submission(g, n, min_s).await?);
            }
        }
        Device::Cpu(c, _) => {
            for n in gemm_sizes(quick) {
                if !progress(r, format!("brrr-cpu gemm at n = {n}")) {
                    return Ok(());
                }
                r.gemm.push(
                    bench_gemm(
                        c,
                        "brrr-cpu (gemm crate, 1 thread)",
                        n,
                        min_s,
                        |s, a, b, cc| c.gemm(s, a, b, cc),
                    )
                    .await?,
                );
            }
            run_common(c, quick, min_s, r, &mut progress).await?;
            for n in overhead_sizes(quick) {
                if !progress(r, format!("overhead at n = {n}")) {
                    return Ok(());
                }
                r.overhead
                    .push(bench_dispatch(c, "one call per kernel", n, min_s).await?);
            }
        }
    }
    run_attention(dev, quick, min_s, r, &mut progress).await
}

/// The attention comparison, always on brrr-cpu: the fused kernel exists only there
/// (`Backend::has_fused_attention`), and both paths must run on one backend to compare.
async fn run_attention(
    dev: &Device,
    quick: bool,
    min_s: f64,
    r: &mut Results,
    progress: &mut impl FnMut(&mut Results, String) -> bool,
) -> Result<()> {
    let cpu = match dev {
        Device::Cpu(c, _) => c.clone(),
        Device::Gpu(g) => {
            r.attention_note = Some(if g.has_fused_attention() {
                "This section runs on brrr-cpu in wasm (single-threaded), the backend whose \
                 fused kernel it measures."
                    .into()
            } else {
                "The kernels above ran on WebGPU, but brrr-wgpu has no fused attention kernel \
                 (only brrr-cpu has one): this section runs both paths on brrr-cpu in wasm, \
                 single-threaded."
                    .into()
            });
            CpuBackend::new()
        }
    };
    for t in seq_lens(quick) {
        if !progress(r, format!("attention, composite and fused, at T = {t}")) {
            return Ok(());
        }
        r.attention
            .push(bench_attention(&cpu, AttentionSize::page(t), min_s).await?);
    }
    Ok(())
}

async fn run_common<B: Backend>(
    b: &B,
    quick: bool,
    min_s: f64,
    r: &mut Results,
    progress: &mut impl FnMut(&mut Results, String) -> bool,
) -> Result<()> {
    for n in row_sizes(quick) {
        for k in RowKernel::ALL {
            if !progress(r, format!("{} at {n} elements", k.name())) {
                return Ok(());
            }
            r.rows.push(bench_row_kernel(b, k, n, min_s).await?);
        }
        if !progress(r, format!("GELU fused and unfused at {n} elements")) {
            return Ok(());
        }
        r.fusion.push(bench_fusion(b, n, min_s).await?);
    }
    Ok(())
}

/// 64 copies recorded into one command buffer (`WgpuBackend::enqueue_elementwise`): the
/// launch cost a graph-capturing runtime pays, per dispatch.
async fn one_submission(g: &brrr_wgpu::WgpuBackend, n: u64, min_s: f64) -> Result<Measurement> {
    const DISPATCHES: usize = 64;
    let x = g.upload(&HostData::F32(crate::app::bench::pseudo_random(
        n as usize, 6,
    )))?;
    let mut y = g.zeros(DType::F32, n as usize)?;
    let s = time_call(g, min_s, || {
        g.enqueue_elementwise(&x, &mut y, DISPATCHES, true)
    })
    .await?;
    Ok(Measurement {
        kernel: format!("{DISPATCHES} kernels in one submission"),
        size: n,
        seconds: s / DISPATCHES as f64,
        flops: n as f64,
        bytes: 8.0 * n as f64,
    })
}

/// Series of `rate(m)` against `m.size`, one per kernel name, in first-seen order.
fn by_kernel(ms: &[Measurement], rate: impl Fn(&Measurement) -> f64) -> Vec<Series> {
    let mut names: Vec<&str> = Vec::new();
    for m in ms {
        if !names.contains(&m.kernel.as_str()) {
            names.push(&m.kernel);
        }
    }
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let pts = ms
                .iter()
                .filter(|m| m.kernel == *name)
                .map(|m| (m.size as f64, rate(m)))
                .collect();
            Series::new(
                *name,
                COLORS[(i + 1) % COLORS.len()],
                SeriesStyle::LinePoints,
                pts,
            )
        })
        .collect()
}

fn gemm_section(r: &Results) -> Html {
    if r.gemm.is_empty() {
        return html! {
            <div class="subsection"><h2>{ "Matmul, four versions" }</h2>
            <p class="muted">{ "Press “Run the kernels”: the four WGSL matmuls (naive, shared-memory tiles, register blocking, vec4) at growing sizes, then the memory-bound kernels, fusion, launch overhead, and attention fused against composite on brrr-cpu." }</p></div>
        };
    }
    let rows = r.gemm.iter().map(|m| html! {
        <tr data-testid="gemm-row" data-kernel={m.kernel.clone()} data-n={m.size.to_string()}>
            <td><code>{ &m.kernel }</code></td>
            <td class="num">{ m.size }</td>
            <td class="num" data-testid="gemm-flops" data-value={format!("{:e}", m.flops)}>{ table::flops(m.flops) }</td>
            <td class="num">{ table::duration(m.seconds) }</td>
            <td class="num" data-testid="gemm-rate" data-value={format!("{:e}", m.flops_per_s())}>{ table::flops_per_s(m.flops_per_s()) }</td>
        </tr>
    });
    let best = r
        .gemm
        .iter()
        .max_by(|a, b| a.flops_per_s().total_cmp(&b.flops_per_s()));
    html! {
        <div class="subsection">
            <h2>{ "Matmul, four versions" }</h2>
            if let Some(b) = best {
                <div class="stats">
                    <Stat label="Fastest" text={table::flops_per_s(b.flops_per_s())} value={b.flops_per_s()} id="best-gemm" strong=true
                        note={format!("{} at n = {}", b.kernel, b.size)} />
                </div>
            }
            <Chart id="gemm-chart" x_label="n (n×n×n f32 GEMM)" y_label="FLOP/s" x_log=true y_log=true
                series={by_kernel(&r.gemm, Measurement::flops_per_s)} />
            <div class="table-wrap"><table class="table">
                <thead><tr><th>{ "kernel" }</th><th class="num">{ "n" }</th><th class="num">{ "FLOPs (2n³)" }</th><th class="num">{ "time" }</th><th class="num">{ "rate" }</th></tr></thead>
                <tbody>{ for rows }</tbody>
            </table></div>
        </div>
    }
}

fn rows_section(r: &Results) -> Html {
    if r.rows.is_empty() {
        return html! {};
    }
    let rows = r.rows.iter().map(|m| html! {
        <tr data-testid="row-kernel" data-kernel={m.kernel.clone()} data-n={m.size.to_string()}>
            <td>{ &m.kernel }</td><td class="num">{ m.size }</td>
            <td class="num" data-testid="row-bytes" data-value={format!("{:e}", m.bytes)}>{ table::bytes(m.bytes) }</td>
            <td class="num">{ table::duration(m.seconds) }</td>
            <td class="num">{ table::bandwidth(m.bytes_per_s()) }</td>
        </tr>
    });
    html! {
        <div class="subsection">
            <h2>{ "Memory-bound kernels" }</h2>
            <p class="muted">{ "Element-wise, softmax and LayerNorm do a handful of FLOPs per byte: their speed is bytes moved per second. Bytes are brrr-perf's minimum traffic (each input read once, each output written once)." }</p>
            <Chart id="rows-chart" x_label="elements (f32)" y_label="bytes/s (minimum traffic)" x_log=true y_log=true
                series={by_kernel(&r.rows, Measurement::bytes_per_s)} />
            <div class="table-wrap"><table class="table">
                <thead><tr><th>{ "kernel" }</th><th class="num">{ "elements" }</th><th class="num">{ "bytes" }</th><th class="num">{ "time" }</th><th class="num">{ "bandwidth" }</th></tr></thead>
                <tbody>{ for rows }</tbody>
            </table></div>
        </div>
    }
}

fn fusion_section(r: &Results) -> Html {
    let Some((unfused, fused, diff)) = r.fusion.last() else {
        return html! {};
    };
    let ms: Vec<Measurement> = r
        .fusion
        .iter()
        .flat_map(|(u, f, _)| [u.clone(), f.clone()])
        .collect();
    html! {
        <div class="subsection">
            <h2>{ "Fusion: GELU in one kernel or eight" }</h2>
            <p class="muted">{ "GELU's formula as eight separate kernels (square, multiply, scale, add, scale, tanh, scale, multiply), \
                each a round trip through memory, against brrr's fused gelu kernel. Same arithmetic; 76 bytes per element against 8." }</p>
            <div class="stats">
                <Stat label="Unfused" text={table::duration(unfused.seconds)} value={unfused.seconds} id="unfused-time" note={format!("{} elements", unfused.size)} />
                <Stat label="Fused" text={table::duration(fused.seconds)} value={fused.seconds} id="fused-time" />
                <Stat label="Speed-up" text={format!("{:.1}×", unfused.seconds / fused.seconds)} value={unfused.seconds / fused.seconds} id="fusion-speedup" strong=true />
                <Stat label="Bytes ratio" text={format!("{:.1}×", unfused.bytes / fused.bytes)} value={unfused.bytes / fused.bytes} id="fusion-bytes" />
                <Stat label="Max |difference|" text={format!("{diff:.1e}")} value={*diff} id="fusion-diff" />
            </div>
            <Chart id="fusion-chart" x_label="elements (f32)" y_label="seconds per GELU" x_log=true y_log=true
                series={by_kernel(&ms, |m| m.seconds)} />
        </div>
    }
}

fn overhead_section(r: &Results) -> Html {
    if r.overhead.is_empty() {
        return html! {};
    }
    html! {
        <div class="subsection">
            <h2>{ "The overhead regime" }</h2>
            <p class="muted">{ "Time per kernel of a copy as the size grows. Where the curve is flat, the kernel's work is free and \
                the launch is all that costs: many tiny kernels are overhead-bound, whatever the GPU. Recording many dispatches \
                into one submission (as CUDA graphs do) lowers the floor." }</p>
            <Chart id="overhead-chart" x_label="elements (f32)" y_label="seconds per kernel" x_log=true y_log=true
                series={by_kernel(&r.overhead, |m| m.seconds)} />
        </div>
    }
}

/// The attention rows as two timing series (composite, fused) for `by_kernel`; `bytes`
/// is what each kept for the backward.
fn attention_series(rows: &[AttentionRow]) -> Vec<Series> {
    let ms: Vec<Measurement> = rows
        .iter()
        .flat_map(|a| {
            let m = |kernel: &str, seconds, bytes| Measurement {
                kernel: kernel.into(),
                size: a.seq as u64,
                seconds,
                flops: 0.0,
                bytes: bytes as f64,
            };
            [
                m(
                    "composite (GEMM, softmax, GEMM)",
                    a.composite_s,
                    a.agreement.composite_bytes,
                ),
                m(
                    "fused (Backend::attention)",
                    a.fused_s,
                    a.agreement.fused_bytes,
                ),
            ]
        })
        .collect();
    by_kernel(&ms, |m| m.seconds)
}

fn attention_row(a: &AttentionRow) -> Html {
    let g = &a.agreement;
    let diff_class = if a.agrees() { "num" } else { "num bad" };
    html! {
        <tr data-testid="attn-row" data-t={a.seq.to_string()}>
            <td class="num">{ a.seq }</td>
            <td class="num" data-testid="attn-composite-s" data-value={format!("{:e}", a.composite_s)}>{ table::duration(a.composite_s) }</td>
            <td class="num" data-testid="attn-fused-s" data-value={format!("{:e}", a.fused_s)}>{ table::duration(a.fused_s) }</td>
            <td class="num" data-testid="attn-speedup" data-value={format!("{:e}", a.speedup())}>{ format!("{:.2}×", a.speedup()) }</td>
            <td class="num" data-testid="attn-composite-bytes" data-value={g.composite_bytes.to_string()}>{ table::bytes(g.composite_bytes as f64) }</td>
            <td class="num" data-testid="attn-fused-bytes" data-value={g.fused_bytes.to_string()}>{ table::bytes(g.fused_bytes as f64) }</td>
            <td class={diff_class} data-testid="attn-diff" data-value={format!("{:e}", g.max_diff)}>{ format!("{:.1e}", g.max_diff) }</td>
        </tr>
    }
}

fn attention_section(r: &Results) -> Html {
    let Some(last) = r.attention.last() else {
        return html! {};
    };
    let g = &last.agreement;
    html! {
        <div class="subsection" data-testid="attention-section">
            <h2>{ "Attention: fused against composite" }</h2>
            <p class="muted">{ format!("Causal self-attention of B = {BATCH}, H = {HEADS} heads of D = {HEAD_DIM} on the same random \
                [B, T, 3·H·D] input, two ways. Composite, as brrr-nn's layer runs it: copy q, k, v out into [B·H, T, D], \
                q·kᵀ as a GEMM, the causal scaled softmax, P·v as a GEMM, merge the heads; it keeps the [B·H, T, T] \
                probabilities for the backward. Fused (brrr-cpu's Backend::attention): q, k, v read in place, {ATTENTION_QUERY_ROWS} query rows \
                at a time, only the keys each row can see; it keeps a log-sum-exp per row (B·T·H f32) and recomputes the \
                probabilities in the backward. Differences above {TOLERANCE:.0e} are marked red; 0 means the same bits.") }</p>
            if let Some(note) = &r.attention_note {
                <Banner kind={BannerKind::Info}>{ note.clone() }</Banner>
            }
            <div class="stats">
                <Stat label="Speed-up" text={format!("{:.2}×", last.speedup())} value={last.speedup()} id="attn-speedup-last" strong=true
                    note={format!("at T = {}", last.seq)} />
                <Stat label="Kept, composite" text={table::bytes(g.composite_bytes as f64)} value={g.composite_bytes as f64} id="attn-composite-kept" />
                <Stat label="Kept, fused" text={table::bytes(g.fused_bytes as f64)} value={g.fused_bytes as f64} id="attn-fused-kept" />
                <Stat label="Max |difference|" text={format!("{:.1e}", g.max_diff)} value={g.max_diff} id="attn-diff-last" />
            </div>
            <Chart id="attention-chart" x_label="T (context length)" y_label="seconds per forward" x_log=true y_log=true
                series={attention_series(&r.attention)} />
            <div class="table-wrap"><table class="table">
                <thead><tr><th class="num">{ "T" }</th><th class="num">{ "composite" }</th><th class="num">{ "fused" }</th>
                    <th class="num">{ "speed-up" }</th><th class="num">{ "kept, composite" }</th><th class="num">{ "kept, fused" }</th>
                    <th class="num">{ "max |difference|" }</th></tr></thead>
                <tbody>{ for r.attention.iter().map(attention_row) }</tbody>
            </table></div>
            <p class="muted small">{ "Kept: composite q, k, v [B·H, T, D] and the probabilities [B·H, T, T]; fused qkv [B, T, 3·H·D] \
                (c_attn's output, kept as it is), y [B, T, H·D] (also c_proj's input) and the log-sum-exp [B, T, H]. Counted from \
                the tensors each run returned." }</p>
        </div>
    }
}
