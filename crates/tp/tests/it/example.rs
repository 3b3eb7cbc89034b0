//! The crate's example, run as a test: what a user copies must work.

#[path = "../../examples/tensor_parallel.rs"]
mod program;

#[test]
fn the_example_trains_like_one_device() {
    program::main().unwrap();
}
