//! The conformance suite on the CUDA backend.
//!
//! - On a machine with an NVIDIA GPU: every op against brrr-cpu, once with cuBLAS and
//!   once with each of brrr's own GEMM kernels (v1 naive ... v4 tensor cores).
//! - Without a GPU (no libcuda, or no device): the GPU tests print
//!   `cuda: SKIPPED (...)` and return, unless `BRRR_REQUIRE_CUDA=1`, under which absence
//!   fails (set it on GPU machines, as bench/cuda.sh does).
//! - Everywhere with a C++ compiler: the same suite on `CudaBackend::emulated()`, which
//!   runs the CUDA kernels of kernels/*.cu on the CPU (one OS thread per CUDA thread)
//!   behind the same host code, with cuBLAS replaced by its documented column-major
//!   semantics. It checks the kernels and everything above the driver calls; it is
//!   reported as `cuda-emu`, never as a GPU pass.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::{Backend, DType, Error};
use brrr_conformance::{
    CpuBackend, Outcome, SuiteOptions, assert_all_passed, backend_absent, report, run_suite,
};
use brrr_cuda::{CudaBackend, GemmImpl};
use std::sync::OnceLock;

const REQUIRE: &str = "BRRR_REQUIRE_CUDA";

/// f64 is native on NVIDIA GPUs and in the emulator: the suite runs it too.
const DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

/// One device for the whole file.
fn gpu() -> Option<CudaBackend> {
    static GPU: OnceLock<Result<CudaBackend, Error>> = OnceLock::new();
    match GPU.get_or_init(|| CudaBackend::new(0)) {
        Ok(g) => Some(g.clone()),
        Err(Error::NoDevice { reason, .. }) => {
            backend_absent("cuda", reason, REQUIRE);
            None
        }
        Err(e) => {
            // A driver that is present but broken is not "absent": fail loudly.
            panic!("cuda: the backend could not be created: {e}");
        }
    }
}

/// The kernel emulator (a C++ compiler is needed to build it).
fn emulated() -> Option<CudaBackend> {
    static EMU: OnceLock<Option<CudaBackend>> = OnceLock::new();
    EMU.get_or_init(|| {
        if !brrr_cuda::emu::compiler_available() {
            brrr_backend::skip::report_skipped(
                "cuda-emu",
                "no C++ compiler to build the kernel emulator",
            );
            return None;
        }
        Some(CudaBackend::emulated().expect("building the CUDA kernel emulator"))
    })
    .clone()
}

#[test]
fn no_driver_is_a_no_device_error() {
    if brrr_cuda::driver_present() {
        return;
    }
    match CudaBackend::new(0) {
        Err(Error::NoDevice {
            backend: "cuda",
            reason,
        }) => {
            assert_eq!(reason, "no CUDA driver (libcuda not found)");
            eprintln!("cuda: skipped (no CUDA driver)");
        }
        other => panic!("expected Error::NoDevice without libcuda, got {other:?}"),
    }
}

#[test]
fn every_op_matches_the_cpu_reference() {
    let Some(gpu) = gpu() else { return };
    eprintln!("cuda device: {}", gpu.info().device);
    let results = run_suite(&gpu, &CpuBackend::new(), &SuiteOptions::all(&DTYPES));
    eprintln!("{}", report(&results));
    assert_all_passed("cuda", &results);
}

/// A backend of its own (clones share settings such as the GEMM implementation, and
/// the tests of this file run in parallel).
fn own_gpu() -> Option<CudaBackend> {
    gpu()?;
    Some(CudaBackend::new(0).expect("a second handle on the device"))
}

#[test]
fn every_gemm_implementation_matches_the_cpu_reference() {
    let Some(gpu) = own_gpu() else { return };
    for which in GemmImpl::ALL {
        gpu.set_gemm_impl(which);
        let opts = SuiteOptions::all(&DTYPES).only(&["gemm", "attention", "attention_backward"]);
        let results = run_suite(&gpu, &CpuBackend::new(), &opts);
        eprintln!("gemm {which}:\n{}", report(&results));
        assert_all_passed(&format!("cuda gemm {which}"), &results);
    }
}

#[test]
fn tf32_gemm_runs_and_reports_how_far_it_is_from_f32() {
    let Some(gpu) = own_gpu() else { return };
    // TF32 rounds GEMM inputs to 10 mantissa bits, so it is not expected to meet f32
    // tolerances on long k: this reports rather than asserts.
    gpu.set_allow_tf32(true);
    let results = run_suite(
        &gpu,
        &CpuBackend::new(),
        &SuiteOptions::all(&[DType::F32]).only(&["gemm"]),
    );
    gpu.set_allow_tf32(false);
    let failed: Vec<_> = results.iter().filter(|r| r.failed()).collect();
    eprintln!(
        "cuda tf32 gemm: {} of {} cases within f32 tolerance",
        results.len() - failed.len(),
        results.len()
    );
}

#[test]
fn the_kernel_emulator_passes_the_suite() {
    let Some(emu) = emulated() else { return };
    let opts = SuiteOptions {
        large: false,
        ..SuiteOptions::all(&DTYPES)
    };
    let results = run_suite(&emu, &CpuBackend::new(), &opts);
    eprintln!(
        "cuda-emu (CPU emulation of the CUDA kernels):\n{}",
        report(&results)
    );
    // Every float case runs (skips are only cases in dtypes no backend computes in).
    let skipped_floats: Vec<String> = results
        .iter()
        .filter(|r| r.dtype.is_float() && matches!(r.outcome, Outcome::Skipped(_)))
        .map(|r| r.to_string())
        .collect();
    assert!(
        skipped_floats.is_empty(),
        "float cases skipped:\n{}",
        skipped_floats.join("\n")
    );
    assert_all_passed("cuda-emu", &results);
}

#[test]
fn the_emulated_own_gemm_kernels_pass_the_suite() {
    let Some(emu) = emulated() else { return };
    for which in GemmImpl::OWN {
        // A backend of its own: settings are shared between clones.
        let backend = CudaBackend::emulated().expect("emulator");
        backend.set_gemm_impl(which);
        let opts = SuiteOptions {
            large: false,
            ..SuiteOptions::all(&[DType::F32, DType::BF16])
        }
        .only(&["gemm"]);
        let results = run_suite(&backend, &CpuBackend::new(), &opts);
        eprintln!("cuda-emu gemm {which}:\n{}", report(&results));
        assert_all_passed(&format!("cuda-emu gemm {which}"), &results);
    }
    drop(emu);
}

/// Multi-tensor AdamW is elementwise: each parameter must come out as the one-buffer
/// kernel leaves it, bit for bit, with masters (bf16 copies, f32 gradients) and
/// without (f32), lengths across several 16384-element chunks and an empty one.
fn multi_adamw_is_one_buffer_adamw_bit_for_bit(x: &CudaBackend) {
    use brrr_backend::{AdamWParams, AdamWTensors, HostData, block_on};
    let lens = [40_000usize, 1, 0, 768, 16_385];
    let p = AdamWParams {
        lr: 1e-2,
        step: 5,
        weight_decay: 0.1,
        grad_scale: 0.5,
        ..AdamWParams::default()
    };
    let data = |n: usize, salt: usize| -> Vec<f64> {
        (0..n)
            .map(|i| (((i * 7919 + salt * 104_729) % 2000) as f64 - 1000.0) / 1000.0)
            .collect()
    };
    // The second moment is never negative.
    let v_data =
        |n: usize, salt: usize| data(n, salt).into_iter().map(f64::abs).collect::<Vec<_>>();
    // Per parameter: (param, master, grad, m, v) on the device, twice.
    let make = || -> Vec<[<CudaBackend as Backend>::Buffer; 5]> {
        lens.iter()
            .enumerate()
            .map(|(i, &n)| {
                let w = HostData::from_f64(DType::F32, &data(n, i));
                [
                    x.upload(&HostData::from_f64(DType::BF16, &w.to_f64()))
                        .unwrap(),
                    x.upload(&w).unwrap(),
                    x.upload(&HostData::from_f64(DType::F32, &data(n, i + 10)))
                        .unwrap(),
                    x.upload(&HostData::from_f64(DType::F32, &data(n, i + 20)))
                        .unwrap(),
                    x.upload(&HostData::from_f64(DType::F32, &v_data(n, i + 30)))
                        .unwrap(),
                ]
            })
            .collect()
    };
    let master = |i: usize| i.is_multiple_of(2);
    let (mut one, mut multi) = (make(), make());
    for (i, [param, mst, grad, m, v]) in one.iter_mut().enumerate() {
        let hp = AdamWParams {
            weight_decay: if i != 1 { p.weight_decay } else { 0.0 },
            ..p
        };
        if master(i) {
            x.adamw_master(&hp, mst, param, grad, m, v, None, None)
                .unwrap();
        } else {
            x.adamw(&hp, mst, grad, m, v, None, None).unwrap();
        }
    }
    let mut list: Vec<_> = multi
        .iter_mut()
        .enumerate()
        .map(|(i, [param, mst, grad, m, v])| {
            let (param, master) = if master(i) {
                (param, Some(mst))
            } else {
                (mst, None)
            };
            AdamWTensors {
                param,
                master,
                grad: &*grad,
                m,
                v,
                decay: i != 1,
            }
        })
        .collect();
    x.multi_tensor_adamw(&p, &mut list, None, None).unwrap();
    for (i, (a, b)) in one.iter().zip(&multi).enumerate() {
        for (k, (a, b)) in a.iter().zip(b).enumerate() {
            let (a, b) = (block_on(x.read(a)).unwrap(), block_on(x.read(b)).unwrap());
            assert_eq!(a.as_bytes(), b.as_bytes(), "parameter {i}, buffer {k}");
        }
    }
}

#[test]
fn multi_tensor_adamw_matches_the_one_buffer_kernel_bit_for_bit() {
    if let Some(gpu) = own_gpu() {
        multi_adamw_is_one_buffer_adamw_bit_for_bit(&gpu);
    }
}

#[test]
fn the_emulated_multi_tensor_adamw_matches_the_one_buffer_kernel_bit_for_bit() {
    if let Some(emu) = emulated() {
        multi_adamw_is_one_buffer_adamw_bit_for_bit(&emu);
    }
}
