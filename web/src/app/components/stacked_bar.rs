//! A horizontal stacked bar against a capacity line: per-GPU memory.

use brrr_perf::table;
use yew::prelude::*;

/// One part of the bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// Legend text.
    pub label: String,
    /// Size (bytes).
    pub value: f64,
    /// CSS colour.
    pub color: String,
}

/// Props of [`StackedBar`].
#[derive(Properties, PartialEq)]
pub struct StackedBarProps {
    /// `data-testid`.
    pub id: AttrValue,
    /// The parts, left to right.
    pub segments: Vec<Segment>,
    /// The capacity line and its label.
    pub capacity: Option<(f64, String)>,
}

/// The bar, scaled so that both the total and the capacity fit, with a legend giving
/// each part in GiB (`brrr_perf::table::bytes_binary`).
#[function_component(StackedBar)]
pub fn stacked_bar(props: &StackedBarProps) -> Html {
    let total: f64 = props.segments.iter().map(|s| s.value.max(0.0)).sum();
    let cap = props.capacity.as_ref().map_or(0.0, |c| c.0);
    let scale = total.max(cap).max(1.0) * 1.05;
    let mut left = 0.0;
    let parts = props.segments.iter().filter(|s| s.value > 0.0).map(|s| {
        let w = s.value / scale * 100.0;
        let x = left;
        left += w;
        html! {
            <div class="bar-part" style={format!("left:{x:.3}%;width:{w:.3}%;background:{}", s.color)}
                title={format!("{}: {}", s.label, table::bytes_binary(s.value))}></div>
        }
    });
    let capacity = props.capacity.as_ref().map(|(c, label)| {
        let x = c / scale * 100.0;
        html! {
            <>
                <div class="bar-cap" style={format!("left:{x:.3}%")}></div>
                <div class="bar-cap-label" style={format!("left:{x:.3}%")}>{ label }</div>
            </>
        }
    });
    let legend = props.segments.iter().map(|s| {
        html! {
            <li>
                <i style={format!("background:{}", s.color)}></i>
                <span class="legend-name">{ &s.label }</span>
                <span class="legend-value" data-testid={format!("{}-{}", props.id, slug(&s.label))} data-value={format!("{:e}", s.value)}>
                    { table::bytes_binary(s.value) }
                </span>
            </li>
        }
    });
    html! {
        <div class="stacked" data-testid={props.id.clone()}>
            <div class="bar-track">{ for parts }{ capacity }</div>
            <ul class="bar-legend">{ for legend }</ul>
        </div>
    }
}

/// `ZeRO-3 gather buffer` → `zero-3-gather-buffer`, for test ids.
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}
