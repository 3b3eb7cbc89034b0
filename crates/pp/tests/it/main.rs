//! brrr-pp's integration tests, one test binary: each file here is a module. One binary
//! links once and instantiates the generic code once, where a binary per file did both
//! for every file (`cargo test -p brrr-pp --test it NAME` runs the tests matching NAME).

#[cfg(feature = "executor")]
mod engine;
#[cfg(feature = "executor")]
mod example;
#[cfg(feature = "executor")]
mod executor;
#[cfg(feature = "executor")]
mod tensor_parallel;
mod theory;
mod validate;
