//! One labelled number. The formatted text is for readers; `data-value` carries the raw
//! number so that tests can check it exactly.

use yew::prelude::*;

/// Props of [`Stat`].
#[derive(Properties, PartialEq)]
pub struct StatProps {
    /// What it is.
    pub label: AttrValue,
    /// The number as shown (formatted by `brrr_perf::table`).
    pub text: AttrValue,
    /// The raw number (`data-value`), when there is one.
    #[prop_or_default]
    pub value: Option<f64>,
    /// `data-testid`.
    #[prop_or_default]
    pub id: AttrValue,
    /// A short note under the number.
    #[prop_or_default]
    pub note: AttrValue,
    /// Highlight (the headline number of a page).
    #[prop_or_default]
    pub strong: bool,
}

/// A labelled number.
#[function_component(Stat)]
pub fn stat(props: &StatProps) -> Html {
    let value = props.value.map(|v| format!("{v:e}"));
    html! {
        <div class={classes!("stat", props.strong.then_some("strong"))}>
            <div class="stat-label">{ &props.label }</div>
            <div class="stat-value" data-testid={props.id.clone()} data-value={value}>{ &props.text }</div>
            if !props.note.is_empty() { <div class="stat-note">{ &props.note }</div> }
        </div>
    }
}
