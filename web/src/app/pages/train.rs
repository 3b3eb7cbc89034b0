//! Train in the browser: brrr-train's `Trainer` on WebGPU or the CPU, a live loss chart,
//! tokens per second, and samples from the model.

use crate::app::components::{
    Banner, BannerKind, Chart, DeviceBanner, DeviceState, PageHeader, Select, Series, SeriesStyle,
    SizeInput, Stat,
};
use crate::app::device::{Device, acquire};
use crate::app::trainer::{Progress, config, corpus, make_trainer, sample, train};
use crate::logic::sampling::{PRESETS, preset};
use crate::logic::site::PageId;
use brrr_backend::{Backend, Result};
use brrr_cpu::CpuBackend;
use brrr_perf::table;
use brrr_train::Trainer;
use brrr_wgpu::WgpuBackend;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::JsCast;
use yew::prelude::*;

/// The trainer of the last run, kept for sampling after it stops.
enum Slot {
    Gpu(Trainer<WgpuBackend>),
    Cpu(Trainer<CpuBackend>),
}

/// What a run reports to the page, and the page's requests to the run.
#[derive(Clone)]
struct Ctx {
    progress: UseStateHandle<Progress>,
    running: UseStateHandle<bool>,
    text: UseStateHandle<String>,
    error: UseStateHandle<Option<String>>,
    stop: Rc<Cell<bool>>,
    want_sample: Rc<Cell<bool>>,
    prompt: Rc<RefCell<String>>,
    slot: Rc<RefCell<Option<Slot>>>,
}

const SAMPLE_TOKENS: usize = 200;

async fn do_sample<B: Backend>(t: &Trainer<B>, ctx: &Ctx) {
    let prompt = ctx.prompt.borrow().clone();
    ctx.text.set("sampling…".into());
    match sample(t, &prompt, SAMPLE_TOKENS, 0.8, t.steps_done()).await {
        Ok(s) => ctx.text.set(format!("{prompt}{s}")),
        Err(e) => ctx.error.set(Some(e.to_string())),
    }
}

/// Trains until the end or a stop, sampling between steps when asked.
async fn run<B: Backend>(mut t: Trainer<B>, mut p: Progress, ctx: &Ctx) -> Trainer<B> {
    loop {
        let (stop, want) = (ctx.stop.clone(), ctx.want_sample.clone());
        let progress = ctx.progress.clone();
        let r = train(
            &mut t,
            &mut p,
            move || !stop.get() && !want.get(),
            move |p| progress.set(p.clone()),
        )
        .await;
        if let Err(e) = r {
            ctx.error.set(Some(e.to_string()));
            break;
        }
        if ctx.want_sample.replace(false) {
            do_sample(&t, ctx).await;
            if !ctx.stop.get() && !t.is_finished() {
                continue;
            }
        }
        break;
    }
    t
}

async fn start(dev: Device, preset_key: String, steps: u64, ctx: Ctx) {
    let c = match corpus().await {
        Ok(c) => c,
        Err(e) => {
            ctx.error.set(Some(e.to_string()));
            ctx.running.set(false);
            return;
        }
    };
    let cfg = config(&preset(&preset_key), steps);
    let p = Progress {
        total_steps: cfg.steps,
        tokens_per_step: cfg.tokens_per_step(),
        params: cfg.model.num_params(),
        unigram_nats: brrr_train::unigram_entropy_nats(c.train()),
        ..Progress::default()
    };
    ctx.progress.set(p.clone());
    let made: Result<Slot> = match dev {
        Device::Gpu(g) => match make_trainer(&g, cfg, &c) {
            Ok(t) => Ok(Slot::Gpu(run(t, p, &ctx).await)),
            Err(e) => Err(e),
        },
        Device::Cpu(cpu, _) => match make_trainer(&cpu, cfg, &c) {
            Ok(t) => Ok(Slot::Cpu(run(t, p, &ctx).await)),
            Err(e) => Err(e),
        },
    };
    match made {
        Ok(slot) => *ctx.slot.borrow_mut() = Some(slot),
        Err(e) => ctx.error.set(Some(e.to_string())),
    }
    ctx.running.set(false);
}

/// The training page.
#[function_component(TrainPage)]
pub fn train_page() -> Html {
    let device = use_state(|| DeviceState::Probing);
    let force_cpu = use_state(|| false);
    let preset_key = use_state(|| PRESETS[0].key.to_string());
    let steps = use_state(|| PRESETS[0].steps);
    let ctx = Ctx {
        progress: use_state(Progress::default),
        running: use_state(|| false),
        text: use_state(String::new),
        error: use_state(|| None),
        stop: (*use_mut_ref(|| Rc::new(Cell::new(false))).borrow()).clone(),
        want_sample: (*use_mut_ref(|| Rc::new(Cell::new(false))).borrow()).clone(),
        prompt: (*use_mut_ref(|| Rc::new(RefCell::new("My fellow Americans".to_string())))
            .borrow())
        .clone(),
        slot: (*use_mut_ref(|| Rc::new(RefCell::new(None))).borrow()).clone(),
    };
    {
        let (device, stop) = (device.clone(), ctx.stop.clone());
        use_effect_with((), move |_| {
            wasm_bindgen_futures::spawn_local(
                async move { device.set(acquire(false).await.state()) },
            );
            // Leaving the page stops the run.
            move || stop.set(true)
        });
    }
    let on_start = {
        let (ctx, device) = (ctx.clone(), device.clone());
        let (force_cpu, preset_key, steps) = (*force_cpu, (*preset_key).clone(), *steps);
        Callback::from(move |_| {
            if *ctx.running {
                ctx.stop.set(true);
                return;
            }
            ctx.stop.set(false);
            ctx.running.set(true);
            ctx.error.set(None);
            let (ctx, device, preset_key) = (ctx.clone(), device.clone(), preset_key.clone());
            wasm_bindgen_futures::spawn_local(async move {
                let dev = acquire(force_cpu).await;
                device.set(dev.state());
                start(dev, preset_key, steps, ctx).await;
            });
        })
    };
    let on_sample = {
        let ctx = ctx.clone();
        Callback::from(move |_| {
            if *ctx.running {
                ctx.want_sample.set(true);
                return;
            }
            let ctx = ctx.clone();
            wasm_bindgen_futures::spawn_local(async move {
                let slot = ctx.slot.borrow_mut().take();
                match &slot {
                    Some(Slot::Gpu(t)) => do_sample(t, &ctx).await,
                    Some(Slot::Cpu(t)) => do_sample(t, &ctx).await,
                    None => ctx.text.set("Train first: there is no model yet.".into()),
                }
                *ctx.slot.borrow_mut() = slot;
            });
        })
    };
    let on_prompt = {
        let prompt = ctx.prompt.clone();
        Callback::from(move |e: InputEvent| {
            if let Some(i) = e
                .target()
                .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
            {
                *prompt.borrow_mut() = i.value();
            }
        })
    };
    let running = *ctx.running;
    html! {
        <section class="page">
            <PageHeader id={PageId::Train} />
            <DeviceBanner state={(*device).clone()} />
            <div class="layout">
                <aside class="panel controls">
                    <Select id="train-device" label="Device" selected={if *force_cpu { "cpu" } else { "auto" }}
                        options={vec![("auto".into(), "WebGPU if present".into()), ("cpu".into(), "CPU (brrr-cpu in wasm)".into())]}
                        on_change={{ let f = force_cpu.clone(); Callback::from(move |s: String| f.set(s == "cpu")) }} />
                    <Select id="train-preset" label="Model" selected={(*preset_key).clone()}
                        options={PRESETS.iter().map(|p| (p.key.to_string(), p.label.to_string())).collect::<Vec<_>>()}
                        on_change={{ let (k, s) = (preset_key.clone(), steps.clone()); Callback::from(move |v: String| { s.set(preset(&v).steps); k.set(v) }) }} />
                    <SizeInput id="train-steps" label="steps" value={*steps} min={2} max={5000}
                        on_change={{ let s = steps.clone(); Callback::from(move |v: u64| s.set(v)) }} />
                    <button class={classes!("button", (!running).then_some("primary"))} data-testid="train-start" onclick={on_start}>
                        { if running { "Stop" } else { "Train" } }
                    </button>
                    <div class="control">
                        <label>{ "Prompt" }</label>
                        <input type="text" class="text-input" data-testid="prompt" value={ctx.prompt.borrow().clone()} oninput={on_prompt} />
                    </div>
                    <button class="button" data-testid="sample" onclick={on_sample}>{ "Sample 200 bytes" }</button>
                </aside>
                <div class="results">
                    if let Some(e) = &*ctx.error { <Banner kind={BannerKind::Error}>{ e.clone() }</Banner> }
                    { progress_view(&ctx.progress) }
                    <h2>{ "Sample" }</h2>
                    <pre class="sample" data-testid="sample-text">{ if ctx.text.is_empty() { "Press “Sample” at any time: early on the model knows letter frequencies, later words and phrases." } else { ctx.text.as_str() } }</pre>
                </div>
            </div>
        </section>
    }
}

fn progress_view(p: &Progress) -> Html {
    let step = p.losses.last().map_or(0, |l| l.0);
    let loss = p.losses.last().map(|l| l.1);
    let frac = if p.total_steps > 0 {
        step as f64 / p.total_steps as f64
    } else {
        0.0
    };
    let series = vec![
        Series::new(
            "training loss",
            "#2563eb",
            SeriesStyle::Line,
            p.losses
                .iter()
                .map(|&(s, l)| (s as f64, f64::from(l)))
                .collect(),
        ),
        Series::new(
            "validation loss",
            "#ea580c",
            SeriesStyle::LinePoints,
            p.evals
                .iter()
                .map(|&(s, l)| (s as f64, f64::from(l)))
                .collect(),
        ),
        Series::new(
            "unigram entropy (a model without context)",
            "#94a3b8",
            SeriesStyle::Line,
            if p.losses.is_empty() {
                vec![]
            } else {
                vec![
                    (1.0, p.unigram_nats),
                    (p.total_steps.max(2) as f64, p.unigram_nats),
                ]
            },
        ),
    ];
    html! {
        <>
            <div class="progress"><div style={format!("width:{:.1}%", frac * 100.0)}></div></div>
            <div class="stats">
                <Stat label="Step" text={format!("{step} / {}", p.total_steps)} value={step as f64} id="train-step" />
                <Stat label="Loss" text={loss.map_or("—".into(), |l| format!("{l:.3} nats"))} value={loss.map(f64::from)} id="train-loss" strong=true
                    note={p.evals.last().map_or(String::new(), |e| format!("validation {:.3} at step {}", e.1, e.0))} />
                <Stat label="Tokens / s" text={p.tokens_per_s.map_or("—".into(), |t| format!("{} tokens/s", table::count(t)))} value={p.tokens_per_s} id="tokens-per-s" />
                <Stat label="Tokens trained" text={table::count((step as usize * p.tokens_per_step) as f64)} value={(step as usize * p.tokens_per_step) as f64} id="tokens-trained"
                    note={format!("{} per step", p.tokens_per_step)} />
                <Stat label="Parameters" text={table::count(p.params as f64)} value={p.params as f64} id="train-params" />
            </div>
            <Chart id="loss-chart" x_label="step" y_label="loss (nats per byte)" series={series} y_include={Some(0.0)} />
        </>
    }
}
