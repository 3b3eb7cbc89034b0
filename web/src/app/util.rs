//! Browser helpers: the clock, yielding to the event loop, fetching a text asset.

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// `performance.now()` in seconds (0 where there is no `window`, as in a worker).
pub fn now_s() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now() / 1000.0)
}

/// Lets the browser run its event loop (paint, input) before continuing: a
/// `setTimeout(0)` turned into a future. Long computations call it between steps so the
/// page never freezes.
pub async fn yield_now() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        if let Some(w) = web_sys::window() {
            // A failed setTimeout leaves the promise pending forever; resolve at once
            // instead, which only skips the yield.
            if w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 0)
                .is_err()
            {
                let _ = resolve.call0(&JsValue::NULL);
            }
        } else {
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// GETs `url` (relative to the page) and returns its body as text.
pub async fn fetch_text(url: &str) -> Result<String, String> {
    let window = web_sys::window().ok_or("no window")?;
    let resp = JsFuture::from(window.fetch_with_str(url))
        .await
        .map_err(|e| format!("fetching {url}: {e:?}"))?;
    let resp: web_sys::Response = resp
        .dyn_into()
        .map_err(|_| format!("fetching {url}: not a Response"))?;
    if !resp.ok() {
        return Err(format!("fetching {url}: HTTP {}", resp.status()));
    }
    let text = JsFuture::from(resp.text().map_err(|e| format!("{e:?}"))?)
        .await
        .map_err(|e| format!("reading {url}: {e:?}"))?;
    text.as_string()
        .ok_or_else(|| format!("reading {url}: body is not text"))
}

/// A callback that applies `f(state, value)` to a copy of the state and stores it: every
/// control of a page edits its one input struct this way.
pub fn edit<T: Clone + 'static, V: 'static>(
    state: &yew::UseStateHandle<T>,
    f: impl Fn(&mut T, V) + 'static,
) -> yew::Callback<V> {
    let state = state.clone();
    yew::Callback::from(move |v: V| {
        let mut next = (*state).clone();
        f(&mut next, v);
        state.set(next);
    })
}
