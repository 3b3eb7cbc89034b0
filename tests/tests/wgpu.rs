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

/// Both upload paths (wgpu's own staging, and the reused staging ring) put exactly the
/// caller's bytes in the buffer, for `upload` and `write`: packed 16-bit dtypes of odd
/// length (a half-filled last word), the ring's chunk size and one past it, and sizes
/// past the ring's limit (which go direct). Many staged uploads with no wait in between
/// (the ring grows) and then a wait (it is reused) read back the same.
#[test]
fn uploads_by_every_path_read_back_exactly() {
    use brrr_backend::block_on;
    use brrr_wgpu::{STAGED_MAX_BYTES, STAGING_CHUNK_BYTES, UploadPath};
    let Some(gpu) = gpu() else { return };
    let words = |bytes: u64| (bytes / 4) as usize;
    let sizes = [
        1,
        3,
        1001,
        words(STAGING_CHUNK_BYTES),
        words(STAGING_CHUNK_BYTES) + 1,
        words(STAGED_MAX_BYTES) + 1,
    ];
    for path in [UploadPath::Direct, UploadPath::Staged] {
        let b = gpu.with_upload_path(path);
        for &n in &sizes {
            let cases = [
                HostData::U32(
                    (0..n as u32)
                        .map(|i| i.wrapping_mul(2_654_435_761))
                        .collect(),
                ),
                HostData::from_f64(
                    DType::F16,
                    &(0..n).map(|i| i as f64 - 7.5).collect::<Vec<_>>(),
                ),
                HostData::from_f64(
                    DType::BF16,
                    &(0..n).map(|i| 0.25 * i as f64).collect::<Vec<_>>(),
                ),
            ];
            for data in cases {
                let what = format!("{path:?} {} n={n}", data.dtype());
                let up = b.upload(&data).unwrap();
                assert_eq!(block_on(b.read(&up)).unwrap(), data, "upload {what}");
                let mut w = b.alloc(data.dtype(), n).unwrap();
                b.write(&mut w, &data).unwrap();
                assert_eq!(block_on(b.read(&w)).unwrap(), data, "write {what}");
            }
        }
        // 64 batches queued without a wait, each overwriting the last write's buffer
        // after a kernel read it: the queue keeps them in order.
        let mut acc = b.zeros(DType::F32, 1000).unwrap();
        let mut x = b.alloc(DType::F32, 1000).unwrap();
        for i in 0..64 {
            b.write(&mut x, &HostData::F32(vec![i as f32; 1000]))
                .unwrap();
            b.axpy(1.0, &x, &mut acc, None).unwrap();
        }
        let want = (0..64).sum::<i32>() as f32;
        assert_eq!(
            block_on(b.read(&acc)).unwrap(),
            HostData::F32(vec![want; 1000]),
            "{path:?}: writes queued behind the kernels that read the previous contents"
        );
    }
}
