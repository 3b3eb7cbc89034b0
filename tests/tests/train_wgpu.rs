//! End to end: `brrr-train`'s Trainer on the wgpu backend follows the CPU run, step by step.
//!
//! The same GPT, seed, data and schedule on both backends for 20 steps; every step's
//! training loss must agree to 1e-3 relative (see `train_common`). Without an adapter:
//! skipped loudly, or a failure under BRRR_REQUIRE_WGPU=1.
#![cfg(not(target_arch = "wasm32"))]

mod train_common;

use brrr_conformance::backend_absent;
use brrr_wgpu::WgpuBackend;

#[test]
fn wgpu_training_follows_cpu_training() {
    let gpu = match WgpuBackend::new_blocking() {
        Ok(g) => g,
        Err(e) => return backend_absent("wgpu", e, "BRRR_REQUIRE_WGPU"),
    };
    // A small batch keeps lavapipe (a CPU emulating a GPU) well under a second a step;
    // BRRR_TRAIN_FULL=1 uses `brrr train`'s default batch (16 × 128 tokens) instead.
    let full = std::env::var("BRRR_TRAIN_FULL").is_ok_and(|v| v == "1");
    let cfg = train_common::config(20, |c| {
        if !full {
            (c.batch_size, c.seq_len) = (4, 64);
        }
    });
    let adapter = gpu.report().adapter.clone();
    let worst = train_common::follows_cpu("wgpu", gpu, &cfg, 1e-3);
    eprintln!("wgpu ({adapter}) follows cpu: worst relative loss difference {worst:.2e}");
}

#[test]
fn the_serving_engine_on_wgpu_gives_the_cpus_tokens() {
    let gpu = match WgpuBackend::new_blocking() {
        Ok(g) => g,
        Err(e) => return backend_absent("wgpu", e, "BRRR_REQUIRE_WGPU"),
    };
    let worst = train_common::serves_like_cpu("wgpu", &gpu, |_| {});
    eprintln!("wgpu serving: worst log-probability difference {worst:.2e}");
}
