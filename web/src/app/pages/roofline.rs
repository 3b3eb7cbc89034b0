//! The roofline explorer: `crate::logic::roofline::explore` drawn.

use crate::app::components::{
    Banner, BannerKind, Chart, GpuPicker, PageHeader, Select, Series, SeriesStyle, SizeInput, Stat,
    Toggle,
};
use crate::app::util::edit;
use crate::logic::roofline::{
    Dim, OpKind, RooflineInput, RooflineView, dtypes_for, explore, find_gpu,
};
use crate::logic::site::PageId;
use brrr_perf::DType;
use brrr_perf::roofline::Regime;
use brrr_perf::table;
use yew::prelude::*;

const COLORS: [&str; 4] = ["#2563eb", "#16a34a", "#9333ea", "#ea580c"];

/// The roofline explorer page.
#[function_component(RooflinePage)]
pub fn roofline_page() -> Html {
    let input = use_state(RooflineInput::default);
    let view = explore(&input);
    html! {
        <section class="page">
            <PageHeader id={PageId::Roofline} />
            <div class="layout">
                <aside class="panel controls">{ controls(&input) }</aside>
                <div class="results">
                    { match &view {
                        Ok(v) => results(&input, v),
                        Err(e) => html! { <Banner kind={BannerKind::Error}>{ e.to_string() }</Banner> },
                    } }
                </div>
            </div>
        </section>
    }
}

fn controls(input: &UseStateHandle<RooflineInput>) -> Html {
    let on_gpu = edit(input, |i: &mut RooflineInput, id: String| {
        i.gpu = id;
        // Keep the dtype if the new GPU has it, else take its first.
        if let Ok(g) = find_gpu(&i.gpu) {
            let ds = dtypes_for(&g);
            if !ds.contains(&i.dtype) {
                i.dtype = ds.first().copied().unwrap_or(DType::F32);
            }
        }
    });
    let dtypes = find_gpu(&input.gpu)
        .map(|g| dtypes_for(&g))
        .unwrap_or_default();
    let on_dtype = edit(input, |i: &mut RooflineInput, s: String| {
        if let Ok(d) = DType::parse(&s) {
            i.dtype = d;
        }
    });
    let on_kind = edit(input, |i: &mut RooflineInput, s: String| {
        if let Some(k) = OpKind::from_key(&s) {
            i.set_kind(k);
        }
    });
    let sizes = input.kind.dims().iter().map(|&d| {
        let (min, max) = d.range();
        let on_change = edit(input, move |i: &mut RooflineInput, v: u64| i.set(d, v));
        html! {
            <SizeInput id={format!("dim-{}", d.key())} label={d.label()} value={input.get(d)}
                {min} {max} linear={d == Dim::ChainOps} {on_change} />
        }
    });
    let on_vary = edit(input, |i: &mut RooflineInput, s: String| {
        if let Some(&d) = i.kind.dims().iter().find(|d| d.key() == s) {
            i.vary = d;
        }
    });
    let fused_label = match input.kind {
        OpKind::Chain => Some("fused into one kernel"),
        OpKind::Attention => Some("fused (FlashAttention)"),
        _ => None,
    };
    let on_fused = edit(input, |i: &mut RooflineInput, b: bool| i.fused = b);
    let on_causal = edit(input, |i: &mut RooflineInput, b: bool| i.causal = b);
    let dims = input.kind.dims();
    html! {
        <>
            <GpuPicker selected={input.gpu.clone()} on_change={on_gpu} />
            <Select id="op" label="Op" selected={input.kind.key()}
                options={OpKind::ALL.iter().map(|k| (k.key().to_string(), k.label().to_string())).collect::<Vec<_>>()}
                on_change={on_kind} />
            <Select id="dtype" label="Dtype" selected={input.dtype.name()}
                options={dtypes.iter().map(|d| (d.name().to_string(), d.name().to_string())).collect::<Vec<_>>()}
                on_change={on_dtype} />
            { for sizes }
            if let Some(label) = fused_label {
                <Toggle id="fused" label={label} checked={input.fused} on_change={on_fused} />
            }
            if input.kind == OpKind::Attention {
                <Toggle id="causal" label="causal" checked={input.causal} on_change={on_causal} />
            }
            <Select id="vary" label="Vary (the trail on the chart)" selected={input.vary.key()}
                options={dims.iter().map(|d| (d.key().to_string(), d.label().to_string())).collect::<Vec<_>>()}
                on_change={on_vary} />
        </>
    }
}

fn results(input: &RooflineInput, v: &RooflineView) -> Html {
    let p = &v.prediction;
    let regime_class = match p.regime {
        Regime::Compute => "regime compute",
        Regime::Memory => "regime memory",
        Regime::Overhead => "regime overhead",
    };
    html! {
        <>
            <div class="stats">
                <Stat label="FLOPs" text={table::flops(p.op.flops)} value={p.op.flops} id="flops" />
                <Stat label="Minimum bytes" text={table::bytes(p.op.bytes)} value={p.op.bytes} id="bytes" />
                <Stat label="Intensity" text={format!("{} FLOP/B", table::sig3(p.intensity))} value={p.intensity} id="intensity" />
                <Stat label="Ridge point" text={format!("{} FLOP/B", table::sig3(p.ridge))} value={p.ridge} id="ridge" />
                <Stat label="Predicted time" text={table::duration(p.time_s)} value={p.time_s} id="time" strong=true
                    note={format!("compute {} · memory {}", table::duration(p.compute_s), table::duration(p.memory_s))} />
                <Stat label="Attainable" text={table::flops_per_s(p.attainable_flops)} value={p.attainable_flops} id="attainable" />
            </div>
            <p class={regime_class} data-testid="regime">
                { format!("{} — ", p.regime) }
                { match p.regime {
                    Regime::Compute => "the op's intensity is above the ridge point: more bandwidth would not help, fewer FLOPs or a faster unit would.",
                    _ => "below the ridge point the bytes decide the time: fuse, reuse, or move fewer bytes (a smaller dtype).",
                } }
            </p>
            { roofline_chart(input, v) }
            if let Some(q) = &v.quant { { quantization(input, v, q) } }
        </>
    }
}

fn roofline_chart(input: &RooflineInput, v: &RooflineView) -> Html {
    let trail_x: Vec<f64> = v.trail.iter().map(|t| t.prediction.intensity).collect();
    let lo = trail_x
        .iter()
        .copied()
        .chain([v.prediction.intensity])
        .fold(f64::INFINITY, f64::min)
        / 4.0;
    let hi = trail_x
        .iter()
        .copied()
        .chain([v.prediction.intensity])
        .fold(0.0, f64::max)
        * 4.0;
    let mut series: Vec<Series> = v
        .analysis
        .rooflines
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (a, b) = (lo.min(r.ridge() / 8.0), hi.max(r.ridge() * 8.0));
            Series::new(
                format!(
                    "{} ({}, {})",
                    r.label,
                    table::flops_per_s(r.peak_flops),
                    table::bandwidth(r.bandwidth)
                ),
                COLORS[(i + 1) % COLORS.len()],
                SeriesStyle::Line,
                vec![
                    (a, r.attainable(a)),
                    (r.ridge(), r.peak_flops),
                    (b, r.peak_flops),
                ],
            )
        })
        .collect();
    let mut trail = Series::new(
        format!("as {} changes (×2 steps)", input.vary.label()),
        "#64748b",
        SeriesStyle::Trail,
        v.trail
            .iter()
            .map(|t| (t.prediction.intensity, t.prediction.attainable_flops))
            .collect(),
    );
    trail.tips = v
        .trail
        .iter()
        .map(|t| {
            format!(
                "{} = {}: {}, {}",
                input.vary.key(),
                t.value,
                t.prediction.regime,
                table::duration(t.prediction.time_s)
            )
        })
        .collect();
    series.push(trail);
    let mut op = Series::new(
        p_name(v),
        COLORS[0],
        SeriesStyle::Points,
        vec![(v.prediction.intensity, v.prediction.attainable_flops)],
    );
    op.highlight = Some(0);
    op.tips = vec![format!("{}: {}", v.prediction.op.name, v.prediction.regime)];
    series.push(op);
    html! {
        <Chart id="roofline-chart" x_label="arithmetic intensity (FLOP/byte)" y_label="attainable FLOP/s"
            x_log=true y_log=true {series} />
    }
}

fn p_name(v: &RooflineView) -> String {
    format!("this op: {}", v.prediction.op.name)
}

fn quantization(
    input: &RooflineInput,
    v: &RooflineView,
    q: &crate::logic::roofline::QuantPoint,
) -> Html {
    let d = crate::logic::roofline::quant_dim(input.vary);
    let series = vec![Series::new(
        "useful FLOP/s with tile and wave quantization",
        COLORS[0],
        SeriesStyle::Line,
        v.quant_sweep
            .iter()
            .map(|p| (p.value as f64, p.useful_flops))
            .collect(),
    )];
    let rows = v.alignment.iter().map(|a| {
        html! {
            <tr>
                <td><code>{ a.name }</code></td>
                <td class="num">{ a.value }</td>
                <td data-testid={format!("align-{}", a.name)}>
                    { if a.aligned { format!("✓ multiple of {}", v.align_multiple) } else { format!("✗ pad to {}", a.padded) } }
                </td>
            </tr>
        }
    });
    let qq = &q.quant;
    html! {
        <div class="subsection">
            <h2>{ "Tile and wave quantization" }</h2>
            <p class="muted">
                { format!("The output is cut into {0}×{0} tiles, one per SM at a time ({1} SMs): a size that is not a \
                  multiple of the tile wastes part of the last tile, and a tile count that is not a multiple of {1} \
                  leaves SMs idle in the last wave. GPT-2's vocabulary of 50257 is odd; nanoGPT pads it to 50304 \
                  (a multiple of 64 and of 128).", crate::logic::roofline::TILE, v.gpu.sm_count) }
            </p>
            <div class="stats">
                <Stat label="Tiles" text={format!("{} × {} = {}", qq.tiles_m, qq.tiles_n, qq.tiles)} value={qq.tiles as f64} id="tiles" />
                <Stat label="Tile efficiency" text={table::percent(qq.tile_efficiency)} value={qq.tile_efficiency} id="tile-eff" />
                <Stat label="Waves" text={format!("{:.2}", qq.waves)} value={qq.waves} id="waves" />
                <Stat label="Wave efficiency" text={table::percent(qq.wave_efficiency)} value={qq.wave_efficiency} id="wave-eff" />
                <Stat label="Time with quantization" text={table::duration(q.time_s)} value={q.time_s} id="qtime" strong=true />
            </div>
            <table class="table">
                <thead><tr><th>{ "dim" }</th><th>{ "size" }</th><th>{ format!("16-byte aligned ({})", input.dtype) }</th></tr></thead>
                <tbody>{ for rows }</tbody>
            </table>
            <Chart id="quant-chart" x_label={format!("{} (±3 tiles)", d.label())} y_label="useful FLOP/s"
                series={series} x_marks={vec![(q.value as f64, format!("{} = {}", d.key(), q.value))]} />
        </div>
    }
}
