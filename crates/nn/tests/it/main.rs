//! brrr-nn's integration tests, one test binary: each file here is a module. One binary
//! links once and instantiates the generic code once, where a binary per file did both
//! for every file (`cargo test -p brrr-nn --test it NAME` runs the tests matching NAME).

mod fused_attention;
mod galore;
mod gradcheck;
mod lora;
mod master_weights;
mod memory;
mod optimizers;
mod shard;
mod stages;
mod stash;
mod threads;
mod zero_bubble;
