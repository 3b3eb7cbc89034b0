//! End to end: `brrr train` on the wgpu backend follows the CPU run, step by step.
//!
//! The same GPT, seed, data and schedule on both backends for 20 steps; every step's
//! training loss must agree to 1e-3 relative. Kernels differ in summation order (and
//! the GPU's exp/log/tanh in their last bits), so bit-equality is not expected; a wrong
//! kernel shows up within a few steps as a growing gap. Without an adapter: skipped
//! loudly, or a failure under BRRR_REQUIRE_WGPU=1.
#![cfg(not(target_arch = "wasm32"))]

use brrr::train::{TrainArgs, run_with};
use brrr_conformance::{CpuBackend, backend_absent};
use brrr_wgpu::WgpuBackend;
use clap::Parser;
use std::path::Path;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: TrainArgs,
}

fn args(out: &Path) -> TrainArgs {
    // A small batch keeps lavapipe (a CPU emulating a GPU) well under a second a step;
    // BRRR_TRAIN_FULL=1 uses `brrr train`'s default batch (16 × 128 tokens) instead.
    let small: &[&str] = if std::env::var("BRRR_TRAIN_FULL").is_ok_and(|v| v == "1") {
        &[]
    } else {
        &["--batch-size", "4", "--seq-len", "64"]
    };
    let mut argv = vec![
        "brrr-train",
        "--steps",
        "20",
        "--seed",
        "4242",
        "--warmup-steps",
        "5",
        "--eval-every",
        "1000",
        "--eval-batches",
        "1",
        "--quiet",
        "--out",
        out.to_str().expect("utf-8 temp path"),
    ];
    argv.extend_from_slice(small);
    Cli::parse_from(argv).args
}

#[test]
fn wgpu_training_follows_cpu_training() {
    let gpu = match WgpuBackend::new_blocking() {
        Ok(g) => g,
        Err(e) => return backend_absent("wgpu", e, "BRRR_REQUIRE_WGPU"),
    };
    let dir = std::env::temp_dir().join(format!("brrr-train-wgpu-{}", std::process::id()));
    let (cpu_dir, gpu_dir) = (dir.join("cpu"), dir.join("wgpu"));
    let _ = std::fs::remove_dir_all(&dir);

    run_with(CpuBackend::new(), &args(&cpu_dir)).expect("cpu run");
    run_with(gpu.clone(), &args(&gpu_dir)).expect("wgpu run");

    let cpu = brrr::metrics::read_losses(cpu_dir.join("metrics.csv")).expect("cpu metrics");
    let wgpu = brrr::metrics::read_losses(gpu_dir.join("metrics.csv")).expect("wgpu metrics");
    assert_eq!(cpu.len(), 20, "{cpu:?}");
    assert_eq!(wgpu.len(), cpu.len());
    let mut worst = 0.0f64;
    for ((s, a), (t, b)) in cpu.iter().zip(&wgpu) {
        assert_eq!(s, t);
        let rel = f64::from((a - b).abs() / a.abs());
        eprintln!("step {s:>3}: cpu {a:.6}  wgpu {b:.6}  rel {rel:.1e}");
        assert!(
            rel <= 1e-3,
            "step {s}: cpu loss {a}, wgpu loss {b} (rel {rel:.2e})"
        );
        worst = worst.max(rel);
    }
    eprintln!(
        "wgpu ({}) follows cpu: worst relative loss difference {worst:.2e}",
        gpu.report().adapter
    );
    let _ = std::fs::remove_dir_all(&dir);
}
