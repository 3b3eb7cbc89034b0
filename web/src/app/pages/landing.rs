//! The landing page: what brrr is, every demo, the book and the crates.

use crate::app::Route;
use crate::logic::site::{BOOK_ROOT, PAGES, chapter_url, crate_doc_url};
use yew::prelude::*;
use yew_router::prelude::*;

/// The crates, one line each, for the landing page's list.
const CRATES: [(&str, &str); 10] = [
    (
        "brrr_backend",
        "the Backend trait every device implements, dtypes, shapes, one error type",
    ),
    (
        "brrr_cpu",
        "the reference backend: every kernel in Rust (here compiled to WebAssembly)",
    ),
    (
        "brrr_wgpu",
        "every kernel in WGSL, on Vulkan, Metal, DX12 and WebGPU (the kernels on this site)",
    ),
    (
        "brrr_tensor",
        "tensors with views and broadcasting over any backend",
    ),
    (
        "brrr_nn",
        "layers with explicit backward passes, a GPT, AdamW",
    ),
    (
        "brrr_train",
        "the training step as a library: the Trainer behind the training demo",
    ),
    (
        "brrr_perf",
        "GPU specs, rooflines, memory, time and communication estimators",
    ),
    (
        "brrr_checkpoint",
        "activation recomputation: what to keep, what to recompute, for a memory budget",
    ),
    ("brrr_cuda", "CUDA C kernels through NVRTC (native only)"),
    (
        "brrr",
        "the command line: train, sample, bench, roofline, estimate",
    ),
];

/// The landing page.
#[function_component(Landing)]
pub fn landing() -> Html {
    let cards = PAGES.iter().map(|p| {
        html! {
            <article class="card" data-testid={format!("card-{}", p.path.trim_start_matches('/'))}>
                <h2><Link<Route> to={Route::of(p.id)}>{ p.title }</Link<Route>></h2>
                <p>{ p.blurb }</p>
                <p class="card-links">
                    <Link<Route> to={Route::of(p.id)} classes="button">{ "Open the demo →" }</Link<Route>>
                    <a href={chapter_url(p)}>{ "Book chapter" }</a>
                </p>
            </article>
        }
    });
    let crates = CRATES.iter().map(|(name, what)| {
        html! { <li><a href={crate_doc_url(name)}><code>{ *name }</code></a>{ " — " }{ *what }</li> }
    });
    html! {
        <section class="page landing">
            <div class="hero">
                <h1>{ "brrr" }</h1>
                <p class="tagline">{ "Deep-learning training on GPUs, understood and fast." }</p>
                <p class="lead">
                    { "brrr is a Rust workspace that implements what training on GPUs is made of — rooflines \
                       and the three regimes (compute, memory, overhead), kernels and fusion, mixed precision, \
                       memory, parallelism, and estimators for memory, time and MFU — as crates you can import, \
                       a book with exercises, and these demos. The demos run the same crates, compiled to \
                       WebAssembly, and the same WGSL kernels, on your GPU through WebGPU." }
                </p>
                <p class="hero-links">
                    <a class="button primary" href={BOOK_ROOT}>{ "Read the book" }</a>
                    <Link<Route> to={Route::Roofline} classes="button">{ "Start with the roofline" }</Link<Route>>
                </p>
            </div>
            <h2 class="section-title">{ "Demos" }</h2>
            <div class="cards">{ for cards }</div>
            <h2 class="section-title">{ "The crates" }</h2>
            <ul class="crate-list">{ for crates }</ul>
        </section>
    }
}
