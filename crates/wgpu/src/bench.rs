//! Benchmark data (native only): rows of measurements, no printing. `brrr bench` prints
//! them. Times are wall-clock around `synchronize`, after one untimed warm-up run (which
//! also compiles the pipeline), repeated until at least `min_seconds` have passed.
//!
//! On a software adapter such as lavapipe these numbers measure a CPU emulating a GPU:
//! useful to see the shape of the curves, not as GPU performance.

use crate::{MatmulKernel, WgpuBackend};
use brrr_backend::{Backend, DType, GemmSpec, HostData, ReduceOp, Result, block_on};
use std::time::{Duration, Instant};

/// One measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What ran: a matmul version, or an element-wise dispatch mode.
    pub kernel: String,
    /// Problem size: `n` of an n×n×n GEMM, or the element count of an element-wise op.
    pub size: usize,
    /// Seconds per operation (per GEMM, per dispatch).
    pub seconds: f64,
    /// Throughput in `unit`.
    pub rate: f64,
    /// `GFLOP/s` or `GB/s`.
    pub unit: &'static str,
}

fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    // SplitMix64: enough for benchmark inputs, and no dependency.
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

/// Runs `f` until `min` has elapsed (at least `min_reps` times); seconds per call.
fn time_it(
    backend: &WgpuBackend,
    min: Duration,
    min_reps: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    f()?;
    block_on(backend.synchronize())?;
    let start = Instant::now();
    let mut reps = 0usize;
    while reps < min_reps || start.elapsed() < min {
        f()?;
        reps += 1;
        block_on(backend.synchronize())?;
    }
    Ok(start.elapsed().as_secs_f64() / reps as f64)
}

/// GFLOP/s of each matmul version on n×n×n f32 GEMMs. A version that cannot run a size
/// (V4 needs multiples of 4) is left out for that size.
pub fn bench_gemm(
    backend: &WgpuBackend,
    sizes: &[usize],
    kernels: &[MatmulKernel],
    min_seconds: f64,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &n in sizes {
        let spec = GemmSpec::new(n, n, n);
        let a = backend.upload(&HostData::F32(pseudo_random(n * n, 1)))?;
        let b = backend.upload(&HostData::F32(pseudo_random(n * n, 2)))?;
        let mut c = backend.zeros(DType::F32, n * n)?;
        for &k in kernels {
            if !k.supports(&spec) {
                continue;
            }
            let secs = time_it(backend, Duration::from_secs_f64(min_seconds), 1, || {
                backend.gemm_with(k, &spec, &a, &b, &mut c)
            })?;
            rows.push(Row {
                kernel: k.name().to_string(),
                size: n,
                seconds: secs,
                rate: spec.flops()? as f64 / secs / 1e9,
                unit: "GFLOP/s",
            });
        }
    }
    Ok(rows)
}

/// The overhead-bound regime: time per dispatch of a tiny element-wise kernel
/// (`y = 1·x + 0`, 8 bytes of traffic per element) as the size grows.
///
/// Two rows per size:
/// - `submit_per_op`: every dispatch is its own command buffer and queue submission, as
///   each `Backend` op is. Flat at small sizes: that flat part is pure overhead.
/// - `one_submission`: `dispatches` dispatches recorded into one command buffer, the
///   cost a graph-capturing runtime pays.
///
/// Where the time starts to grow with the size, the op has become bandwidth-bound, and
/// GB/s approaches the device's memory bandwidth.
pub fn bench_overhead(
    backend: &WgpuBackend,
    sizes: &[usize],
    dispatches: usize,
    min_seconds: f64,
) -> Result<Vec<Row>> {
    let dispatches = dispatches.max(1);
    let mut rows = Vec::new();
    for &n in sizes {
        let x = backend.upload(&HostData::F32(pseudo_random(n, 3)))?;
        let mut y = backend.zeros(DType::F32, n)?;
        for (label, one) in [("submit_per_op", false), ("one_submission", true)] {
            let secs = time_it(backend, Duration::from_secs_f64(min_seconds), 1, || {
                backend.enqueue_elementwise(&x, &mut y, dispatches, one)
            })? / dispatches as f64;
            rows.push(Row {
                kernel: label.to_string(),
                size: n,
                seconds: secs,
                rate: (8 * n) as f64 / secs / 1e9,
                unit: "GB/s",
            });
        }
    }
    Ok(rows)
}

/// Where the overhead-bound regime ends for one `kernel` of [`bench_overhead`]'s rows: the
/// smallest size whose time per dispatch is at least twice the smallest time measured
/// (the fixed cost of a dispatch). Below it, making the op bigger is free; above it, time
/// grows with the bytes moved. `None` if no size got there.
pub fn overhead_crossover(rows: &[Row], kernel: &str) -> Option<usize> {
    let mine: Vec<&Row> = rows.iter().filter(|r| r.kernel == kernel).collect();
    let floor = mine.iter().map(|r| r.seconds).fold(f64::INFINITY, f64::min);
    let mut sizes: Vec<&Row> = mine
        .into_iter()
        .filter(|r| r.seconds >= 2.0 * floor)
        .collect();
    sizes.sort_by_key(|r| r.size);
    sizes.first().map(|r| r.size)
}

/// Default sizes for [`bench_gemm`]: powers of two from 64 to 1024.
pub const GEMM_SIZES: [usize; 5] = [64, 128, 256, 512, 1024];
/// Default sizes for [`bench_overhead`]: 1 element to 16M elements, ×16 steps.
pub const OVERHEAD_SIZES: [usize; 7] = [1, 16, 256, 4096, 65536, 1 << 20, 1 << 24];

/// Seconds per upload of `size` u32 elements (a batch of token ids is 4 bytes a token)
/// by each [`UploadPath`](crate::UploadPath), as a training step does them: two uploads
/// (ids, targets), then a wait for the device. Rows `upload direct`/`upload staged` make a
/// new buffer each time ([`Backend::upload`]); `write direct`/`write staged` refill an
/// existing one ([`Backend::write`]). The rate is host-to-device GB/s.
pub fn bench_upload(backend: &WgpuBackend, sizes: &[usize], min_seconds: f64) -> Result<Vec<Row>> {
    let min = Duration::from_secs_f64(min_seconds);
    let mut rows = Vec::new();
    for &n in sizes {
        let data = HostData::U32(
            (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761))
                .collect(),
        );
        for path in [crate::UploadPath::Direct, crate::UploadPath::Staged] {
            let b = backend.with_upload_path(path);
            let name = format!("{path:?}").to_lowercase();
            let secs = time_it(&b, min, 3, || {
                let _ids = b.upload(&data)?;
                let _targets = b.upload(&data)?;
                Ok(())
            })? / 2.0;
            rows.push(upload_row(format!("upload {name}"), n, secs));
            let (mut x, mut y) = (b.alloc(DType::U32, n)?, b.alloc(DType::U32, n)?);
            let secs = time_it(&b, min, 3, || {
                b.write(&mut x, &data)?;
                b.write(&mut y, &data)
            })? / 2.0;
            rows.push(upload_row(format!("write {name}"), n, secs));
        }
    }
    Ok(rows)
}

/// The reductions of a training step whose outputs are few, f32, each timed with the
/// one-pass kernel and with what [`Backend::reduce`] runs (split into partial results
/// and a fixed-order final pass): a bias gradient's column sum (`rows` x `cols` down to
/// `cols`) and one long row's sum (`long_row` elements down to one, as a gradient norm
/// sums). Rows `... one pass` and `... split`; the rate is GB/s of input read once.
pub fn bench_reduce(
    backend: &WgpuBackend,
    [rows, cols]: [usize; 2],
    long_row: usize,
    min_seconds: f64,
) -> Result<Vec<Row>> {
    let min = Duration::from_secs_f64(min_seconds);
    let code = crate::ops::reduce_code(ReduceOp::Sum);
    let mut out_rows = Vec::new();
    for (what, dims) in [
        ("column sum", [1, rows, cols]),
        ("row sum", [1, long_row, 1]),
    ] {
        let n: usize = dims.iter().product();
        let x = backend.upload(&HostData::F32(pseudo_random(n, 4)))?;
        let outs = dims[0] * dims[2];
        let mut out = backend.zeros(DType::F32, outs)?;
        let one = time_it(backend, min, 3, || {
            backend.reduce_one_pass(code, &x.buf, dims, &out.buf)
        })?;
        let split = time_it(backend, min, 3, || {
            backend.reduce(ReduceOp::Sum, &x, dims[0], dims[1], dims[2], &mut out)
        })?;
        for (how, seconds) in [("one pass", one), ("split", split)] {
            out_rows.push(Row {
                kernel: format!("{what} {how}"),
                size: n,
                seconds,
                rate: (4 * n) as f64 / seconds / 1e9,
                unit: "GB/s",
            });
        }
    }
    Ok(out_rows)
}

fn upload_row(kernel: String, n: usize, seconds: f64) -> Row {
    Row {
        kernel,
        size: n,
        seconds,
        rate: (4 * n) as f64 / seconds / 1e9,
        unit: "GB/s",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kernel: &str, size: usize, seconds: f64) -> Row {
        Row {
            kernel: kernel.into(),
            size,
            seconds,
            rate: 0.0,
            unit: "GB/s",
        }
    }

    #[test]
    fn crossover_is_where_time_doubles() {
        let rows = vec![
            row("a", 1, 30e-6),
            row("a", 256, 31e-6),
            row("a", 4096, 70e-6),
            row("a", 65536, 400e-6),
            row("b", 1, 1.0),
        ];
        assert_eq!(overhead_crossover(&rows, "a"), Some(4096));
        assert_eq!(overhead_crossover(&rows, "b"), None);
        assert_eq!(overhead_crossover(&rows, "c"), None);
    }
}
