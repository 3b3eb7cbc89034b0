//! brrr-dp's integration tests, one test binary: each file here is a module. One binary
//! links once and instantiates the generic code once, where a binary per file did both
//! for every file (`cargo test -p brrr-dp --test it NAME` runs the tests matching NAME).

mod accounting;
mod amp;
mod common;
mod consolidate;
mod doc_mask;
mod equivalence;
mod example;
mod fixed_seed;
mod prefetch;
mod resume;
