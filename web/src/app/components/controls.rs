//! Form controls: a size (slider plus exact number), a menu, a checkbox. Each carries a
//! `data-testid` so that the end-to-end test can operate it.

use crate::logic::input::{SLIDER_STEPS, SliderScale, parse_size};
use wasm_bindgen::JsCast;
use web_sys::{HtmlInputElement, HtmlSelectElement};
use yew::prelude::*;

/// Props of [`SizeInput`].
#[derive(Properties, PartialEq)]
pub struct SizeInputProps {
    /// `data-testid` of the wrapper (the inputs are `input[type=range]` and
    /// `input[type=number]` inside it).
    pub id: AttrValue,
    /// Label.
    pub label: AttrValue,
    /// Current value.
    pub value: u64,
    /// Smallest value.
    pub min: u64,
    /// Largest value.
    pub max: u64,
    /// Linear slider instead of logarithmic (for small ranges).
    #[prop_or_default]
    pub linear: bool,
    /// Called with the new value, clamped into `[min, max]`.
    pub on_change: Callback<u64>,
}

fn input_value(e: &Event) -> Option<String> {
    e.target()
        .and_then(|t| t.dyn_into::<HtmlInputElement>().ok())
        .map(|i| i.value())
}

/// A size: a slider and an exact number.
#[function_component(SizeInput)]
pub fn size_input(props: &SizeInputProps) -> Html {
    let scale = SliderScale {
        min: props.min,
        max: props.max,
        linear: props.linear,
    };
    let on_slide = {
        let cb = props.on_change.clone();
        Callback::from(move |e: InputEvent| {
            if let Some(pos) = input_value(&e).and_then(|s| s.parse::<f64>().ok()) {
                cb.emit(scale.value(pos));
            }
        })
    };
    let on_number = {
        let (cb, min, max) = (props.on_change.clone(), props.min, props.max);
        Callback::from(move |e: Event| {
            if let Some(v) = input_value(&e).and_then(|s| parse_size(&s)) {
                cb.emit(v.clamp(min, max));
            }
        })
    };
    html! {
        <div class="control size" data-testid={props.id.clone()}>
            <label>{ &props.label }</label>
            <div class="size-row">
                <input type="range" min="0" max={SLIDER_STEPS.to_string()} step="1"
                    value={format!("{:.0}", scale.position(props.value))}
                    oninput={on_slide} aria-label={props.label.clone()} />
                <input type="number" min={props.min.to_string()} max={props.max.to_string()}
                    value={props.value.to_string()} onchange={on_number}
                    aria-label={props.label.clone()} />
            </div>
        </div>
    }
}

/// Props of [`Select`].
#[derive(Properties, PartialEq)]
pub struct SelectProps {
    /// `data-testid` of the `<select>`.
    pub id: AttrValue,
    /// Label.
    pub label: AttrValue,
    /// `(value, text)` pairs.
    pub options: Vec<(String, String)>,
    /// The selected value.
    pub selected: AttrValue,
    /// Called with the chosen value.
    pub on_change: Callback<String>,
}

/// A labelled menu.
#[function_component(Select)]
pub fn select(props: &SelectProps) -> Html {
    let onchange = {
        let cb = props.on_change.clone();
        Callback::from(move |e: Event| {
            if let Some(s) = e
                .target()
                .and_then(|t| t.dyn_into::<HtmlSelectElement>().ok())
            {
                cb.emit(s.value());
            }
        })
    };
    let options = props.options.iter().map(|(v, text)| {
        html! { <option value={v.clone()} selected={*v == *props.selected}>{ text }</option> }
    });
    html! {
        <div class="control">
            <label>{ &props.label }</label>
            <select data-testid={props.id.clone()} {onchange} aria-label={props.label.clone()}>
                { for options }
            </select>
        </div>
    }
}

/// Props of [`Toggle`].
#[derive(Properties, PartialEq)]
pub struct ToggleProps {
    /// `data-testid` of the checkbox.
    pub id: AttrValue,
    /// Label.
    pub label: AttrValue,
    /// Checked.
    pub checked: bool,
    /// Called with the new state.
    pub on_change: Callback<bool>,
}

/// A labelled checkbox.
#[function_component(Toggle)]
pub fn toggle(props: &ToggleProps) -> Html {
    let onchange = {
        let cb = props.on_change.clone();
        Callback::from(move |e: Event| {
            if let Some(i) = e
                .target()
                .and_then(|t| t.dyn_into::<HtmlInputElement>().ok())
            {
                cb.emit(i.checked());
            }
        })
    };
    html! {
        <label class="control toggle">
            <input type="checkbox" data-testid={props.id.clone()} checked={props.checked} {onchange} />
            <span>{ &props.label }</span>
        </label>
    }
}
