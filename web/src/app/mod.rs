//! The Yew app (wasm32 only): the shell (navigation, footer), the router and the pages.
//!
//! Adding a page: a module in `pages/`, a row in [`crate::logic::site::PAGES`], a
//! variant in [`Route`] with its `#[at]` path, and an arm in [`render`].

pub mod bench;
pub mod components;
pub mod device;
pub mod pages;
pub mod puzzle_run;
pub mod trainer;
pub mod util;

use crate::logic::site::{PAGES, PageId};
use yew::prelude::*;
use yew_router::prelude::*;

/// The app's routes. Hash routing (`/#/roofline`) so that any static file server,
/// `python3 -m http.server` included, serves every page from `index.html`.
#[derive(Clone, Routable, PartialEq, Debug)]
pub enum Route {
    /// The landing page.
    #[at("/")]
    Home,
    /// [`PageId::Roofline`].
    #[at("/roofline")]
    Roofline,
    /// [`PageId::Memory`].
    #[at("/memory")]
    Memory,
    /// [`PageId::Plan`].
    #[at("/plan")]
    Plan,
    /// [`PageId::Kernels`].
    #[at("/kernels")]
    Kernels,
    /// [`PageId::Train`].
    #[at("/train")]
    Train,
    /// [`PageId::Puzzles`].
    #[at("/puzzles")]
    Puzzles,
    /// [`PageId::Checkpointing`].
    #[at("/checkpointing")]
    Checkpointing,
    /// [`PageId::Collectives`].
    #[at("/collectives")]
    Collectives,
    /// [`PageId::MixedPrecision`].
    #[at("/mixed-precision")]
    MixedPrecision,
    /// [`PageId::DataLoading`].
    #[at("/data-loading")]
    DataLoading,
    /// [`PageId::TensorParallel`].
    #[at("/tensor-parallel")]
    TensorParallel,
    /// [`PageId::Pipeline`].
    #[at("/pipeline")]
    Pipeline,
    /// [`PageId::DataParallel`].
    #[at("/data-parallel")]
    DataParallel,
    /// [`PageId::Profile`].
    #[at("/profile")]
    Profile,
    /// [`PageId::Serving`].
    #[at("/serving")]
    Serving,
    /// Anything else.
    #[not_found]
    #[at("/404")]
    NotFound,
}

impl Route {
    /// The route of a demo page.
    pub fn of(id: PageId) -> Route {
        match id {
            PageId::Roofline => Route::Roofline,
            PageId::Memory => Route::Memory,
            PageId::Plan => Route::Plan,
            PageId::Kernels => Route::Kernels,
            PageId::Train => Route::Train,
            PageId::Puzzles => Route::Puzzles,
            PageId::Checkpointing => Route::Checkpointing,
            PageId::Collectives => Route::Collectives,
            PageId::MixedPrecision => Route::MixedPrecision,
            PageId::DataLoading => Route::DataLoading,
            PageId::TensorParallel => Route::TensorParallel,
            PageId::Pipeline => Route::Pipeline,
            PageId::DataParallel => Route::DataParallel,
            PageId::Profile => Route::Profile,
            PageId::Serving => Route::Serving,
        }
    }
}

/// The page for a route.
pub fn render(route: Route) -> Html {
    match route {
        Route::Home => html! { <pages::landing::Landing /> },
        Route::Roofline => html! { <pages::roofline::RooflinePage /> },
        Route::Memory => html! { <pages::memory::MemoryPage /> },
        Route::Plan => html! { <pages::plan::PlanPage /> },
        Route::Kernels => html! { <pages::kernels::KernelsPage /> },
        Route::Train => html! { <pages::train::TrainPage /> },
        Route::Puzzles => html! { <pages::puzzles::PuzzlesPage /> },
        Route::Checkpointing => html! { <pages::checkpointing::CheckpointingPage /> },
        Route::Collectives => html! { <pages::collectives::CollectivesPage /> },
        Route::MixedPrecision => html! { <pages::mixed_precision::MixedPrecisionPage /> },
        Route::DataLoading => html! { <pages::data_loading::DataLoadingPage /> },
        Route::TensorParallel => html! { <pages::tensor_parallel::TensorParallelPage /> },
        Route::Pipeline => html! { <pages::pipeline::PipelinePage /> },
        Route::DataParallel => html! { <pages::data_parallel::DataParallelPage /> },
        Route::Profile => html! { <pages::profile::ProfilePage /> },
        Route::Serving => html! { <pages::serving::ServingPage /> },
        Route::NotFound => html! {
            <section class="page">
                <h1>{ "Not found" }</h1>
                <p><Link<Route> to={Route::Home}>{ "Back to the start" }</Link<Route>></p>
            </section>
        },
    }
}

#[function_component(Nav)]
fn nav() -> Html {
    let current = use_route::<Route>();
    let links = PAGES.iter().map(|p| {
        let route = Route::of(p.id);
        let class = classes!(
            "nav-link",
            (current.as_ref() == Some(&route)).then_some("active")
        );
        html! {
            <Link<Route> to={route} classes={class}>{ p.title }</Link<Route>>
        }
    });
    html! {
        <header class="topbar">
            <nav>
                <Link<Route> to={Route::Home} classes="brand">{ "brrr" }</Link<Route>>
                { for links }
                <a class="nav-link" href={crate::logic::site::BOOK_ROOT}>{ "Book" }</a>
            </nav>
        </header>
    }
}

/// The whole app: navigation, the routed page, a footer.
#[function_component(App)]
pub fn app() -> Html {
    html! {
        <HashRouter>
            <Nav />
            <main>
                <Switch<Route> render={render} />
            </main>
            <footer class="footer">
                { "Every number on these pages is computed by brrr's Rust crates compiled to WebAssembly; " }
                { "nothing is re-implemented in JavaScript. " }
                <a href={crate::logic::site::BOOK_ROOT}>{ "Read the book" }</a>
            </footer>
        </HashRouter>
    }
}

/// Mounts the app on `<body>`.
pub fn start() {
    yew::Renderer::<App>::new().render();
}
