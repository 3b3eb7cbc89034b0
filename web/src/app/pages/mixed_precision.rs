//! Mixed precision: a value typed or slid by the reader, stored in f32, f16 and bf16 bit
//! by bit (rounding, relative error, fate and ranges from `brrr_amp::numerics`, through
//! `crate::logic::mixed_precision`), and the loss scale of a real `--amp fp16` run of
//! brrr-train's `Trainer` on brrr-cpu in the page, skipped steps marked.

use crate::app::components::{
    Banner, BannerKind, Chart, PageHeader, Series, SeriesStyle, SizeInput, Stat,
};
use crate::app::trainer::corpus;
use crate::app::util::{edit, yield_now};
use crate::logic::mixed_precision::{
    AMP_PRESET, FormatView, LOG10_RANGE, RangeRow, ScaleInput, ScalePoint, ScaleSummary,
    amp_config, amp_train_config, bit_string, data_value, explore, fate_text, parse_value, ranges,
    scale_series, slider_of, summarize, value_of_slider,
};
use crate::logic::sampling::preset;
use crate::logic::site::PageId;
use brrr_amp::numerics::Fate;
use brrr_cpu::CpuBackend;
use brrr_train::{Batcher, Trainer, val_batches};
use std::cell::Cell;
use std::rc::Rc;
use wasm_bindgen::JsCast;
use web_sys::HtmlInputElement;
use yew::prelude::*;

/// Values worth a click: f16's largest, the first that overflows it, gradients f16
/// flushes to zero, a value bf16 rounds coarsely.
const EXAMPLES: [&str; 7] = ["0.1", "65504", "65520", "6e-8", "2e-8", "100000", "3.14159"];

/// The mixed-precision page.
#[function_component(MixedPrecisionPage)]
pub fn mixed_precision_page() -> Html {
    html! {
        <section class="page">
            <PageHeader id={PageId::MixedPrecision} />
            <h2>{ "One number in three formats" }</h2>
            <FormatsExplorer />
            <h2>{ "The loss scale of an fp16 run" }</h2>
            <LossScaleRun />
        </section>
    }
}

fn input_text(e: &Event) -> Option<String> {
    e.target()
        .and_then(|t| t.dyn_into::<HtmlInputElement>().ok())
        .map(|i| i.value())
}

#[function_component(FormatsExplorer)]
fn formats_explorer() -> Html {
    let text = use_state(|| "0.1".to_string());
    let parsed = parse_value(&text);
    let x = parsed.clone().unwrap_or(0.0);
    let on_text = {
        let text = text.clone();
        Callback::from(move |e: InputEvent| {
            if let Some(s) = input_text(&e) {
                text.set(s);
            }
        })
    };
    let on_slide = {
        let text = text.clone();
        let negative = x.is_sign_negative();
        Callback::from(move |e: InputEvent| {
            if let Some(p) = input_text(&e).and_then(|s| s.parse::<f64>().ok()) {
                text.set(format!("{}", value_of_slider(p, negative)));
            }
        })
    };
    let examples = EXAMPLES.iter().map(|v| {
        let text = text.clone();
        let onclick = Callback::from(move |_| text.set(v.to_string()));
        html! { <button class="button small" data-testid={format!("mp-example-{v}")} {onclick}>{ *v }</button> }
    });
    html! {
        <div class="layout">
            <aside class="panel controls">
                <div class="control">
                    <label for="mp-value">{ "Value" }</label>
                    <input id="mp-value" type="text" class="text-input" data-testid="mp-value" value={(*text).clone()} oninput={on_text} />
                </div>
                <div class="control">
                    <label for="mp-slider">{ "log₁₀ |value|" }</label>
                    <input id="mp-slider" type="range" data-testid="mp-slider" min={LOG10_RANGE.0.to_string()} max={LOG10_RANGE.1.to_string()}
                        step="0.01" value={format!("{:.2}", slider_of(x))} oninput={on_slide} />
                </div>
                <div class="control"><label>{ "Try" }</label><div class="chips">{ for examples }</div></div>
                <p class="muted small">{ "Rounding is to nearest, ties to even, as the hardware does; what no format can hold becomes ±inf or 0." }</p>
            </aside>
            <div class="results">
                { match parsed {
                    Ok(x) => formats_table(x),
                    Err(e) => html! { <Banner kind={BannerKind::Error}>{ e }</Banner> },
                } }
                <h3>{ "Ranges" }</h3>
                { ranges_table() }
            </div>
        </div>
    }
}

fn formats_table(x: f64) -> Html {
    let rows = explore(x).into_iter().map(|v| format_row(&v));
    html! {
        <div class="table-wrap">
            <table class="table" data-testid="mp-formats">
                <thead><tr>
                    <th>{ "format" }</th><th>{ "bits: sign · exponent · mantissa" }</th><th>{ "as the fields say" }</th>
                    <th class="num">{ "stored value" }</th><th class="num">{ "relative error" }</th><th>{ "fate" }</th>
                </tr></thead>
                <tbody>{ for rows }</tbody>
            </table>
        </div>
    }
}

fn format_row(v: &FormatView) -> Html {
    let f = &v.format;
    let name = f.name;
    let error = if v.relative_error.is_infinite() {
        "∞".to_string()
    } else {
        format!("{:.3e}", v.relative_error)
    };
    let fate_class = match v.fate {
        Fate::Overflow | Fate::Underflow | Fate::NonFinite => "bad",
        Fate::Subnormal => "warn",
        Fate::Normal | Fate::Zero => "",
    };
    html! {
        <tr data-testid={format!("mp-row-{name}")}>
            <td><strong>{ name }</strong></td>
            <td class="mp-bits" data-testid={format!("mp-bits-{name}")}
                data-bits={format!("{:x}", v.fields.bits(f))}>
                <span class="s" title="sign">{ bit_string(v.fields.sign, 1) }</span>
                <span class="e" title={format!("exponent, {} bits, bias {}", f.exponent_bits, f.bias())}>{ bit_string(v.fields.exponent, f.exponent_bits) }</span>
                <span class="m" title={format!("mantissa, {} bits", f.mantissa_bits)}>{ bit_string(v.fields.mantissa, f.mantissa_bits) }</span>
            </td>
            <td class="small">{ v.formula() }</td>
            <td class="num" data-testid={format!("mp-stored-{name}")} data-value={data_value(v.rounded)}>{ format!("{}", v.rounded) }</td>
            <td class="num" data-testid={format!("mp-error-{name}")} data-value={data_value(v.relative_error)}>{ error }</td>
            <td class={fate_class} data-testid={format!("mp-fate-{name}")}>{ fate_text(v.fate) }</td>
        </tr>
    }
}

fn ranges_table() -> Html {
    let row = |r: &RangeRow| {
        let name = r.format.name;
        let cell = |key: &str, v: f64| {
            html! { <td class="num" data-testid={format!("mp-range-{name}-{key}")} data-value={format!("{v:e}")}>{ format!("{v:.4e}") }</td> }
        };
        html! {
            <tr>
                <td><strong>{ name }</strong>{ format!(" ({} + {} bits)", r.format.exponent_bits, r.format.mantissa_bits) }</td>
                { cell("max", r.max) }{ cell("min-normal", r.min_normal) }{ cell("min-subnormal", r.min_subnormal) }
                { cell("epsilon", r.epsilon) }<td class="num">{ format!("{:.1}", r.digits) }</td>
            </tr>
        }
    };
    html! {
        <table class="table" data-testid="mp-ranges">
            <thead><tr><th>{ "format (exponent + mantissa)" }</th><th class="num">{ "largest" }</th><th class="num">{ "smallest normal" }</th>
                <th class="num">{ "smallest subnormal" }</th><th class="num">{ "epsilon" }</th><th class="num">{ "decimal digits" }</th></tr></thead>
            <tbody>{ for ranges().iter().map(row) }</tbody>
        </table>
    }
}

/// State of the fp16 run.
#[derive(Clone, Debug, Default, PartialEq)]
struct RunView {
    /// The initial scale of the run shown.
    init_scale: f32,
    /// Steps reported so far.
    points: Vec<ScalePoint>,
    /// Steps of the run.
    total: u64,
    /// Whether it still trains.
    running: bool,
    /// What went wrong.
    error: Option<String>,
}

/// Trains the page's fp16 run on brrr-cpu, reporting after every step; stops when
/// `stop` is set (a new run, or the page left).
async fn fp16_run(input: ScaleInput, view: UseStateHandle<RunView>, stop: Rc<Cell<bool>>) {
    let fail = |view: &UseStateHandle<RunView>, e: String| {
        let mut v = (**view).clone();
        v.running = false;
        v.error = Some(e);
        view.set(v);
    };
    let amp = match amp_config(&input) {
        Ok(a) => a,
        Err(e) => return fail(&view, e),
    };
    let init_scale = amp.scaler.init_scale;
    let c = match corpus().await {
        Ok(c) => c,
        Err(e) => return fail(&view, e.to_string()),
    };
    let cfg = amp_train_config(
        &preset(AMP_PRESET),
        input.steps,
        crate::app::trainer::CORPUS_URL,
        amp,
    );
    let made = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed).and_then(|data| {
        let val = val_batches(c.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches)?;
        Trainer::new(&CpuBackend::new(), cfg, Box::new(data), val)
    });
    let mut trainer = match made {
        Ok(t) => t,
        Err(e) => return fail(&view, e.to_string()),
    };
    let mut v = RunView {
        init_scale,
        total: input.steps,
        running: true,
        ..RunView::default()
    };
    view.set(v.clone());
    while !trainer.is_finished() && !stop.get() {
        match trainer.step().await {
            Ok(s) => v.points.push(ScalePoint {
                step: s.step,
                loss: s.loss,
                scale: s.loss_scale,
                skipped: s.skipped,
            }),
            Err(e) => {
                v.error = Some(e.to_string());
                break;
            }
        }
        view.set(v.clone());
        yield_now().await;
    }
    if !stop.get() {
        v.running = false;
        view.set(v);
    }
}

#[function_component(LossScaleRun)]
fn loss_scale_run() -> Html {
    let input = use_state(ScaleInput::default);
    let view = use_state(RunView::default);
    // One flag per run: a new run (or leaving the page) stops the previous one.
    let stop = use_mut_ref(|| Rc::new(Cell::new(false)));
    let start = {
        let (input, view, stop) = (input.clone(), view.clone(), stop.clone());
        Callback::from(move |_: ()| {
            stop.borrow().set(true);
            let flag = Rc::new(Cell::new(false));
            *stop.borrow_mut() = flag.clone();
            let (i, v) = (*input, view.clone());
            wasm_bindgen_futures::spawn_local(fp16_run(i, v, flag));
        })
    };
    {
        let (start, stop) = (start.clone(), stop.clone());
        use_effect_with((), move |_| {
            start.emit(());
            move || stop.borrow().set(true)
        });
    }
    let size = |id: &'static str,
                label: &'static str,
                value: u64,
                (min, max): (u64, u64),
                set: fn(&mut ScaleInput, u64)| {
        html! { <SizeInput id={id} label={label} value={value} {min} {max} linear=true on_change={edit(&input, set)} /> }
    };
    let p = preset(AMP_PRESET);
    html! {
        <div class="layout">
            <aside class="panel controls">
                { size("mp-init", "initial scale: log₂", input.init_log2 as u64, (0, 40), |i, v| i.init_log2 = v as i32) }
                { size("mp-growth", "growth interval (clean steps)", u64::from(input.growth_interval), (1, 2000), |i, v| i.growth_interval = v as u32) }
                { size("mp-hysteresis", "hysteresis (overflows before backing off)", u64::from(input.hysteresis), (1, 8), |i, v| i.hysteresis = v as u32) }
                { size("mp-steps", "steps", input.steps, (5, 500), |i, v| i.steps = v) }
                <button class="button primary" data-testid="mp-train" onclick={start.reform(|_| ())}>{ "Train again (fp16)" }</button>
                <p class="muted small">{ format!(
                    "brrr-train's Trainer with --amp fp16: a {}-layer GPT of width {} (the training page's “{}” preset), f16 compute copies of \
                     f32 masters, gradients unscaled and checked on the device, DynamicLossScaler's rule. It runs on brrr-cpu in wasm \
                     so that every browser can run it (WebGPU has f16 only where the adapter offers shader-f16). PyTorch's default \
                     growth interval is 2000; 10 here lets a short run show the scale climbing again.",
                    p.n_layer, p.n_embd, p.key) }</p>
            </aside>
            <div class="results">{ run_results(&view) }</div>
        </div>
    }
}

fn run_results(v: &RunView) -> Html {
    let s: ScaleSummary = summarize(v.init_scale, &v.points);
    let step = v.points.last().map_or(0, |p| p.step);
    let (line, skipped) = scale_series(v.init_scale, &v.points);
    let series = vec![
        Series::new(
            "loss scale used by the step",
            "#2563eb",
            SeriesStyle::Line,
            line,
        ),
        Series::new(
            "skipped step (inf/NaN gradient)",
            "#dc2626",
            SeriesStyle::Points,
            skipped,
        ),
    ];
    let losses = v
        .points
        .iter()
        .filter(|p| !p.skipped)
        .map(|p| (p.step as f64, f64::from(p.loss)))
        .collect();
    html! {
        <>
            if let Some(e) = &v.error { <Banner kind={BannerKind::Error}>{ e.clone() }</Banner> }
            <div class="stats">
                <Stat label="Step" text={format!("{step} / {}{}", v.total, if v.running { " …" } else { "" })} value={step as f64} id="mp-step" />
                <Stat label="Skipped steps" text={s.skipped.to_string()} value={s.skipped as f64} id="mp-skipped" strong=true
                    note={s.first_applied.map_or("no step applied yet".into(), |f| format!("first applied step: {f}"))} />
                <Stat label="Loss scale now" text={s.last_scale.map_or("—".into(), |x| format!("2^{}", x.log2()))} value={s.last_scale.map(f64::from)} id="mp-scale"
                    note={format!("from 2^{}", v.init_scale.log2())} />
                <Stat label="Back-offs / growths" text={format!("{} / {}", s.backoffs, s.growths)} value={s.backoffs as f64} id="mp-backoffs" />
                <Stat label="Loss" text={v.points.last().map_or("—".into(), |p| format!("{:.3} nats", p.loss))} value={v.points.last().map(|p| f64::from(p.loss))} id="mp-loss" />
            </div>
            <Chart id="mp-scale-chart" x_label="optimizer step" y_label="loss scale S" y_log=true series={series} />
            <Chart id="mp-loss-chart" x_label="optimizer step" y_label="training loss (nats per byte), applied steps" series={vec![Series::new("loss", "#0f766e", SeriesStyle::Line, losses)]} y_include={Some(0.0)} />
            <p class="muted small">{ "A skipped step found an inf or NaN among the unscaled gradients: AdamW left the weights alone and the scale \
                halved (after as many such steps as the hysteresis allows). Every number comes from the trainer's StepStats (loss_scale, skipped)." }</p>
        </>
    }
}
