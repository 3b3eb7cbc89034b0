//! A GPU menu over `brrr_perf::specs::gpus()`, with the chosen card's headline figures.

use crate::app::components::Select;
use brrr_perf::table;
use yew::prelude::*;

/// Props of [`GpuPicker`].
#[derive(Properties, PartialEq)]
pub struct GpuPickerProps {
    /// The chosen GPU's id.
    pub selected: AttrValue,
    /// Called with the new id.
    pub on_change: Callback<String>,
}

/// The GPU menu (`data-testid="gpu"`) and a line of the card's memory, bandwidth and SMs.
#[function_component(GpuPicker)]
pub fn gpu_picker(props: &GpuPickerProps) -> Html {
    let gpus = brrr_perf::specs::gpus();
    let options: Vec<(String, String)> = gpus
        .iter()
        .map(|g| (g.id.clone(), g.name.clone()))
        .collect();
    let detail = gpus.iter().find(|g| g.id == *props.selected).map(|g| {
        format!(
            "{} · {} HBM at {} · {} SMs",
            g.architecture,
            table::bytes_binary(g.memory_bytes),
            table::bandwidth(g.memory_bandwidth),
            g.sm_count
        )
    });
    html! {
        <div class="gpu-picker">
            <Select id="gpu" label="GPU" options={options} selected={props.selected.clone()} on_change={props.on_change.clone()} />
            if let Some(d) = detail { <div class="muted small">{ d }</div> }
        </div>
    }
}
