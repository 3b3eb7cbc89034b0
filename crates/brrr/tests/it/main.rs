//! brrr's integration tests, one test binary: each file here is a module. One binary
//! links once and instantiates the generic code once, where a binary per file did both
//! for every file (`cargo test -p brrr --test it NAME` runs the tests matching NAME).

mod amp;
mod ckpt_cmd;
mod cli_errors;
mod collectives;
mod common;
mod data;
mod decode_bench;
mod finetune;
mod launch_signals;
mod layouts_ckpt;
mod matrix;
mod profile;
mod train;
mod train_dp;
mod train_fused;
mod train_pptp;
mod train_tp;
