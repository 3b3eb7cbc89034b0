//! The conformance suite compiled to wasm32 and run in a browser on WebGPU, against
//! brrr-cpu compiled to wasm32 in the same page: the core (matmul, softmax, layernorm,
//! attention and its backward, AdamW) on its own, then every op at the smaller shapes. Run by scripts/test-wgpu.sh through wasm-bindgen-test in
//! headless Chromium (`--enable-unsafe-webgpu`; see tests/webdriver.json):
//!
//! ```text
//! cargo test -p brrr-conformance --target wasm32-unknown-unknown --test web
//! ```
//!
//! No WebGPU adapter in the browser is a failure here: this test exists to run there.
#![cfg(target_arch = "wasm32")]

use brrr_backend::{Backend, DType};
use brrr_conformance::{CpuBackend, SuiteOptions, assert_all_passed, report, run_suite_async};
use brrr_wgpu::{MatmulKernel, WgpuBackend};
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

async fn gpu() -> WgpuBackend {
    match WgpuBackend::new().await {
        Ok(g) => {
            console_log!("wgpu device: {}", g.report());
            g
        }
        Err(e) => panic!("wgpu (browser): no WebGPU adapter: {e}"),
    }
}

#[wasm_bindgen_test]
async fn core_ops_match_the_cpu_reference_on_webgpu() {
    let gpu = gpu().await;
    assert!(gpu.report().api.contains("WebGpu"), "{}", gpu.report());
    let results = run_suite_async(&gpu, &CpuBackend::new(), &SuiteOptions::core(&DTYPES)).await;
    console_log!("wgpu (browser):\n{}", report(&results));
    assert_all_passed("wgpu (browser)", &results);
}

#[wasm_bindgen_test]
async fn every_op_matches_the_cpu_reference_on_webgpu() {
    let gpu = gpu().await;
    let opts = SuiteOptions {
        large: false,
        ..SuiteOptions::all(&DTYPES)
    };
    let results = run_suite_async(&gpu, &CpuBackend::new(), &opts).await;
    console_log!("wgpu (browser), every op:\n{}", report(&results));
    assert_all_passed("wgpu (browser)", &results);
}

#[wasm_bindgen_test]
async fn every_matmul_version_matches_on_webgpu() {
    let gpu = gpu().await;
    for k in MatmulKernel::ALL {
        let forced = gpu.with_matmul_kernel(k);
        let opts = SuiteOptions::core(&[DType::F32]).only(&["gemm"]);
        let results = run_suite_async(&forced, &CpuBackend::new(), &opts).await;
        console_log!("matmul {k} (browser):\n{}", report(&results));
        assert_all_passed(&format!("wgpu (browser) matmul {k}"), &results);
    }
}

#[wasm_bindgen_test]
async fn readback_is_async_and_exact() {
    let gpu = gpu().await;
    let data = brrr_backend::HostData::F32((0..1001).map(|i| i as f32 * 0.5).collect());
    let buf = gpu.upload(&data).unwrap();
    assert_eq!(gpu.read(&buf).await.unwrap(), data);
    gpu.synchronize().await.unwrap();
}
