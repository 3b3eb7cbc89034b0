//! A demo page's title, its one-line summary, and links to the book chapter and the
//! docs of the crates that compute it.

use crate::logic::site::{PageId, chapter_url, crate_doc_url, page};
use yew::prelude::*;

/// Props of [`PageHeader`].
#[derive(Properties, PartialEq)]
pub struct PageHeaderProps {
    /// Which page.
    pub id: PageId,
}

/// Title, blurb and links of a page, from [`crate::logic::site::PAGES`].
#[function_component(PageHeader)]
pub fn page_header(props: &PageHeaderProps) -> Html {
    let info = page(props.id);
    let docs = info.crates.iter().map(|c| {
        html! { <a class="chip" href={crate_doc_url(c)}><code>{ *c }</code></a> }
    });
    html! {
        <div class="page-header">
            <h1>{ info.title }</h1>
            <p class="lead">{ info.blurb }</p>
            <p class="links">
                <a class="chip book" href={chapter_url(info)} data-testid="chapter-link">{ "Book chapter →" }</a>
                <span class="muted">{ "Computed by" }</span>
                { for docs }
            </p>
        </div>
    }
}
