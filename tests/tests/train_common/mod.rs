//! Shared by `train_wgpu.rs` and `train_cuda.rs`: run `brrr train`'s loop on a backend and
//! on brrr-cpu with the same seed, data and schedule, and compare every step's loss.
//!
//! Kernels differ in summation order (and a GPU's exp/log/tanh in their last bits), so
//! bit-equality is not expected; a wrong kernel shows up within a few steps as a growing
//! gap.

use brrr::train::{TrainArgs, run_with};
use brrr_backend::Backend;
use brrr_conformance::CpuBackend;
use clap::Parser;
use std::path::Path;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: TrainArgs,
}

/// `brrr train` arguments: `steps` steps from seed 4242, no evaluation, plus `extra` flags.
pub fn args(out: &Path, steps: u32, extra: &[&str]) -> TrainArgs {
    let steps = steps.to_string();
    let mut argv = vec![
        "brrr-train",
        "--steps",
        &steps,
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
    argv.extend_from_slice(extra);
    Cli::parse_from(argv).args
}

/// Trains on `backend` and on the CPU with `args(dir, ..)` and asserts that every step's
/// training loss agrees to `tol` relative. Returns the worst relative difference.
pub fn follows_cpu<B: Backend>(
    name: &str,
    backend: B,
    steps: u32,
    extra: &[&str],
    tol: f64,
) -> f64 {
    let dir = std::env::temp_dir().join(format!("brrr-train-{name}-{}", std::process::id()));
    let (cpu_dir, dev_dir) = (dir.join("cpu"), dir.join(name));
    let _ = std::fs::remove_dir_all(&dir);

    run_with(CpuBackend::new(), &args(&cpu_dir, steps, extra)).expect("cpu run");
    run_with(backend, &args(&dev_dir, steps, extra)).unwrap_or_else(|e| panic!("{name} run: {e}"));

    let cpu = brrr::metrics::read_losses(cpu_dir.join("metrics.csv")).expect("cpu metrics");
    let dev = brrr::metrics::read_losses(dev_dir.join("metrics.csv")).expect("metrics");
    assert_eq!(cpu.len(), steps as usize, "{cpu:?}");
    assert_eq!(dev.len(), cpu.len());
    let mut worst = 0.0f64;
    for ((s, a), (t, b)) in cpu.iter().zip(&dev) {
        assert_eq!(s, t);
        let rel = f64::from((a - b).abs() / a.abs());
        eprintln!("step {s:>3}: cpu {a:.6}  {name} {b:.6}  rel {rel:.1e}");
        assert!(
            rel <= tol,
            "step {s}: cpu loss {a}, {name} loss {b} (rel {rel:.2e} > {tol:.0e})"
        );
        worst = worst.max(rel);
    }
    let _ = std::fs::remove_dir_all(&dir);
    worst
}
