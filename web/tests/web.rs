//! brrr-web in a browser (wasm-bindgen-test, headless Chromium): the page logic compiled
//! to wasm32 gives the numbers it gives natively, and the app renders them.
//!
//! ```text
//! cargo test -p brrr-web --target wasm32-unknown-unknown --test web
//! ```
#![cfg(target_arch = "wasm32")]

use brrr_web::app::{App, Route};
use brrr_web::logic::kernels::chain_reference;
use brrr_web::logic::memory::{MemoryInput, estimate};
use brrr_web::logic::roofline::{Dim, RooflineInput, explore, find_gpu};
use brrr_web::logic::site::{PAGES, PageId};
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};
use yew_router::Routable;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
fn roofline_numbers_match_the_formula_in_wasm() {
    let mut input = RooflineInput::default();
    input.set(Dim::N, 50304);
    let v = explore(&input).unwrap();
    let (m, n, k) = (8192.0, 50304.0, 768.0);
    assert_eq!(v.prediction.op.flops, 2.0 * m * n * k);
    assert_eq!(v.prediction.op.bytes, (m * k + k * n + m * n) * 2.0);
    let want = (2.0 * m * n * k / 312e12).max((m * k + k * n + m * n) * 2.0 / 2039e9);
    assert!((v.prediction.time_s - want).abs() <= 1e-12 * want);
    assert_eq!(v.quant.unwrap().quant.tile_efficiency, 1.0);
}

#[wasm_bindgen_test]
fn memory_estimate_in_wasm() {
    let input = MemoryInput::default();
    let v = estimate(&input, &find_gpu(&input.gpu).unwrap()).unwrap();
    let (l, h, s, vocab) = (48.0, 1600.0, 1024.0, 50257.0);
    let params = l * (12.0 * h * h + 13.0 * h) + vocab * h + s * h + 2.0 * h;
    assert_eq!(v.parts[0].bytes, 2.0 * params);
    assert!(
        !v.fits,
        "GPT-2 XL at micro-batch 8 does not fit an 80 GiB A100 without ZeRO"
    );
}

#[wasm_bindgen_test]
fn gelu_chain_reference_in_wasm() {
    let x: f64 = 1.3;
    let want =
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh());
    assert!((chain_reference(x) - want).abs() < 1e-6);
}

#[wasm_bindgen_test]
fn every_page_has_its_route() {
    for p in PAGES {
        assert_eq!(Route::of(p.id).to_path(), p.path, "{:?}", p.id);
    }
    assert_eq!(Route::recognize("/kernels"), Some(Route::Kernels));
    assert_eq!(Route::of(PageId::Train), Route::Train);
}

/// Waits one macrotask so that Yew's scheduler renders.
async fn tick() {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        web_sys::window()
            .unwrap()
            .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 10)
            .unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(p).await.unwrap();
}

#[wasm_bindgen_test]
async fn the_app_renders_the_landing_page_and_the_roofline() {
    // The tests share one page: start at the landing route whatever ran before.
    web_sys::window()
        .unwrap()
        .location()
        .set_hash("#/")
        .unwrap();
    let document = web_sys::window().unwrap().document().unwrap();
    let root = document.create_element("div").unwrap();
    document.body().unwrap().append_child(&root).unwrap();
    yew::Renderer::<App>::with_root(root.clone()).render();
    tick().await;
    let cards = root.query_selector_all(".card").unwrap().length();
    assert_eq!(cards as usize, PAGES.len());
    // Navigate to the roofline explorer and read its FLOP count.
    web_sys::window()
        .unwrap()
        .location()
        .set_hash("#/roofline")
        .unwrap();
    for _ in 0..50 {
        tick().await;
        if root
            .query_selector("[data-testid=flops]")
            .unwrap()
            .is_some()
        {
            break;
        }
    }
    let flops = root
        .query_selector("[data-testid=flops]")
        .unwrap()
        .expect("the roofline page shows FLOPs")
        .get_attribute("data-value")
        .unwrap();
    assert_eq!(
        flops.parse::<f64>().unwrap(),
        2.0 * 8192.0 * 50257.0 * 768.0
    );
    assert!(
        root.query_selector("[data-testid=roofline-chart] svg path")
            .unwrap()
            .is_some()
    );
}

/// The serving page runs brrr-serve's scheduler in wasm: its step count is the logic's
/// for the default requests, and the timeline is drawn.
#[wasm_bindgen_test]
async fn the_serving_page_schedules_the_default_requests() {
    use brrr_web::logic::serving::{ServingInput, view};
    let want = view(&ServingInput::default()).unwrap().batched.steps;
    let document = web_sys::window().unwrap().document().unwrap();
    let root = document.create_element("div").unwrap();
    document.body().unwrap().append_child(&root).unwrap();
    yew::Renderer::<App>::with_root(root.clone()).render();
    web_sys::window()
        .unwrap()
        .location()
        .set_hash("#/serving")
        .unwrap();
    let mut steps = None;
    for _ in 0..50 {
        tick().await;
        steps = root.query_selector("[data-testid=serve-steps]").unwrap();
        if steps.is_some() {
            break;
        }
    }
    let steps = steps.expect("the serving page shows its steps");
    let got: f64 = steps.get_attribute("data-value").unwrap().parse().unwrap();
    assert_eq!(got, want as f64);
    assert!(
        root.query_selector("[data-testid=serve-timeline] svg rect")
            .unwrap()
            .is_some()
    );
    // Leave the shared page as the other tests expect it.
    root.remove();
    web_sys::window()
        .unwrap()
        .location()
        .set_hash("#/")
        .unwrap();
}
