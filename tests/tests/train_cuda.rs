//! End to end: `brrr-train`'s Trainer on the CUDA backend follows the CPU run, step by step.
//!
//! - On a GPU: 20 steps of the default model at a small batch, every step's loss within
//!   1e-3 relative of brrr-cpu's (see `train_common`). Without a GPU: skipped loudly, or a
//!   failure under BRRR_REQUIRE_CUDA=1.
//! - Everywhere with a C++ compiler: a one-layer model for a few steps on the kernel
//!   emulator (`CudaBackend::emulated`), which runs the real kernels behind the same
//!   host code, allocator included. The emulator is slow, hence the small model.
#![cfg(not(target_arch = "wasm32"))]

mod train_common;

use brrr_backend::Error;
use brrr_conformance::backend_absent;
use brrr_cuda::CudaBackend;

#[test]
fn cuda_training_follows_cpu_training() {
    let gpu = match CudaBackend::new(0) {
        Ok(g) => g,
        Err(Error::NoDevice { reason, .. }) => {
            return backend_absent("cuda", reason, "BRRR_REQUIRE_CUDA");
        }
        Err(e) => panic!("cuda: the backend could not be created: {e}"),
    };
    let device = gpu.device_name().to_string();
    let cfg = train_common::config(20, |c| (c.batch_size, c.seq_len) = (4, 64));
    let worst = train_common::follows_cpu("cuda", gpu, &cfg, 1e-3);
    eprintln!("cuda ({device}) follows cpu: worst relative loss difference {worst:.2e}");
}

#[test]
fn emulated_cuda_training_follows_cpu_training() {
    if !brrr_cuda::emu::compiler_available() {
        brrr_backend::skip::report_skipped(
            "cuda-emu",
            "no C++ compiler to build the kernel emulator",
        );
        return;
    }
    let emu = CudaBackend::emulated().expect("building the CUDA kernel emulator");
    let cfg = train_common::config(4, |c| {
        (c.model.n_layer, c.model.n_head, c.model.n_embd) = (1, 2, 32);
        (c.batch_size, c.seq_len) = (2, 16);
    });
    let worst = train_common::follows_cpu("cuda-emu", emu, &cfg, 1e-3);
    eprintln!("cuda-emu follows cpu: worst relative loss difference {worst:.2e}");
}

#[test]
fn the_serving_engine_on_cuda_gives_the_cpus_tokens() {
    let gpu = match CudaBackend::new(0) {
        Ok(g) => g,
        Err(Error::NoDevice { reason, .. }) => {
            return backend_absent("cuda", reason, "BRRR_REQUIRE_CUDA");
        }
        Err(e) => panic!("cuda: the backend could not be created: {e}"),
    };
    let worst = train_common::serves_like_cpu("cuda", &gpu, |_| {});
    eprintln!("cuda serving: worst log-probability difference {worst:.2e}");
}

/// The serving engine's host code and kernels (the paged cache's row scatter and gathers)
/// on the kernel emulator, with a model small enough for it.
#[test]
fn the_serving_engine_on_emulated_cuda_gives_the_cpus_tokens() {
    if !brrr_cuda::emu::compiler_available() {
        brrr_backend::skip::report_skipped(
            "cuda-emu serving",
            "no C++ compiler to build the kernel emulator",
        );
        return;
    }
    let emu = CudaBackend::emulated().expect("building the CUDA kernel emulator");
    let worst = train_common::serves_like_cpu("cuda-emu", &emu, |m| {
        (m.n_layer, m.n_head, m.n_embd) = (1, 2, 32);
    });
    eprintln!("cuda-emu serving: worst log-probability difference {worst:.2e}");
}
