//! Tests of what only a real GPU has: the driver layer (streams, events, pinned staging,
//! the copy stream's ordering against the compute stream, cuBLAS/cuBLASLt, out of
//! memory from the driver, use from several threads). Without a GPU each test prints
//! `cuda: skipped (...)` and returns, unless `BRRR_REQUIRE_CUDA=1` (set by
//! bench/cuda.sh), under which absence fails.
//!
//! The op-by-op comparison against the reference is the conformance suite
//! (`cargo test -p brrr-conformance --test cuda`).
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::{Backend, DType, Error, GemmSpec, HostData, UnaryOp, block_on};
use brrr_cuda::{CudaBackend, GemmImpl};
use std::sync::OnceLock;

fn gpu() -> Option<CudaBackend> {
    static GPU: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
    match GPU.get_or_init(|| CudaBackend::new(0).map_err(|e| e.to_string())) {
        Ok(g) => Some(g.clone()),
        Err(e) => {
            let required =
                std::env::var("BRRR_REQUIRE_CUDA").is_ok_and(|v| !v.is_empty() && v != "0");
            assert!(!required, "cuda: {e}, but BRRR_REQUIRE_CUDA is set");
            brrr_backend::skip::report_skipped("cuda", &e.to_string());
            None
        }
    }
}

fn read(g: &CudaBackend, b: &brrr_cuda::CudaBuffer) -> Vec<f64> {
    block_on(g.read(b)).unwrap().to_f64()
}

fn ramp(n: usize, scale: f64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f64 * scale - 0.5)
        .collect()
}

#[test]
fn device_reports_itself() {
    let Some(g) = gpu() else { return };
    let info = g.info();
    println!("cuda device: {}", info.device);
    assert_eq!(info.name, "cuda");
    assert!(!g.is_emulated());
    assert!(g.sm_count() > 0 && g.total_memory() > 0);
    let (free, total) = g.memory_info().unwrap();
    assert!(free <= total);
}

/// A block freed while a slow kernel still reads it, then reused at once by an upload on
/// the copy stream: the upload must wait for the kernel (the free event), or the kernel
/// would read the new data.
#[test]
fn uploads_into_reused_blocks_wait_for_earlier_kernels() {
    let Some(g) = gpu() else { return };
    let n = 2048;
    let a_old = ramp(n * n, 1e-3);
    let b_vals = ramp(n * n, 2e-3);
    let a = g.upload(&HostData::from_f64(DType::F32, &a_old)).unwrap();
    let b = g.upload(&HostData::from_f64(DType::F32, &b_vals)).unwrap();
    let mut c = g.zeros(DType::F32, n * n).unwrap();
    // The naive kernel takes long enough (tens of ms) for a racing copy to land inside it.
    g.gemm_with(GemmImpl::V1Naive, &GemmSpec::new(n, n, n), &a, &b, &mut c)
        .unwrap();
    let ptr = a.device_ptr();
    drop(a);
    let newer = g.upload(&HostData::F32(vec![1e6; n * n])).unwrap();
    assert_eq!(
        newer.device_ptr(),
        ptr,
        "the cache should hand the same block back"
    );
    // Reference: the same product with cuBLAS on the old data.
    let a2 = g.upload(&HostData::from_f64(DType::F32, &a_old)).unwrap();
    let mut c2 = g.zeros(DType::F32, n * n).unwrap();
    g.gemm(&GemmSpec::new(n, n, n), &a2, &b, &mut c2).unwrap();
    let (got, want) = (read(&g, &c), read(&g, &c2));
    let worst = got
        .iter()
        .zip(&want)
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0.0, f64::max);
    assert!(
        worst < 1e-3,
        "the upload overwrote data a running kernel still read (worst rel. error {worst})"
    );
    drop(newer);
}

/// `write` into a buffer that queued kernels still read must wait for them too.
#[test]
fn writes_wait_for_kernels_that_read_the_buffer() {
    let Some(g) = gpu() else { return };
    let n = 1 << 24;
    let x = g.upload(&HostData::F32(vec![2.0; n])).unwrap();
    let mut y = g.zeros(DType::F32, n).unwrap();
    for _ in 0..50 {
        g.axpy(1.0, &x, &mut y, None).unwrap();
    }
    let mut x = x;
    g.write(&mut x, &HostData::F32(vec![-1000.0; n])).unwrap();
    let got = read(&g, &y);
    assert!(got.iter().all(|&v| v == 100.0), "y = {:?}...", &got[..4]);
}

#[test]
fn a_warm_training_step_does_not_cuda_malloc() {
    let Some(g) = gpu() else { return };
    let step = |g: &CudaBackend| {
        let a = g.zeros(DType::BF16, 1 << 20).unwrap();
        let b = g.zeros(DType::BF16, 1 << 20).unwrap();
        let mut c = g.zeros(DType::BF16, 1 << 20).unwrap();
        g.gemm(&GemmSpec::new(1024, 1024, 1024), &a, &b, &mut c)
            .unwrap();
        let mut t = g.zeros(DType::BF16, 1 << 20).unwrap();
        g.unary(UnaryOp::Exp, &c, &mut t).unwrap();
    };
    step(&g);
    let before = g.allocator_stats();
    for _ in 0..5 {
        step(&g);
    }
    g.synchronize_blocking().unwrap();
    let after = g.allocator_stats();
    assert_eq!(
        after.device_mallocs, before.device_mallocs,
        "{before:?} -> {after:?}"
    );
}

#[test]
fn out_of_memory_is_an_error_with_sizes() {
    let Some(g) = gpu() else { return };
    let too_much = g.total_memory() as usize * 2;
    match g.zeros(DType::F32, too_much / 4) {
        Err(Error::OutOfMemory {
            requested,
            free,
            backend,
        }) => {
            assert_eq!(backend, "cuda");
            assert!(requested >= too_much as u64);
            assert!(free <= g.total_memory());
            println!(
                "cuda OOM error: {}",
                Error::OutOfMemory {
                    backend,
                    requested,
                    free
                }
            );
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // The device still works afterwards.
    let x = g.upload(&HostData::F32(vec![1.0; 16])).unwrap();
    assert_eq!(read(&g, &x), vec![1.0; 16]);
}

#[test]
fn events_time_device_work() {
    let Some(g) = gpu() else { return };
    let x = g.zeros(DType::F32, 1 << 26).unwrap();
    let mut y = g.zeros(DType::F32, 1 << 26).unwrap();
    let t = g.time(|| g.unary(UnaryOp::Exp, &x, &mut y)).unwrap();
    // 512 MiB of traffic: more than 10 microseconds on any GPU, less than a second.
    assert!(t > 1e-5 && t < 1.0, "{t} s");
}

#[test]
fn the_backend_works_from_other_threads() {
    let Some(g) = gpu() else { return };
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let g = g.clone();
            std::thread::spawn(move || {
                let x = g.upload(&HostData::F32(vec![i as f32; 1000])).unwrap();
                let mut y = g.zeros(DType::F32, 1000).unwrap();
                g.unary(UnaryOp::Square, &x, &mut y).unwrap();
                read(&g, &y)[0]
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), (i * i) as f64);
    }
}

#[test]
fn fused_bias_gelu_epilogue_matches_the_unfused_ops() {
    let Some(g) = gpu() else { return };
    for dt in [DType::F32, DType::BF16] {
        let (m, n, k) = (256, 384, 512);
        let spec = GemmSpec::new(m, n, k).trans_b(true);
        let a = g
            .upload(&HostData::from_f64(dt, &ramp(m * k, 2e-3)))
            .unwrap();
        let b = g
            .upload(&HostData::from_f64(dt, &ramp(n * k, 2e-3)))
            .unwrap();
        let bias = g.upload(&HostData::from_f64(dt, &ramp(n, 1e-3))).unwrap();
        let mut fused = g.zeros(dt, m * n).unwrap();
        g.gemm_bias_gelu(&spec, &a, &b, Some(&bias), true, &mut fused)
            .unwrap();
        // Unfused: GEMM, broadcast add, GELU.
        let mut mm = g.zeros(dt, m * n).unwrap();
        g.gemm(&spec, &a, &b, &mut mm).unwrap();
        let shape = brrr_backend::Shape::new([m, n]);
        let lb = brrr_backend::Layout::contiguous([n])
            .broadcast_to("t", &shape)
            .unwrap();
        let mut biased = g.zeros(dt, m * n).unwrap();
        g.binary(
            brrr_backend::BinaryOp::Add,
            &mm,
            &brrr_backend::Layout::contiguous([m, n]),
            &bias,
            &lb,
            &mut biased,
        )
        .unwrap();
        let mut want = g.zeros(dt, m * n).unwrap();
        g.gelu(&biased, &mut want).unwrap();
        let (x, y) = (read(&g, &fused), read(&g, &want));
        let tol = if dt == DType::F32 { 1e-4 } else { 3e-2 };
        let worst = x
            .iter()
            .zip(&y)
            .map(|(p, q)| (p - q).abs() / (1.0 + q.abs()))
            .fold(0.0, f64::max);
        println!(
            "cuda gemm_bias_gelu {dt}: worst relative difference to the unfused ops {worst:.2e}"
        );
        assert!(worst < tol, "{dt}: {worst}");
    }
}

#[test]
fn benchmark_tables_on_the_gpu() {
    let Some(g) = gpu() else { return };
    // Small sizes: this is a smoke test of the benchmark code on a GPU, not a benchmark.
    let rows = brrr_cuda::bench::gemm(
        &g,
        &brrr_cuda::bench::GemmBench {
            n: 512,
            warmup: 1,
            reps: 2,
            ..Default::default()
        },
    )
    .unwrap();
    for r in &rows {
        println!(
            "{:<22} {:<5} {:>8.2} {} {}",
            r.name,
            r.dtype,
            r.rate.value(),
            r.rate.unit(),
            r.note
        );
    }
    assert!(
        rows.iter()
            .any(|r| r.name == "v4-tensor-core" && r.note.is_empty())
    );
}

#[test]
fn an_upload_hides_behind_compute_enqueued_before_it() {
    let Some(g) = gpu() else { return };
    // About 5 ms of GEMMs on an H100 beside an 8 MiB upload (well under 1 ms of copy):
    // the copy stream should hide most of it. The write's transfer must wait for the
    // GEMMs (only its host-side staging overlaps), so it hides less.
    let cfg = brrr_cuda::bench::OverlapBench {
        gemm_n: 2048,
        gemms: 16,
        upload_bytes: 8 << 20,
        warmup: 1,
        reps: 5,
    };
    let rows = brrr_cuda::bench::upload_overlap(&g, &cfg).unwrap();
    for r in &rows {
        println!("{:<18} {:>10.6} s  {}", r.name, r.seconds, r.note);
    }
    let [compute, upload, both, write] = [0, 1, 2, 3].map(|i| rows[i].seconds);
    let hidden = brrr_cuda::bench::hidden_fraction(compute, upload, both);
    let hidden_write = brrr_cuda::bench::hidden_fraction(compute, upload, write);
    assert!(
        hidden > 0.5,
        "only {:.0}% of the upload hid behind the GEMMs",
        hidden * 100.0
    );
    assert!(
        hidden > hidden_write,
        "{hidden} vs the write's {hidden_write}"
    );
}
