//! The browser entry point (built by `scripts/build-web.sh`). Natively there is nothing to run: the page
//! logic is a library, tested with `cargo test -p brrr-web`.

fn main() {
    #[cfg(target_arch = "wasm32")]
    brrr_web::app::start();
}
