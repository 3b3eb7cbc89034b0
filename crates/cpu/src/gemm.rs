//! Batched GEMM through the [`gemm`](https://crates.io/crates/gemm) crate.
//!
//! # Why this crate, and why `x86-v4`
//!
//! Measured on the development machine (2 vCPUs of an AMD EPYC with AVX-512, rustc
//! 1.95, `--release`), square `C = A·B`, GFLOP/s, best of 3 rounds taken while the
//! machine was otherwise idle, all in the same session. Two threads everywhere
//! (`RAYON_NUM_THREADS=2`, `MATMUL_NUM_THREADS=2`, `OPENBLAS_NUM_THREADS=2`):
//!
//! | n    | gemm 0.19 default (AVX2) | gemm 0.19 `x86-v4` (AVX-512) | matrixmultiply 0.3 | OpenBLAS 0.3.31 (numpy 2.4) |
//! |------|-----|-----|-----|-----|
//! | 256  | 225 | 402 | 321 | 223 |
//! | 512  | 238 | 460 | 372 | 237 |
//! | 1024 | 242 | 477 | 382 | 244 |
//! | 2048 | 241 | 453 | 379 | 243 |
//!
//! and this backend through the trait (one idle run of `examples/bench.rs`, which also
//! times the other kernels at GPT-2-small sizes):
//!
//! | n    | f32 | f32 `A·Bᵀ` | bf16 | f16 | f64 |
//! |------|-----|-----|-----|-----|-----|
//! | 256  | 415 | 288 | 185 | 249 | 208 |
//! | 512  | 458 | 339 | 379 | 384 | 221 |
//! | 1024 | 482 | 393 | 409 | 406 | 216 |
//! | 2048 | 452 | 417 | 363 | 312 | 222 |
//!
//! (numpy's wheel ships OpenBLAS with its Haswell kernels selected on this CPU, hence
//! its AVX2-level numbers. Under load from other processes every column drops by half
//! or more, OpenBLAS most, since its threads spin.) `gemm` with `x86-v4` is the
//! fastest option measured, it takes arbitrary row and column strides (a transposed
//! operand is read in place, no copy), it has f64 kernels, it builds for wasm32, and
//! it picks its kernels at run time, so the binary still runs on CPUs without AVX-512.
//! Where AVX2 is the widest vector unit, brrr's own kernel (`sgemm.rs`) measured
//! 1.0–1.7× faster than the crate's AVX2 kernels, and [`crate::GemmKernel::for_this_cpu`]
//! picks it instead.
//!
//! # Dtypes
//!
//! f32 and f64 call `gemm` directly. f16 and bf16 operands are widened to f32, the
//! product runs in the f32 kernels and C is rounded back once: `gemm`'s own f16 path
//! measured slower (≈ 130 vs ≈ 200 GFLOP/s at n = 1024 in a side-by-side run under
//! load; the conversions are O(n²) next to O(n³) work) and on ARM CPUs with FP16 it
//! accumulates in f16, while the trait asks for f32 accumulation everywhere.
//!
//! An f32 C with f16/bf16 operands (mixed precision: a bf16 product accumulated into an
//! f32 gradient) takes the same route without the final rounding: the widened operands
//! multiply into C's f32 values directly.
//!
//! # Threads
//!
//! One big product uses `gemm`'s own rayon parallelism (it splits the output into
//! blocks and decides from the size whether threads pay). A batch of small products
//! (attention: `batch × heads` matrices of `seq × seq`) runs one product per task
//! instead, which avoids a fork-join per matrix.

use crate::GemmKernel;
use crate::check;
use crate::par;
use crate::scalar::Float;
use crate::sgemm;
use brrr_backend::{DType, Error, GemmSpec, HostData, Result};

/// Below this many flops per matrix a batch is spread over threads one matrix per
/// task; above it each matrix is itself split by `gemm`.
const SMALL_GEMM_FLOPS: usize = 1 << 23;

pub(crate) fn gemm(
    spec: &GemmSpec,
    a: &HostData,
    b: &HostData,
    c: &mut HostData,
    kernel: GemmKernel,
) -> Result<()> {
    const OP: &str = "gemm";
    let (ra, rb, rc) = spec.operand_ranges()?;
    check::len(OP, a, ra.end)?;
    check::len(OP, b, rb.end)?;
    check::len(OP, c, rc.end)?;
    if !spec.alpha.is_finite() || !spec.beta.is_finite() {
        return Err(Error::invalid(
            OP,
            format!(
                "alpha = {} and beta = {} must be finite",
                spec.alpha, spec.beta
            ),
        ));
    }
    match (a, b, &mut *c) {
        (HostData::F32(a), HostData::F32(b), HostData::F32(c)) => {
            batched(
                spec,
                &a[ra.clone()],
                &b[rb.clone()],
                &mut c[rc.clone()],
                kernel,
            );
        }
        (HostData::F64(a), HostData::F64(b), HostData::F64(c)) => {
            batched(
                spec,
                &a[ra.clone()],
                &b[rb.clone()],
                &mut c[rc.clone()],
                kernel,
            );
        }
        (HostData::F16(a), HostData::F16(b), HostData::F16(c)) => {
            via_f32(
                spec,
                &a[ra.clone()],
                &b[rb.clone()],
                &mut c[rc.clone()],
                kernel,
            );
        }
        (HostData::BF16(a), HostData::BF16(b), HostData::BF16(c)) => {
            via_f32(
                spec,
                &a[ra.clone()],
                &b[rb.clone()],
                &mut c[rc.clone()],
                kernel,
            );
        }
        // Mixed precision: 16-bit operands, f32 C (a gradient or master buffer). The
        // operands are widened exactly, and C is read and written in f32 directly.
        (HostData::F16(a), HostData::F16(b), HostData::F32(c)) => {
            batched(
                spec,
                &widen(&a[ra.clone()]),
                &widen(&b[rb.clone()]),
                &mut c[rc.clone()],
                kernel,
            );
        }
        (HostData::BF16(a), HostData::BF16(b), HostData::F32(c)) => {
            batched(
                spec,
                &widen(&a[ra.clone()]),
                &widen(&b[rb.clone()]),
                &mut c[rc.clone()],
                kernel,
            );
        }
        (a, b, c) => {
            if a.dtype() == b.dtype() && c.dtype() == DType::F32 && a.dtype().is_float() {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "an f32 C takes f16 or bf16 operands (or f32), got {}",
                        a.dtype()
                    ),
                ));
            }
            return Err(check::dtype_error(OP, &[c, a, b]));
        }
    }
    Ok(())
}

/// Elements per task when converting operands (a memory-bound loop).
const CONVERT_TASK: usize = 1 << 16;

/// f16/bf16: widen A, B (and C when it is read) to f32, multiply in f32, and round the
/// result blocks back once. Gaps between C's matrices (`stride_c > m·n`) are left as
/// they were.
fn via_f32<T: Float<C = f32>>(spec: &GemmSpec, a: &[T], b: &[T], c: &mut [T], kernel: GemmKernel) {
    let mut cf = vec![0f32; c.len()];
    if spec.beta != 0.0 {
        convert(c, &mut cf, T::load_slice);
    }
    batched(spec, &widen(a), &widen(b), &mut cf, kernel);
    let size = spec.m * spec.n;
    if size == 0 {
        return;
    }
    for i in 0..spec.batch {
        let o = i * spec.stride_c;
        convert(&cf[o..o + size], &mut c[o..o + size], T::store_slice);
    }
}

fn widen<T: Float<C = f32>>(src: &[T]) -> Vec<f32> {
    let mut out = vec![0f32; src.len()];
    convert(src, &mut out, T::load_slice);
    out
}

/// `f(src chunk, dst chunk)` over equal-length slices, in parallel tasks.
fn convert<S: Sync, D: Send>(src: &[S], dst: &mut [D], f: impl Fn(&[S], &mut [D]) + Sync + Send) {
    par::run(par::chunks(dst, CONVERT_TASK), |t, d| {
        let start = t * CONVERT_TASK;
        f(&src[start..start + d.len()], d);
    });
}

/// The `gemm` crates' entry point for one scalar type (`gemm_f32::gemm::f32::get_gemm_fn`
/// and its f64 twin): `dst = alpha·dst + beta·lhs·rhs` over strided operands. The
/// arguments are m, n, k; dst, its column and row strides, whether to read it; lhs and
/// rhs likewise; alpha, beta; three conjugation flags; the parallelism.
pub(crate) type CrateGemm<T> = unsafe fn(
    usize,
    usize,
    usize,
    *mut T,
    isize,
    isize,
    bool,
    *const T,
    isize,
    isize,
    *const T,
    isize,
    isize,
    T,
    T,
    bool,
    bool,
    bool,
    gemm_common::Parallelism,
);

/// The scalar types `gemm` has kernels for that we call it with.
pub(crate) trait GemmScalar: Copy + Send + Sync + 'static {
    /// The `gemm` crates' kernel for this type (dispatched once on the CPU's features).
    fn crate_gemm() -> CrateGemm<Self>;
    fn from_f32(x: f32) -> Self;
    fn zero() -> Self;
    fn mul(self, other: Self) -> Self;
    /// Runs one product on brrr's own kernel (`sgemm.rs`) where there is one for this
    /// type and CPU; `false` if not (then the `gemm` crate runs it).
    fn own_kernel(
        spec: &GemmSpec,
        a: (&[Self], usize, usize),
        b: (&[Self], usize, usize),
        c: &mut [Self],
        threaded: bool,
    ) -> bool;
}
impl GemmScalar for f32 {
    fn crate_gemm() -> CrateGemm<f32> {
        gemm_f32::gemm::f32::get_gemm_fn()
    }
    fn own_kernel(
        spec: &GemmSpec,
        a: (&[f32], usize, usize),
        b: (&[f32], usize, usize),
        c: &mut [f32],
        threaded: bool,
    ) -> bool {
        if !sgemm::available() {
            return false;
        }
        let (a, a_rs, a_cs) = a;
        let (b, b_rs, b_cs) = b;
        sgemm::sgemm(
            spec.m,
            spec.n,
            spec.k,
            spec.alpha,
            sgemm::MatRef {
                data: a,
                rs: a_rs,
                cs: a_cs,
            },
            sgemm::MatRef {
                data: b,
                rs: b_rs,
                cs: b_cs,
            },
            spec.beta,
            c,
            spec.n,
            threaded,
        );
        true
    }
    fn from_f32(x: f32) -> Self {
        x
    }
    fn zero() -> Self {
        0.0
    }
    fn mul(self, other: Self) -> Self {
        self * other
    }
}
impl GemmScalar for f64 {
    fn crate_gemm() -> CrateGemm<f64> {
        gemm_f64::gemm::f64::get_gemm_fn()
    }
    fn own_kernel(
        _: &GemmSpec,
        _: (&[f64], usize, usize),
        _: (&[f64], usize, usize),
        _: &mut [f64],
        _: bool,
    ) -> bool {
        false
    }
    fn from_f32(x: f32) -> Self {
        f64::from(x)
    }
    fn zero() -> Self {
        0.0
    }
    fn mul(self, other: Self) -> Self {
        self * other
    }
}

/// Runs the batch on slices already checked to hold every matrix.
fn batched<T: GemmScalar>(spec: &GemmSpec, a: &[T], b: &[T], c: &mut [T], kernel: GemmKernel) {
    let (m, n, k) = (spec.m, spec.n, spec.k);
    if spec.batch == 0 || m == 0 || n == 0 {
        return;
    }
    let size_c = m * n;
    if k == 0 {
        // An empty sum: C = beta * C (and beta = 0 overwrites, NaNs included).
        let beta = T::from_f32(spec.beta);
        for i in 0..spec.batch {
            for x in &mut c[i * spec.stride_c..i * spec.stride_c + size_c] {
                *x = if spec.beta == 0.0 {
                    T::zero()
                } else {
                    x.mul(beta)
                };
            }
        }
        return;
    }
    let flops = m.saturating_mul(n).saturating_mul(k).saturating_mul(2);
    let disjoint = spec.stride_c >= size_c;
    if spec.batch > 1 && disjoint && par::threads() > 1 && flops < SMALL_GEMM_FLOPS {
        // One task per matrix (or a few small ones per task).
        let per_task =
            (SMALL_GEMM_FLOPS / flops.max(1)).clamp(1, spec.batch.div_ceil(par::threads()));
        let chunk = spec.stride_c * per_task;
        par::run(par::chunks(c, chunk), |t, cs| {
            for j in 0..cs.len().div_ceil(spec.stride_c) {
                let i = t * per_task + j;
                let cj = &mut cs[j * spec.stride_c..];
                one(
                    spec,
                    &a[i * spec.stride_a..],
                    &b[i * spec.stride_b..],
                    cj,
                    false,
                    kernel,
                );
            }
        });
    } else {
        // In order: big matrices are split by `gemm` itself, and a C shared by the whole
        // batch (`stride_c < m·n`, e.g. 0 to sum the products with beta = 1) is then
        // updated one product after another, as the sequential definition says.
        for i in 0..spec.batch {
            let ci = &mut c[i * spec.stride_c..];
            one(
                spec,
                &a[i * spec.stride_a..],
                &b[i * spec.stride_b..],
                ci,
                true,
                kernel,
            );
        }
    }
}

/// `C = alpha·op(A)·op(B) + beta·C` for one matrix; the slices start at the matrix and
/// hold at least its elements.
fn one<T: GemmScalar>(
    spec: &GemmSpec,
    a: &[T],
    b: &[T],
    c: &mut [T],
    threaded: bool,
    kernel: GemmKernel,
) {
    let (m, n, k) = (spec.m, spec.n, spec.k);
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // Row-major strides of op(A) (m × k) and op(B) (k × n): a transposed operand is
    // the same memory read with the strides swapped, so it costs no copy.
    let (a_rs, a_cs) = if spec.trans_a { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if spec.trans_b { (1, k) } else { (n, 1) };
    if kernel == GemmKernel::Own
        && T::own_kernel(spec, (a, a_rs, a_cs), (b, b_rs, b_cs), c, threaded)
    {
        return;
    }
    let parallelism = if threaded {
        big_parallelism()
    } else {
        gemm_common::Parallelism::None
    };
    // SAFETY: `gemm` reads op(A)[i][p] at `a + i*a_rs + p*a_cs` for i < m, p < k, which
    // is below m·k for both layouts (likewise B below k·n, C below m·n with row stride
    // n); the asserts above guarantee the slices hold that much. C does not alias A or
    // B (it is a `&mut`).
    // Note the crate's convention: `dst = alpha·dst + beta·lhs·rhs`, i.e. its alpha is
    // our beta and its beta our alpha; with `read_dst = false` C is not read at all, so
    // beta = 0 overwrites C even if it held NaNs (the BLAS convention).
    unsafe {
        T::crate_gemm()(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            spec.beta != 0.0,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            T::from_f32(spec.beta),
            T::from_f32(spec.alpha),
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn big_parallelism() -> gemm_common::Parallelism {
    if par::threads() > 1 {
        gemm_common::Parallelism::Rayon(0) // 0 = rayon's current pool size
    } else {
        gemm_common::Parallelism::None
    }
}

#[cfg(target_arch = "wasm32")]
fn big_parallelism() -> gemm_common::Parallelism {
    gemm_common::Parallelism::None
}
