//! brrr-serve's integration tests, one test binary: each file here is a module
//! (`cargo test -p brrr-serve --test it NAME` runs the tests matching NAME).

mod engine;
#[cfg(feature = "http")]
mod server;
mod speculative;
