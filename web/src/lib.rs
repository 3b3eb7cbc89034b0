//! # brrr-web
//!
//! brrr in the browser: a Yew app whose every number comes from the brrr crates compiled
//! to wasm32. Rooflines and memory estimates come from `brrr-perf`, the live kernels are
//! `brrr-wgpu`'s WGSL on the reader's GPU through WebGPU (or `brrr-cpu` when the browser
//! has none), and the training demo is `brrr-train`'s `Trainer` stepping a `brrr-nn` GPT.
//!
//! - [`logic`]: what each page computes, as plain functions over `brrr-perf` that compile
//!   natively too, so they are unit-tested with `cargo test` and in the browser with
//!   wasm-bindgen-test.
//! - `app` (wasm32 only): the Yew components and pages. A page is one module under
//!   `app/pages/` plus one entry in [`logic::site::PAGES`] and one route in `app/mod.rs`.

pub mod logic;

#[cfg(target_arch = "wasm32")]
pub mod app;
