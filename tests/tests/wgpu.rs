//! The conformance suite on the wgpu backend (natively: Vulkan/Metal/DX12; in CI, Mesa's
//! lavapipe). Without an adapter the tests print `wgpu: SKIPPED (...)` and return, unless
//! `BRRR_REQUIRE_WGPU=1`, under which absence fails (the CI script sets it).
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::{Backend, DType, Error, HostData};
use brrr_conformance::{
    CpuBackend, SuiteOptions, assert_all_passed, backend_absent, report, run_suite,
};
use brrr_wgpu::{MatmulKernel, WgpuBackend};
use std::sync::OnceLock;

const REQUIRE: &str = "BRRR_REQUIRE_WGPU";

/// One device for the whole file (creating one costs ~100 ms on lavapipe).
fn gpu() -> Option<WgpuBackend> {
    static GPU: OnceLock<Result<WgpuBackend, String>> = OnceLock::new();
    match GPU.get_or_init(|| WgpuBackend::new_blocking().map_err(|e| e.to_string())) {
        Ok(g) => Some(g.clone()),
        Err(e) => {
            backend_absent("wgpu", e, REQUIRE);
            None
        }
    }
}

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[test]
fn every_op_matches_the_cpu_reference() {
    let Some(gpu) = gpu() else { return };
    eprintln!("wgpu device: {}", gpu.report());
    let results = run_suite(&gpu, &CpuBackend::new(), &SuiteOptions::all(&DTYPES));
    eprintln!("{}", report(&results));
    assert_all_passed("wgpu", &results);
}

#[test]
fn every_matmul_version_matches_the_cpu_reference() {
    let Some(gpu) = gpu() else { return };
    for k in MatmulKernel::ALL {
        let forced = gpu.with_matmul_kernel(k);
        let opts = SuiteOptions::all(&[DType::F32, DType::BF16]).only(&[
            "gemm",
            "attention",
            "attention_backward",
        ]);
        let results = run_suite(&forced, &CpuBackend::new(), &opts);
        eprintln!("matmul {k}:\n{}", report(&results));
        assert_all_passed(&format!("wgpu matmul {k}"), &results);
    }
}

#[test]
fn f64_is_unsupported_not_wrong() {
    let Some(gpu) = gpu() else { return };
    assert!(!gpu.supports(DType::F64));
    let e = gpu.zeros(DType::F64, 4).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let e = gpu.upload(&HostData::F64(vec![1.0])).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    // The suite reports f64 as skipped, by name, never as passed.
    let results = run_suite(&gpu, &CpuBackend::new(), &SuiteOptions::core(&[DType::F64]));
    assert!(!results.is_empty());
    assert!(
        results
            .iter()
            .all(|r| matches!(r.outcome, brrr_conformance::Outcome::Skipped(_)))
    );
}

#[test]
fn limits_are_errors_not_panics() {
    let Some(gpu) = gpu() else { return };
    let max = gpu.report().max_buffer_size;
    // One element past the largest buffer the device allows.
    let too_many = (max / 4 + 1) as usize;
    match gpu.zeros(DType::F32, too_many) {
        Err(Error::LimitExceeded { limit, .. }) => {
            assert!(
                limit.contains("max_buffer_size") || limit.contains("u32"),
                "{limit}"
            )
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
    // A buffer the device can hold but cannot bind whole to one kernel.
    let binding = gpu.report().max_storage_buffer_binding_size;
    if binding < max {
        let n = (binding / 4 + 4) as usize;
        let x = gpu.zeros(DType::F32, n).unwrap();
        let mut y = gpu.zeros(DType::F32, n).unwrap();
        match gpu.unary(brrr_backend::UnaryOp::Neg, &x, &mut y) {
            Err(Error::LimitExceeded { limit, .. }) => {
                assert_eq!(limit, "max_storage_buffer_binding_size")
            }
            other => panic!("expected LimitExceeded, got {other:?}"),
        }
    }
    // Wrong lengths and dtypes are errors too.
    let a = gpu.zeros(DType::F32, 6).unwrap();
    let b = gpu.zeros(DType::F32, 5).unwrap();
    let mut c = gpu.zeros(DType::F32, 4).unwrap();
    let spec = brrr_backend::GemmSpec::new(2, 2, 3);
    assert!(matches!(
        gpu.gemm(&spec, &a, &b, &mut c),
        Err(Error::BufferTooSmall { .. })
    ));
    let bf = gpu.zeros(DType::BF16, 6).unwrap();
    assert!(matches!(
        gpu.gemm(&spec, &bf, &b, &mut c),
        Err(Error::DType { .. })
    ));
    // V4 needs multiples of 4; asking for it explicitly on an odd shape is an Err.
    let spec = brrr_backend::GemmSpec::new(3, 3, 3);
    let a = gpu.zeros(DType::F32, 9).unwrap();
    let mut c = gpu.zeros(DType::F32, 9).unwrap();
    assert!(
        gpu.gemm_with(MatmulKernel::V4Vec4, &spec, &a, &a, &mut c)
            .is_err()
    );
}
