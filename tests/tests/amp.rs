//! The loss-scaling kernels (`unscale_check_finite`, `update_loss_scale` with
//! Megatron-LM's hysteresis and minimum scale) on every present backend against
//! brrr-cpu. The full suites (`wgpu.rs`, `cuda.rs`) include these cases too; this file
//! runs only them, quickly.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::DType;
use brrr_conformance::{CpuBackend, SuiteOptions, assert_all_passed, report, run_suite};

const OPS: [&str; 2] = ["unscale_check_finite", "update_loss_scale"];

#[test]
fn loss_scaling_kernels_on_cpu_pass_their_own_cases() {
    let opts = SuiteOptions::all(&[DType::F32, DType::F16, DType::BF16]).only(&OPS);
    let results = run_suite(&CpuBackend::new(), &CpuBackend::new(), &opts);
    assert!(results.len() >= 10, "{}", report(&results));
    assert_all_passed("cpu", &results);
}

#[test]
fn loss_scaling_kernels_on_wgpu_match_the_cpu() {
    let gpu = match brrr_wgpu::WgpuBackend::new_blocking() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("wgpu: SKIPPED ({e})");
            return;
        }
    };
    let opts = SuiteOptions::all(&[DType::F32, DType::F16, DType::BF16]).only(&OPS);
    let results = run_suite(&gpu, &CpuBackend::new(), &opts);
    eprintln!("{}", report(&results));
    assert_all_passed("wgpu", &results);
}
