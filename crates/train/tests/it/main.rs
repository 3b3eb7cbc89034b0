//! brrr-train's integration tests, one test binary: each file here is a module. One binary
//! links once and instantiates the generic code once, where a binary per file did both
//! for every file (`cargo test -p brrr-train --test it NAME` runs the tests matching NAME).

mod finetune;
mod offload;
mod optimizers;
mod recompute;
mod small;
mod trainer;
