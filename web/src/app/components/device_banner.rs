//! "Runs on your GPU" / "falls back to the CPU": the live pages' banner.

use crate::app::components::{Banner, BannerKind};
use yew::prelude::*;

/// What the live pages know about their device.
#[derive(Clone, Debug, PartialEq)]
pub enum DeviceState {
    /// Still asking the browser for a WebGPU adapter.
    Probing,
    /// WebGPU, on this adapter.
    Gpu(String),
    /// brrr-cpu in wasm, for this reason.
    Cpu(String),
}

/// Props of [`DeviceBanner`].
#[derive(Properties, PartialEq)]
pub struct DeviceBannerProps {
    /// The state.
    pub state: DeviceState,
}

/// The banner for a [`DeviceState`].
#[function_component(DeviceBanner)]
pub fn device_banner(props: &DeviceBannerProps) -> Html {
    match &props.state {
        DeviceState::Probing => {
            html! { <Banner kind={BannerKind::Info}>{ "Looking for a WebGPU adapter…" }</Banner> }
        }
        // A software adapter (SwiftShader, lavapipe) reports device type `Cpu`: say so, or
        // its numbers would pass for a GPU's.
        DeviceState::Gpu(adapter) if adapter.contains("Cpu") => html! {
            <Banner kind={BannerKind::Gpu}>{ format!("brrr-wgpu's WGSL kernels through WebGPU on {adapter}: \
                a software adapter, your CPU emulating a GPU, so the numbers are not a GPU's.") }</Banner>
        },
        DeviceState::Gpu(adapter) => html! {
            <Banner kind={BannerKind::Gpu}>{ format!("brrr-wgpu's WGSL kernels through WebGPU on {adapter}.") }</Banner>
        },
        DeviceState::Cpu(why) => html! {
            <Banner kind={BannerKind::CpuFallback}>
                { format!("{why}: brrr-cpu's Rust kernels run instead, compiled to WebAssembly on one thread {} — \
                   the same Backend trait, far slower than a GPU. (Chrome and Edge 113+ have WebGPU.)", WASM_SIMD) }
            </Banner>
        },
    }
}

/// Which of the two builds runs (scripts/build-web.sh makes both; the page loads the
/// SIMD one where the browser validates wasm SIMD).
const WASM_SIMD: &str = if cfg!(target_feature = "simd128") {
    "with wasm SIMD (simd128)"
} else {
    "without SIMD (this browser lacks wasm SIMD, or the address asked for ?wasm=scalar)"
};
