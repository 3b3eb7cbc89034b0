//! Benchmarks of the CUDA backend as data: rows of (name, dtype, size, seconds, rate).
//! Nothing here prints; `brrr bench` and `bench/cuda.sh` turn rows into tables.
//!
//! Times are device times between CUDA events around each repetition (so host overhead
//! between launches is not counted), the median over the repetitions after warm-up.
//!
//! - [`gemm`]: TFLOP/s (`2 n^3` flops) of cuBLAS, cuBLASLt and brrr's own kernels v1-v4
//!   for f32, TF32 and bf16, the issue's `4096^3` by default.
//! - [`bandwidth`]: GB/s of the memory-bound kernels (element-wise, softmax, LayerNorm,
//!   cross-entropy, casts, the attention head split's strided copy) next to a
//!   device-to-device copy, the practical ceiling. Bytes are the minimum traffic: every
//!   input read once, every output written once.
//! - [`reductions`]: GB/s of the reductions with few outputs (a bias gradient, a whole
//!   gradient's sum and sum of squares), one pass against the split or fused kernels.
//! - [`embedding`]: GB/s of the embedding backward (the scatter-add into the token
//!   table) on uniform and Zipf ids: v1 (a block per bucket), v2 (a warp per bucket) and
//!   v3 (v2 with runs of one row in registers), which the backend runs.
//! - [`upload`]: GB/s of a host-to-device upload through pinned staging.
//! - [`upload_overlap`]: whether that upload hides behind compute enqueued before it
//!   (the copy stream at work), against a write that must wait for the compute.

use crate::backend::EmbeddingBackward;
use crate::{CudaBackend, CudaBuffer, GemmImpl};
use brrr_backend::{
    Backend, BinaryOp, DType, EmbeddingSpec, Error, GemmSpec, HostData, LayerNormSpec, Layout,
    ReduceOp, Result, SoftmaxSpec, UnaryOp, block_on,
};

/// What a row measures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// 10^12 floating-point operations per second.
    TflopS(f64),
    /// 10^9 bytes per second.
    GbS(f64),
}

impl Rate {
    /// The number, in the unit of [`Rate::unit`].
    pub fn value(self) -> f64 {
        match self {
            Rate::TflopS(v) | Rate::GbS(v) => v,
        }
    }
    /// The unit as printed: `TFLOP/s` or `GB/s`.
    pub fn unit(self) -> &'static str {
        match self {
            Rate::TflopS(_) => "TFLOP/s",
            Rate::GbS(_) => "GB/s",
        }
    }
}

/// One measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRow {
    /// Implementation or kernel: `cublas`, `v4-tensor-core`, `copy d2d`, `softmax`, ...
    pub name: String,
    /// Data type; `tf32` rows are f32 data with TF32 tensor-core math (see `note`).
    pub dtype: DType,
    /// Problem size in words: `4096x4096x4096`, `64Mi elements`, `8192x768`.
    pub size: String,
    /// Median seconds per repetition.
    pub seconds: f64,
    /// Throughput from `seconds`: TFLOP/s for GEMM rows, GB/s of minimum traffic for
    /// the memory-bound rows.
    pub rate: Rate,
    /// The rate divided by the baseline row's (the copy for bandwidth rows, cuBLAS of the
    /// same dtype for GEMM rows), when there is one.
    pub fraction_of_baseline: Option<f64>,
    /// Anything a reader must know: `tf32`, `ran v3 (v4 not eligible)`, ...
    pub note: String,
}

/// Settings of [`gemm`].
#[derive(Clone, Debug)]
pub struct GemmBench {
    /// m = n = k.
    pub n: usize,
    /// Implementations to time; own kernels that do not support a dtype are skipped.
    pub impls: Vec<GemmImpl>,
    /// (dtype, tf32): f32 without and with TF32, bf16, ...
    pub dtypes: Vec<(DType, bool)>,
    /// Untimed repetitions per row before timing (kernel loading, clocks, caches).
    pub warmup: usize,
    /// Timed repetitions per row, of which the median is reported; 0 counts as 1.
    pub reps: usize,
    /// Stop repeating a row after this much device time (the naive kernel is slow).
    pub max_seconds_per_row: f64,
}

impl Default for GemmBench {
    fn default() -> Self {
        GemmBench {
            n: 4096,
            impls: GemmImpl::ALL.to_vec(),
            dtypes: vec![
                (DType::F32, false),
                (DType::F32, true),
                (DType::BF16, false),
            ],
            warmup: 2,
            reps: 10,
            max_seconds_per_row: 3.0,
        }
    }
}

/// One step of the benchmarks' generator: Knuth's MMIX LCG. Fast, so that filling
/// 4096^2 matrices costs little host time; the high bits are the useful ones.
fn lcg_next(s: &mut u64) -> u64 {
    *s = s
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *s
}

/// A uniform draw in [0, 1) from the generator's top 53 bits.
fn lcg_unit(s: &mut u64) -> f64 {
    (lcg_next(s) >> 11) as f64 / (1u64 << 53) as f64
}

/// Deterministic pseudo-random values in [-1, 1) ([`lcg_next`]). Random data keeps the
/// tensor cores' power (and clock) realistic, which all-zero inputs would not.
fn pseudo_random(dtype: DType, len: usize, seed: u64) -> HostData {
    let mut s = seed;
    lcg_next(&mut s);
    let v: Vec<f64> = (0..len).map(|_| lcg_unit(&mut s) * 2.0 - 1.0).collect();
    HostData::from_f64(dtype, &v)
}

/// Times `f` (which enqueues one repetition): `warmup` untimed runs, then up to `reps`
/// timed ones (fewer if `max_seconds` of device time is exceeded); the median.
fn time_reps(
    cuda: &CudaBackend,
    warmup: usize,
    reps: usize,
    max_seconds: f64,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    cuda.synchronize_blocking()?;
    let mut times = Vec::with_capacity(reps);
    let mut total = 0.0;
    for _ in 0..reps.max(1) {
        let t = cuda.time(&mut f)?;
        times.push(t);
        total += t;
        if total > max_seconds {
            break;
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn own_supports(which: GemmImpl, dtype: DType) -> bool {
    match which {
        GemmImpl::V4TensorCore => matches!(dtype, DType::F16 | DType::BF16),
        _ => true,
    }
}

/// GEMM throughput: one row per (dtype, implementation). cuBLAS rows come first for each
/// dtype and are the baseline of the others.
pub fn gemm(cuda: &CudaBackend, cfg: &GemmBench) -> Result<Vec<BenchRow>> {
    let n = cfg.n;
    let spec = GemmSpec::new(n, n, n);
    let flops = spec.flops()? as f64;
    let tf32_before = cuda.allow_tf32();
    let mut rows = Vec::new();
    for &(dtype, tf32) in &cfg.dtypes {
        let a = cuda.upload(&pseudo_random(dtype, n * n, 1))?;
        let b = cuda.upload(&pseudo_random(dtype, n * n, 2))?;
        let mut c = cuda.zeros(dtype, n * n)?;
        cuda.set_allow_tf32(tf32);
        let mut baseline = None;
        let mut impls = cfg.impls.clone();
        impls.sort_by_key(|g| *g != GemmImpl::Cublas);
        for &which in &impls {
            // TF32 is a cuBLAS math mode; the own kernels compute f32 exactly, so they
            // appear in the f32 rows only.
            if tf32 && !matches!(which, GemmImpl::Cublas | GemmImpl::CublasLt) {
                continue;
            }
            if !own_supports(which, dtype) {
                continue;
            }
            let mut ran = which;
            let result = time_reps(cuda, cfg.warmup, cfg.reps, cfg.max_seconds_per_row, || {
                ran = cuda.gemm_with(which, &spec, &a, &b, &mut c)?;
                Ok(())
            });
            let seconds = match result {
                Ok(s) => s,
                Err(e) => {
                    cuda.set_allow_tf32(tf32_before);
                    return Err(e);
                }
            };
            let tflops = flops / seconds / 1e12;
            if which == GemmImpl::Cublas {
                baseline = Some(tflops);
            }
            let mut note = Vec::new();
            if tf32 {
                note.push("tf32".to_string());
            }
            if ran != which {
                note.push(format!("ran {ran}"));
            }
            rows.push(BenchRow {
                name: which.name().to_string(),
                dtype,
                size: format!("{n}x{n}x{n}"),
                seconds,
                rate: Rate::TflopS(tflops),
                fraction_of_baseline: baseline.map(|b| tflops / b),
                note: note.join(", "),
            });
        }
    }
    cuda.set_allow_tf32(tf32_before);
    Ok(rows)
}

/// Settings of [`bandwidth`].
#[derive(Clone, Debug)]
pub struct BandwidthBench {
    /// Elements per buffer for the element-wise kernels (64 Mi by default: 256 MiB of
    /// f32, far beyond any cache).
    pub elems: usize,
    /// Row length of the row-wise kernels (softmax, LayerNorm): the GPT-2 small shapes.
    /// The softmax row runs over `elems / softmax_cols` causal rows of this length.
    pub softmax_cols: usize,
    /// Row length of the LayerNorm rows and of the bias-broadcast add (`elems /
    /// layernorm_cols` rows); GPT-2 small's width, 768.
    pub layernorm_cols: usize,
    /// Vocabulary of the cross-entropy row (GPT-2's padded 50304).
    pub vocab: usize,
    /// The attention head split copied by the strided-copy row: a contiguous
    /// `[batch, seq, heads, head_dim]` into `[batch, heads, seq, head_dim]` (GPT-2
    /// small's 8 x 1024 x 12 x 64).
    pub head_split: [usize; 4],
    /// Data types to measure, one set of rows each.
    pub dtypes: Vec<DType>,
    /// Untimed repetitions per row before timing.
    pub warmup: usize,
    /// Timed repetitions per row, of which the median is reported.
    pub reps: usize,
}

impl Default for BandwidthBench {
    fn default() -> Self {
        BandwidthBench {
            elems: 64 << 20,
            softmax_cols: 1024,
            layernorm_cols: 768,
            vocab: 50304,
            head_split: [8, 1024, 12, 64],
            dtypes: vec![DType::F32, DType::BF16],
            warmup: 3,
            reps: 20,
        }
    }
}

fn elems_name(n: usize) -> String {
    if n.is_multiple_of(1 << 20) {
        format!("{}Mi elements", n >> 20)
    } else {
        format!("{n} elements")
    }
}

/// Appends a GB/s row; the first row pushed is the baseline of the later ones.
fn push_gbs(
    rows: &mut Vec<BenchRow>,
    name: &str,
    dtype: DType,
    size: String,
    seconds: f64,
    bytes: f64,
) {
    let gbs = bytes / seconds / 1e9;
    let base = rows.first().map(|r| r.rate.value());
    rows.push(BenchRow {
        name: name.to_string(),
        dtype,
        size,
        seconds,
        rate: Rate::GbS(gbs),
        fraction_of_baseline: base.map(|b| gbs / b),
        note: String::new(),
    });
}

/// Times one repetition of a bandwidth row (see [`time_reps`]).
type TimeFn<'a> = dyn Fn(&mut dyn FnMut() -> Result<()>) -> Result<f64> + 'a;

/// Memory bandwidth of the memory-bound kernels, and of a device-to-device copy as the
/// baseline (first row).
pub fn bandwidth(cuda: &CudaBackend, cfg: &BandwidthBench) -> Result<Vec<BenchRow>> {
    let mut rows: Vec<BenchRow> = Vec::new();
    let n = cfg.elems;
    let time = |f: &mut dyn FnMut() -> Result<()>| time_reps(cuda, cfg.warmup, cfg.reps, 5.0, f);

    // Baseline: cuMemcpyDtoD of n f32 (read n*4 bytes, write n*4 bytes).
    {
        let src = cuda.zeros(DType::F32, n)?;
        let mut dst = cuda.zeros(DType::F32, n)?;
        let l = Layout::contiguous([n]);
        let s = time(&mut || cuda.copy_strided(&src, &l, &mut dst, &l))?;
        push_gbs(
            &mut rows,
            "copy d2d",
            DType::F32,
            elems_name(n),
            s,
            8.0 * n as f64,
        );
    }
    for &dt in &cfg.dtypes {
        let x = cuda.upload(&pseudo_random(dt, n, 3))?;
        let mut out: CudaBuffer = cuda.zeros(dt, n)?;
        elementwise_rows(cuda, cfg, dt, &x, &mut out, &time, &mut rows)?;
        rowwise_rows(cuda, cfg, dt, &x, &mut out, &time, &mut rows)?;
        head_split_row(cuda, cfg.head_split, dt, &time, &mut rows)?;
    }
    Ok(rows)
}

/// The strided-copy row of [`bandwidth`]: attention's head split, a contiguous
/// `[b, t, h, d]` copied into `[b, h, t, d]` (a transpose of the middle axes; rows of
/// `d` contiguous on both sides, so 16-byte packs when `d` is whole packs).
fn head_split_row(
    cuda: &CudaBackend,
    [b, t, h, d]: [usize; 4],
    dt: DType,
    time: &TimeFn,
    rows: &mut Vec<BenchRow>,
) -> Result<()> {
    let n = b * t * h * d;
    let src = cuda.upload(&pseudo_random(dt, n, 12))?;
    let mut dst = cuda.zeros(dt, n)?;
    let src_view = Layout {
        shape: brrr_backend::Shape::new([b, h, t, d]),
        strides: vec![t * h * d, d, h * d, 1],
        offset: 0,
    };
    let dst_view = Layout::contiguous([b, h, t, d]);
    let s = time(&mut || cuda.copy_strided(&src, &src_view, &mut dst, &dst_view))?;
    let bytes = 2.0 * n as f64 * dt.size_in_bytes() as f64;
    let size = format!("{b}x{t}x{h}x{d}");
    push_gbs(rows, "copy_strided (head split)", dt, size, s, bytes);
    Ok(())
}

/// The element-wise rows of [`bandwidth`] for one dtype: add, exp, axpy, GELU, a
/// broadcast bias add and a cast.
fn elementwise_rows(
    cuda: &CudaBackend,
    cfg: &BandwidthBench,
    dt: DType,
    x: &CudaBuffer,
    out: &mut CudaBuffer,
    time: &TimeFn,
    rows: &mut Vec<BenchRow>,
) -> Result<()> {
    let n = cfg.elems;
    let es = dt.size_in_bytes() as f64;
    let nf = n as f64;
    let y = cuda.upload(&pseudo_random(dt, n, 4))?;
    let l = Layout::contiguous([n]);
    let s = time(&mut || cuda.binary(BinaryOp::Add, x, &l, &y, &l, out))?;
    push_gbs(rows, "add (a + b)", dt, elems_name(n), s, 3.0 * nf * es);
    let s = time(&mut || cuda.unary(UnaryOp::Exp, x, out))?;
    push_gbs(rows, "exp", dt, elems_name(n), s, 2.0 * nf * es);
    let s = time(&mut || cuda.axpy(0.5, x, out, None))?;
    push_gbs(rows, "axpy", dt, elems_name(n), s, 3.0 * nf * es);
    let s = time(&mut || cuda.gelu(x, out))?;
    push_gbs(rows, "gelu", dt, elems_name(n), s, 2.0 * nf * es);
    // A broadcast: bias add over rows of 768.
    let cols = cfg.layernorm_cols;
    let rws = n / cols;
    let bias = cuda.upload(&pseudo_random(dt, cols, 5))?;
    let shape = brrr_backend::Shape::new([rws, cols]);
    let lb = Layout::contiguous([cols]).broadcast_to("bench", &shape)?;
    let la = Layout::contiguous([rws, cols]);
    let s = time(&mut || cuda.binary(BinaryOp::Add, x, &la, &bias, &lb, out))?;
    let bytes = 2.0 * (rws * cols) as f64 * es;
    push_gbs(
        rows,
        "bias add (broadcast)",
        dt,
        format!("{rws}x{cols}"),
        s,
        bytes,
    );
    // Cast to the other 16/32-bit type.
    let other = if dt == DType::F32 {
        DType::BF16
    } else {
        DType::F32
    };
    let mut cast_out = cuda.zeros(other, n)?;
    let s = time(&mut || cuda.cast(x, &mut cast_out))?;
    let bytes = nf * (es + other.size_in_bytes() as f64);
    push_gbs(
        rows,
        &format!("cast to {other}"),
        dt,
        elems_name(n),
        s,
        bytes,
    );
    Ok(())
}

/// The row-wise rows of [`bandwidth`] for one dtype: causal softmax over attention-score
/// rows, LayerNorm, and cross-entropy over GPT-2-sized rows.
fn rowwise_rows(
    cuda: &CudaBackend,
    cfg: &BandwidthBench,
    dt: DType,
    x: &CudaBuffer,
    out: &mut CudaBuffer,
    time: &TimeFn,
    rows: &mut Vec<BenchRow>,
) -> Result<()> {
    let n = cfg.elems;
    let es = dt.size_in_bytes() as f64;
    let sc = cfg.softmax_cols;
    let spec = SoftmaxSpec {
        rows: n / sc,
        cols: sc,
        scale: 0.125,
        causal: true,
    };
    let s = time(&mut || cuda.softmax(&spec, x, out))?;
    let bytes = 2.0 * (spec.rows * sc) as f64 * es;
    push_gbs(
        rows,
        "softmax (causal)",
        dt,
        format!("{}x{sc}", n / sc),
        s,
        bytes,
    );
    let cols = cfg.layernorm_cols;
    let rws = n / cols;
    let lspec = LayerNormSpec {
        rows: rws,
        cols,
        eps: 1e-5,
        gamma_offset: 0,
        beta_offset: 0,
    };
    let gamma = cuda.upload(&pseudo_random(dt, cols, 6))?;
    let beta = cuda.upload(&pseudo_random(dt, cols, 5))?;
    let mut mean = cuda.zeros(DType::F32, rws)?;
    let mut rstd = cuda.zeros(DType::F32, rws)?;
    let s = time(&mut || cuda.layernorm(&lspec, x, &gamma, &beta, out, &mut mean, &mut rstd))?;
    let bytes = 2.0 * (rws * cols) as f64 * es;
    push_gbs(rows, "layernorm", dt, format!("{rws}x{cols}"), s, bytes);
    // Cross-entropy reads the logits once.
    let v = cfg.vocab;
    let ce_rows = (n / v).max(1);
    let targets = cuda.upload(&HostData::I32(
        (0..ce_rows as i32).map(|i| (i * 7919) % v as i32).collect(),
    ))?;
    let mut losses = cuda.zeros(DType::F32, ce_rows)?;
    let s = time(&mut || cuda.cross_entropy(x, &targets, v, &mut losses))?;
    let bytes = (ce_rows * v) as f64 * es;
    push_gbs(
        rows,
        "cross_entropy",
        dt,
        format!("{ce_rows}x{v}"),
        s,
        bytes,
    );
    Ok(())
}

/// Settings of [`reductions`].
#[derive(Clone, Debug)]
pub struct ReduceBench {
    /// A bias gradient: the sum over `bias_rows` rows (batch x sequence, 8 x 1024) of
    /// `bias_cols` columns (GPT-2 small's width).
    pub bias_rows: usize,
    /// Columns of the bias gradient: the number of outputs of that reduction.
    pub bias_cols: usize,
    /// One whole gradient summed: GPT-2 small's token embedding, 50304 x 768.
    pub long_row: usize,
    /// Data types to measure, one set of rows each.
    pub dtypes: Vec<DType>,
    /// Untimed repetitions per row before timing.
    pub warmup: usize,
    /// Timed repetitions per row, of which the median is reported.
    pub reps: usize,
}

impl Default for ReduceBench {
    fn default() -> Self {
        ReduceBench {
            bias_rows: 8192,
            bias_cols: 768,
            long_row: 50304 * 768,
            dtypes: vec![DType::F32, DType::BF16],
            warmup: 3,
            reps: 20,
        }
    }
}

/// The reductions of a training step whose outputs are few, each timed with the
/// one-pass kernel and with what the backend runs (the split into partial results, or
/// the fused sum of squares): a bias gradient's column sum, a whole gradient's sum, and
/// the gradient norm's sum of squares. GB/s count the data read once; each second row's
/// `fraction_of_baseline` is its speed over the row before it.
pub fn reductions(cuda: &CudaBackend, cfg: &ReduceBench) -> Result<Vec<BenchRow>> {
    let time = |f: &mut dyn FnMut() -> Result<()>| time_reps(cuda, cfg.warmup, cfg.reps, 5.0, f);
    let mut rows = Vec::new();
    let (br, bc, n) = (cfg.bias_rows, cfg.bias_cols, cfg.long_row);
    for &dt in &cfg.dtypes {
        let es = dt.size_in_bytes() as f64;
        let x = cuda.upload(&pseudo_random(dt, br * bc, 8))?;
        let long = cuda.upload(&pseudo_random(dt, n, 9))?;
        let mut out = cuda.zeros(dt, bc)?;
        let (px, pl, po) = (x.device_ptr(), long.device_ptr(), out.device_ptr());
        let one = time(&mut || cuda.reduce_one_pass(ReduceOp::Sum, dt, px, 1, br, bc, po))?;
        let split = time(&mut || cuda.reduce(ReduceOp::Sum, &x, 1, br, bc, &mut out))?;
        let size = format!("{br}x{bc} -> {bc}");
        let bytes = (br * bc) as f64 * es;
        push_pair(&mut rows, "column sum", dt, &size, bytes, [one, split]);
        let one = time(&mut || cuda.reduce_one_pass(ReduceOp::Sum, dt, pl, 1, n, 1, po))?;
        let split = time(&mut || cuda.reduce(ReduceOp::Sum, &long, 1, n, 1, &mut out))?;
        let size = format!("1x{n} -> 1");
        push_pair(&mut rows, "row sum", dt, &size, n as f64 * es, [one, split]);
        // Tensor::sum_squares without the fused op: widen to f32, square, sum.
        let mut sum = cuda.zeros(DType::F32, 1)?;
        let composite = time(&mut || {
            let mut sq = cuda.alloc(DType::F32, n)?;
            if dt == DType::F32 {
                cuda.unary(UnaryOp::Square, &long, &mut sq)?;
            } else {
                let mut wide = cuda.alloc(DType::F32, n)?;
                cuda.cast(&long, &mut wide)?;
                cuda.unary(UnaryOp::Square, &wide, &mut sq)?;
            }
            cuda.reduce(ReduceOp::Sum, &sq, 1, n, 1, &mut sum)
        })?;
        let fused = time(&mut || cuda.sum_squares(&long, 0, n, &mut sum))?;
        let size = format!("{n} -> 1");
        push_pair(
            &mut rows,
            "sum of squares",
            dt,
            &size,
            n as f64 * es,
            [composite, fused],
        );
    }
    Ok(rows)
}

/// Two rows of [`reductions`]: the baseline (one pass, or square + sum) and what runs.
fn push_pair(rows: &mut Vec<BenchRow>, what: &str, dt: DType, size: &str, bytes: f64, s: [f64; 2]) {
    let names = if what == "sum of squares" {
        ["square + sum", "fused"]
    } else {
        ["one pass", "split"]
    };
    for (i, (name, seconds)) in names.iter().zip(s).enumerate() {
        rows.push(BenchRow {
            name: format!("{what}, {name}"),
            dtype: dt,
            size: size.to_string(),
            seconds,
            rate: Rate::GbS(bytes / seconds / 1e9),
            fraction_of_baseline: Some(if i == 0 { 1.0 } else { s[0] / seconds }),
            note: String::new(),
        });
    }
}

/// Settings of [`embedding`].
#[derive(Clone, Debug)]
pub struct EmbeddingBench {
    /// Token ids per call: batch x sequence, GPT-2's 8 x 1024.
    pub ids: usize,
    /// Row length: GPT-2 small's 768.
    pub dim: usize,
    /// Table rows: GPT-2's padded vocabulary, 50304.
    pub rows: usize,
    /// Seed of the random ids (uniform over the table).
    pub seed: u64,
    /// Data types of the table and gradient, one set of rows each.
    pub dtypes: Vec<DType>,
    /// Untimed repetitions per row before timing.
    pub warmup: usize,
    /// Timed repetitions per row, of which the median is reported.
    pub reps: usize,
}

impl Default for EmbeddingBench {
    fn default() -> Self {
        EmbeddingBench {
            ids: 8192,
            dim: 768,
            rows: 50304,
            seed: 17,
            dtypes: vec![DType::F32, DType::BF16],
            warmup: 3,
            reps: 20,
        }
    }
}

/// `n` seeded pseudo-random ids below `rows` ([`lcg_next`]'s high bits).
fn random_ids(n: usize, rows: usize, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|_| ((lcg_next(&mut s) >> 33) % rows.max(1) as u64) as u32)
        .collect()
}

/// The embedding backward (`dtable[ids[i]] += dout[i]`) with uniform and with
/// Zipf-distributed (text-like) ids, timed with the v1 kernel (a block per bucket of
/// rows, every thread scanning every id), v2 (a warp per bucket, a ballot per 32 ids)
/// and v3 (v2 with each run of one row's ids added in registers), which the backend
/// runs. GB/s count the minimum traffic: the ids and `dout` read once, each distinct
/// table row read and written once. Each row's `fraction_of_baseline` is its speed over
/// v1. Before timing, one call of each on the same table must give v1's bits (all add in
/// the order of the ids); an `Err` says where they differ.
pub fn embedding(cuda: &CudaBackend, cfg: &EmbeddingBench) -> Result<Vec<BenchRow>> {
    let uniform = random_ids(cfg.ids, cfg.rows, cfg.seed);
    let zipf = zipf_ids(cfg.ids, cfg.rows, cfg.seed);
    let mut out = Vec::new();
    for (label, host_ids) in [("uniform ids", uniform), ("Zipf ids", zipf)] {
        out.extend(embedding_rows(cuda, cfg, label, host_ids)?);
    }
    Ok(out)
}

/// [`embedding`]'s rows for one set of ids: per dtype v1, then v2 and v3 against it.
fn embedding_rows(
    cuda: &CudaBackend,
    cfg: &EmbeddingBench,
    label: &str,
    host_ids: Vec<u32>,
) -> Result<Vec<BenchRow>> {
    let mut distinct = host_ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let ids = cuda.upload(&HostData::U32(host_ids))?;
    let mut out = Vec::new();
    for &dt in &cfg.dtypes {
        out.extend(embedding_versions(
            cuda,
            cfg,
            label,
            &ids,
            distinct.len(),
            dt,
        )?);
    }
    Ok(out)
}

/// Every version of the embedding backward on the same ids and `dout` in `dt`: one call
/// of each must give v1's bits, then each is timed on its own table.
fn embedding_versions(
    cuda: &CudaBackend,
    cfg: &EmbeddingBench,
    label: &str,
    ids: &CudaBuffer,
    distinct: usize,
    dt: DType,
) -> Result<Vec<BenchRow>> {
    let (n, dim, rows) = (cfg.ids, cfg.dim, cfg.rows);
    let spec = EmbeddingSpec::new(dim);
    let dout = cuda.upload(&pseudo_random(dt, n * dim, 10))?;
    let table = pseudo_random(dt, rows * dim, 11);
    let versions = [
        ("v1 block", EmbeddingBackward::V1Block),
        ("v2 warp", EmbeddingBackward::V2Warp),
        ("v3 runs", EmbeddingBackward::V3Runs),
    ];
    let mut tables = Vec::with_capacity(versions.len());
    let mut reference: Option<HostData> = None;
    for (name, which) in versions {
        let mut dtable = cuda.upload(&table)?;
        cuda.embedding_backward_with(which, &spec, ids, &dout, &mut dtable)?;
        let once = block_on(cuda.read(&dtable))?;
        match &reference {
            Some(v1) if v1.as_bytes() != once.as_bytes() => {
                return Err(Error::invalid(
                    "bench embedding",
                    format!("{dt}, {label}: the {name} kernel's table differs from v1's"),
                ));
            }
            Some(_) => {}
            None => reference = Some(once),
        }
        tables.push(dtable);
    }
    let es = dt.size_in_bytes() as f64;
    let bytes = n as f64 * (4.0 + dim as f64 * es) + 2.0 * (distinct * dim) as f64 * es;
    let mut out = Vec::new();
    let mut v1 = 0.0;
    for ((name, which), dtable) in versions.into_iter().zip(tables.iter_mut()) {
        let seconds = time_reps(cuda, cfg.warmup, cfg.reps, 5.0, &mut || {
            cuda.embedding_backward_with(which, &spec, ids, &dout, dtable)
        })?;
        let first = which == EmbeddingBackward::V1Block;
        if first {
            v1 = seconds;
        }
        out.push(BenchRow {
            name: format!("emb. backward {name}"),
            dtype: dt,
            size: format!("{n}x{dim} -> {rows}"),
            seconds,
            rate: Rate::GbS(bytes / seconds / 1e9),
            fraction_of_baseline: Some(v1 / seconds),
            note: if first {
                label.to_string()
            } else {
                format!("{label}, bitwise equal to v1")
            },
        });
    }
    Ok(out)
}

/// `n` ids with Zipf's law over `rows` (the k-th most frequent id has probability
/// proportional to 1/k), the shape of a token distribution in text: the most frequent
/// id is about 1/ln(rows) of all (9% at 50304 rows), so many ids repeat one row. The id
/// is the rank (row 0 the most frequent). Inverse-CDF sampling with [`lcg_unit`].
fn zipf_ids(n: usize, rows: usize, seed: u64) -> Vec<u32> {
    let rows = rows.max(1);
    let mut cdf = Vec::with_capacity(rows);
    let mut total = 0.0f64;
    for k in 1..=rows {
        total += 1.0 / k as f64;
        cdf.push(total);
    }
    let mut s = seed.wrapping_add(0x2545_f491_4f6c_dd1d);
    (0..n)
        .map(|_| {
            let u = lcg_unit(&mut s) * total;
            cdf.partition_point(|&c| c < u).min(rows - 1) as u32
        })
        .collect()
}

/// Host wall time of `f` with the device idle before and drained after: `warmup`
/// untimed runs, then the median of `reps` (at least one). For work that includes host
/// steps (staging into pinned memory), which events on the compute stream would miss.
fn wall_time_reps(
    cuda: &CudaBackend,
    warmup: usize,
    reps: usize,
    f: &mut dyn FnMut() -> Result<()>,
) -> Result<f64> {
    let mut times = Vec::with_capacity(reps.max(1));
    for i in 0..warmup + reps.max(1) {
        cuda.synchronize_blocking()?;
        let t0 = std::time::Instant::now();
        f()?;
        cuda.synchronize_blocking()?;
        if i >= warmup {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Bytes per second of a plain host-to-device upload (pinned staging on the copy
/// stream), for `bytes` of data; device time of the whole upload, seconds and GB/s.
pub fn upload(cuda: &CudaBackend, bytes: usize, reps: usize) -> Result<BenchRow> {
    let data = pseudo_random(DType::F32, bytes / 4, 7);
    let mut buf = cuda.upload(&data)?;
    let seconds = wall_time_reps(cuda, 0, reps, &mut || cuda.write(&mut buf, &data))?;
    Ok(BenchRow {
        name: "upload (pinned staging)".into(),
        dtype: DType::F32,
        size: format!("{} MiB", bytes >> 20),
        seconds,
        rate: Rate::GbS(data.as_bytes().len() as f64 / seconds / 1e9),
        fraction_of_baseline: None,
        note: "host wall time, includes the host-side copy into pinned memory".into(),
    })
}

/// Settings of [`upload_overlap`].
#[derive(Clone, Debug)]
pub struct OverlapBench {
    /// m = n = k of the GEMMs that stand in for a training step's compute (f32, cuBLAS).
    pub gemm_n: usize,
    /// GEMMs enqueued per repetition.
    pub gemms: usize,
    /// Bytes uploaded per repetition (a batch, or a shard's worth of one).
    pub upload_bytes: usize,
    /// Untimed repetitions before timing.
    pub warmup: usize,
    /// Timed repetitions, of which the median is reported.
    pub reps: usize,
}

impl Default for OverlapBench {
    fn default() -> Self {
        // About 20 ms of f32 GEMMs on an H100 next to a 64 MiB upload (a few ms over
        // PCIe): the upload fits inside the compute, so it can hide entirely.
        OverlapBench {
            gemm_n: 4096,
            gemms: 8,
            upload_bytes: 64 << 20,
            warmup: 1,
            reps: 5,
        }
    }
}

/// The share of the upload that the overlapped run hid behind compute:
/// `(compute + upload - both) / upload`. 1 is fully hidden, 0 is one after the other
/// (it can fall below 0 when running both costs more than running each alone).
pub fn hidden_fraction(compute: f64, upload: f64, both: f64) -> f64 {
    if upload <= 0.0 {
        return 0.0;
    }
    (compute + upload - both) / upload
}

/// Whether a host-to-device upload hides behind compute: a training step's batch upload,
/// in miniature. Four rows, host wall time of each repetition (it includes the host's
/// copy into pinned staging, which is part of what must hide), the median:
///
/// 1. `compute`: `gemms` f32 GEMMs enqueued on the compute stream.
/// 2. `upload`: `upload_bytes` through [`Backend::upload`]: pinned staging, then an
///    asynchronous copy on the copy stream.
/// 3. `compute + upload`: the GEMMs enqueued, then the upload into a new buffer while they
///    run. The buffer's memory comes from the allocator's cache and was released before the
///    GEMMs were enqueued, so the copy waits for nothing and runs beside them.
/// 4. `compute + write`: the same bytes through [`Backend::write`] into an existing buffer.
///    A buffer that exists may still be read by enqueued kernels, so the copy waits for all
///    of them: the transfer is serialised after the compute, by design. Only the host's
///    staging still overlaps, until the four pinned slots (16 MiB) are full and waiting.
///
/// The `note` of rows 3 and 4 gives [`hidden_fraction`].
pub fn upload_overlap(cuda: &CudaBackend, cfg: &OverlapBench) -> Result<Vec<BenchRow>> {
    let n = cfg.gemm_n;
    let spec = GemmSpec::new(n, n, n);
    let flops = spec.flops()? as f64 * cfg.gemms as f64;
    let a = cuda.upload(&pseudo_random(DType::F32, n * n, 1))?;
    let b = cuda.upload(&pseudo_random(DType::F32, n * n, 2))?;
    let mut c = cuda.zeros(DType::F32, n * n)?;
    let data = pseudo_random(DType::F32, cfg.upload_bytes / 4, 7);
    let mut target = cuda.upload(&data)?;
    let tf32_before = cuda.allow_tf32();
    cuda.set_allow_tf32(false);
    let mut compute = || -> Result<()> {
        for _ in 0..cfg.gemms {
            cuda.gemm_with(GemmImpl::Cublas, &spec, &a, &b, &mut c)?;
        }
        Ok(())
    };
    let measure = |f: &mut dyn FnMut() -> Result<()>| wall_time_reps(cuda, cfg.warmup, cfg.reps, f);
    let result = (|| {
        let t_compute = measure(&mut || compute())?;
        // Each upload's buffer is dropped at once, so the next one reuses its block.
        let t_upload = measure(&mut || cuda.upload(&data).map(drop))?;
        let t_both = measure(&mut || {
            compute()?;
            cuda.upload(&data).map(drop)
        })?;
        let t_write = measure(&mut || {
            compute()?;
            cuda.write(&mut target, &data)
        })?;
        Ok([t_compute, t_upload, t_both, t_write])
    })();
    cuda.set_allow_tf32(tf32_before);
    Ok(overlap_rows(cfg, flops, result?))
}

/// The four rows of [`upload_overlap`] from its times (compute, upload, both, write).
fn overlap_rows(cfg: &OverlapBench, flops: f64, times: [f64; 4]) -> Vec<BenchRow> {
    let [t_compute, t_upload, t_both, t_write] = times;
    let n = cfg.gemm_n;
    let gemm_size = format!("{} x {n}^3", cfg.gemms);
    let up_size = format!("{} MiB", cfg.upload_bytes >> 20);
    let both_size = format!("{gemm_size} + {up_size}");
    let tflops = |s: f64| Rate::TflopS(flops / s / 1e12);
    let row = |name: &str, size: &str, seconds: f64, rate, frac, note: String| BenchRow {
        name: name.into(),
        dtype: DType::F32,
        size: size.into(),
        seconds,
        rate,
        fraction_of_baseline: frac,
        note,
    };
    let hidden = |both: f64| {
        format!(
            "{:.0}% of the upload hidden",
            100.0 * hidden_fraction(t_compute, t_upload, both)
        )
    };
    vec![
        row(
            "compute",
            &gemm_size,
            t_compute,
            tflops(t_compute),
            Some(1.0),
            "cuBLAS f32, TF32 off".into(),
        ),
        row(
            "upload",
            &up_size,
            t_upload,
            Rate::GbS(cfg.upload_bytes as f64 / t_upload / 1e9),
            None,
            "pinned staging, copy stream".into(),
        ),
        row(
            "compute + upload",
            &both_size,
            t_both,
            tflops(t_both),
            Some(t_compute / t_both),
            hidden(t_both),
        ),
        row(
            "compute + write",
            &both_size,
            t_write,
            tflops(t_write),
            Some(t_compute / t_write),
            hidden(t_write),
        ),
    ]
}
