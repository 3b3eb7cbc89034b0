//! A coloured strip saying where the computation runs, or what went wrong.

use yew::prelude::*;

/// What the banner reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BannerKind {
    /// Runs on the reader's GPU.
    Gpu,
    /// WebGPU is missing: the CPU backend compiled to wasm runs instead.
    CpuFallback,
    /// Neutral information (probing, working).
    Info,
    /// An error from a crate, shown verbatim.
    Error,
}

/// Props of [`Banner`].
#[derive(Properties, PartialEq)]
pub struct BannerProps {
    /// Colour and icon.
    pub kind: BannerKind,
    /// The message.
    pub children: Html,
}

/// A full-width message strip (`data-testid="banner-KIND"`).
#[function_component(Banner)]
pub fn banner(props: &BannerProps) -> Html {
    let (class, tag, title) = match props.kind {
        BannerKind::Gpu => ("banner gpu", "gpu", "Runs on your GPU"),
        BannerKind::CpuFallback => ("banner cpu", "cpu", "Falls back to the CPU"),
        BannerKind::Info => ("banner info", "info", ""),
        BannerKind::Error => ("banner error", "error", "Error"),
    };
    html! {
        <div class={class} role="status" data-testid={format!("banner-{tag}")}>
            if !title.is_empty() { <strong>{ title }</strong> }
            <span>{ props.children.clone() }</span>
        </div>
    }
}
