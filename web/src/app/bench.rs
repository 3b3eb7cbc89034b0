//! Timing brrr's kernels in the browser. The kernels are the backends' own
//! (`brrr_wgpu` on WebGPU, `brrr_cpu` in wasm); this module only calls them, waits with
//! `Backend::synchronize`, and reads `performance.now()`.
//!
//! Each measurement enqueues a batch of calls and synchronizes once, doubling the batch
//! until it lasts `min_s`: a sync per call would time the browser's round trip, not the
//! kernel (that round trip is what the overhead chart shows on purpose). Between batches
//! it yields to the event loop so that the page stays responsive.

use crate::app::util::{now_s, yield_now};
use crate::logic::attention::{
    AttentionRow, AttentionSize, agreement, composite_forward, fused_forward, random_qkv,
};
use crate::logic::kernels::{
    CHAIN_BUFFERS, ChainKernel, GELU_UNFUSED, Measurement, ROW_WIDTH, RowKernel, chain_bytes,
    fused_gelu_bytes, gemm_cost,
};
use brrr_backend::{
    Backend, DType, GemmSpec, HostData, LayerNormSpec, Layout, Result, SoftmaxSpec, UnaryOp,
};

/// Seconds per call of `f`, as described in the module docs. `f` only enqueues.
pub async fn time_call<B: Backend>(
    backend: &B,
    min_s: f64,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    f()?; // warm-up: compiles the pipeline on first use
    backend.synchronize().await?;
    let mut reps = 1usize;
    loop {
        let t0 = now_s();
        for _ in 0..reps {
            f()?;
        }
        backend.synchronize().await?;
        let dt = now_s() - t0;
        yield_now().await;
        if dt >= min_s || reps >= 1 << 16 {
            return Ok(dt.max(1e-9) / reps as f64);
        }
        // Aim straight for min_s once a batch is long enough to measure.
        reps = if dt > 1e-3 {
            ((reps as f64 * min_s / dt).ceil() as usize).clamp(reps + 1, reps * 8)
        } else {
            reps * 4
        };
    }
}

/// `n` pseudo-random f32 values in [-1, 1) (SplitMix64; the values do not matter, only
/// that they are not all equal).
pub fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// An n×n×n f32 GEMM timed with `gemm` (a wgpu matmul version, or `Backend::gemm`).
pub async fn bench_gemm<B: Backend>(
    backend: &B,
    label: &str,
    n: u64,
    min_s: f64,
    gemm: impl Fn(&GemmSpec, &B::Buffer, &B::Buffer, &mut B::Buffer) -> Result<()>,
) -> Result<Measurement> {
    let len = (n * n) as usize;
    let spec = GemmSpec::new(n as usize, n as usize, n as usize);
    let a = backend.upload(&HostData::F32(pseudo_random(len, 1)))?;
    let b = backend.upload(&HostData::F32(pseudo_random(len, 2)))?;
    let mut c = backend.zeros(DType::F32, len)?;
    let seconds = time_call(backend, min_s, || gemm(&spec, &a, &b, &mut c)).await?;
    let (flops, bytes) = gemm_cost(n).map_err(|e| brrr_backend::Error::Parse(e.to_string()))?;
    Ok(Measurement {
        kernel: label.to_string(),
        size: n,
        seconds,
        flops,
        bytes,
    })
}

/// A memory-bound kernel over `n` f32 elements (rows of [`ROW_WIDTH`]).
pub async fn bench_row_kernel<B: Backend>(
    backend: &B,
    kernel: RowKernel,
    n: u64,
    min_s: f64,
) -> Result<Measurement> {
    let rows = (n / ROW_WIDTH).max(1) as usize;
    let cols = if n >= ROW_WIDTH {
        ROW_WIDTH as usize
    } else {
        n as usize
    };
    let len = rows * cols;
    let x = backend.upload(&HostData::F32(pseudo_random(len, 3)))?;
    let mut y = backend.zeros(DType::F32, len)?;
    let seconds = match kernel {
        RowKernel::Affine => {
            let op = UnaryOp::Affine { mul: 2.0, add: 1.0 };
            time_call(backend, min_s, || backend.unary(op, &x, &mut y)).await?
        }
        RowKernel::Softmax => {
            let spec = SoftmaxSpec {
                rows,
                cols,
                scale: 1.0,
                causal: false,
            };
            time_call(backend, min_s, || backend.softmax(&spec, &x, &mut y)).await?
        }
        RowKernel::LayerNorm => {
            let spec = LayerNormSpec {
                rows,
                cols,
                eps: 1e-5,
                gamma_offset: 0,
                beta_offset: 0,
            };
            let gamma = backend.upload(&HostData::F32(vec![1.0; cols]))?;
            let beta = backend.zeros(DType::F32, cols)?;
            let mut mean = backend.zeros(DType::F32, rows)?;
            let mut rstd = backend.zeros(DType::F32, rows)?;
            time_call(backend, min_s, || {
                backend.layernorm(&spec, &x, &gamma, &beta, &mut y, &mut mean, &mut rstd)
            })
            .await?
        }
    };
    let (flops, bytes) = kernel
        .cost(len as u64)
        .map_err(|e| brrr_backend::Error::Parse(e.to_string()))?;
    Ok(Measurement {
        kernel: kernel.name().to_string(),
        size: len as u64,
        seconds,
        flops,
        bytes,
    })
}

/// Runs the unfused GELU chain once: `bufs[3] = gelu(bufs[0])` in eight kernels.
fn run_chain<B: Backend>(backend: &B, bufs: &mut [Option<B::Buffer>]) -> Result<()> {
    let missing = || brrr_backend::Error::invalid("gelu chain", "a buffer is missing");
    for step in GELU_UNFUSED {
        let [a, b] = step.inputs;
        // The output is taken out of the slice so the inputs can be borrowed beside it
        // (no step writes a buffer it reads).
        let mut out = bufs[step.output].take().ok_or_else(missing)?;
        let r = match step.kernel {
            ChainKernel::Unary(op) => {
                let x = bufs[a].as_ref().ok_or_else(missing)?;
                backend.unary(op, x, &mut out)
            }
            ChainKernel::Binary(op) => {
                let (x, y) = (
                    bufs[a].as_ref().ok_or_else(missing)?,
                    bufs[b].as_ref().ok_or_else(missing)?,
                );
                let layout = Layout::contiguous([backend.len(&out)]);
                backend.binary(op, x, &layout, y, &layout, &mut out)
            }
        };
        bufs[step.output] = Some(out);
        r?;
    }
    Ok(())
}

/// Fused against unfused GELU over `n` elements: both timings, and the largest
/// difference between their outputs (they compute the same formula).
pub async fn bench_fusion<B: Backend>(
    backend: &B,
    n: u64,
    min_s: f64,
) -> Result<(Measurement, Measurement, f64)> {
    let len = n as usize;
    let x = pseudo_random(len, 4)
        .iter()
        .map(|v| v * 3.0)
        .collect::<Vec<_>>();
    let mut bufs = Vec::with_capacity(CHAIN_BUFFERS);
    bufs.push(Some(backend.upload(&HostData::F32(x.clone()))?));
    for _ in 1..CHAIN_BUFFERS {
        bufs.push(Some(backend.zeros(DType::F32, len)?));
    }
    let unfused_s = time_call(backend, min_s, || run_chain(backend, &mut bufs)).await?;
    let mut fused_y = backend.zeros(DType::F32, len)?;
    let xb = backend.upload(&HostData::F32(x))?;
    let fused_s = time_call(backend, min_s, || backend.gelu(&xb, &mut fused_y)).await?;
    let y = bufs[CHAIN_BUFFERS - 1]
        .as_ref()
        .ok_or_else(|| brrr_backend::Error::invalid("gelu chain", "no output"))?;
    let a = backend.read(y).await?.to_f32();
    let b = backend.read(&fused_y).await?.to_f32();
    let max_diff = a
        .iter()
        .zip(&b)
        .map(|(p, q)| (p - q).abs())
        .fold(0.0f32, f32::max);
    let err = |e: brrr_perf::PerfError| brrr_backend::Error::Parse(e.to_string());
    Ok((
        Measurement {
            kernel: "unfused (8 kernels)".into(),
            size: n,
            seconds: unfused_s,
            flops: 0.0,
            bytes: chain_bytes(n).map_err(err)?,
        },
        Measurement {
            kernel: "fused gelu".into(),
            size: n,
            seconds: fused_s,
            flops: 0.0,
            bytes: fused_gelu_bytes(n).map_err(err)?,
        },
        f64::from(max_diff),
    ))
}

/// Time per call of a tiny `Backend::unary` (`y = x`) over `n` elements, one call per
/// submission: the fixed cost of launching a kernel.
pub async fn bench_dispatch<B: Backend>(
    backend: &B,
    label: &str,
    n: u64,
    min_s: f64,
) -> Result<Measurement> {
    let x = backend.upload(&HostData::F32(pseudo_random(n as usize, 5)))?;
    let mut y = backend.zeros(DType::F32, n as usize)?;
    let op = UnaryOp::Affine { mul: 1.0, add: 0.0 };
    let seconds = time_call(backend, min_s, || backend.unary(op, &x, &mut y)).await?;
    Ok(Measurement {
        kernel: label.into(),
        size: n,
        seconds,
        flops: n as f64,
        bytes: 8.0 * n as f64,
    })
}

/// The composite and the fused attention forward timed on the same random
/// `[B, T, 3·H·D]` input, then run once more to compare their outputs and count what
/// each kept for the backward (`logic::attention::agreement`).
pub async fn bench_attention<B: Backend>(
    backend: &B,
    size: AttentionSize,
    min_s: f64,
) -> Result<AttentionRow> {
    let qkv = random_qkv(backend, size, size.seq as u64)?;
    // Each call's outputs are dropped at once: their buffers go back to the backend's
    // cache, so later calls time the kernels rather than fresh allocations.
    let composite_s = time_call(backend, min_s, || composite_forward(&qkv, size).map(drop)).await?;
    let fused_s = time_call(backend, min_s, || fused_forward(&qkv, size).map(drop)).await?;
    let agreement = agreement(&qkv, size).await?;
    Ok(AttentionRow {
        seq: size.seq,
        composite_s,
        fused_s,
        agreement,
    })
}
