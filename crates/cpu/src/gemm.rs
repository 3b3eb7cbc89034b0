//! Batched GEMM through the `gemm` crate.
//!
//! # Why this crate, and why `x86-v4`
//!
//! Measured on the development machine (2 cores of an AMD EPYC with AVX-512, rustc
//! 1.95, `--release`), square fp32 `C = A·B`, GFLOP/s, best of several runs, in one
//! session next to OpenBLAS through numpy:
//!
//! | n    | gemm 0.19 default (AVX2) | gemm 0.19 `x86-v4` (AVX-512) | matrixmultiply 0.3 (threading) | OpenBLAS |
//! |------|------|------|------|------|
//! | 256  | 109 | 147 | 158 | 163 |
//! | 512  | 114 | 229 | 136 | 264 |
//! | 1024 | 98  | 195 | 170 | 294 |
//! | 2048 | 105 | 198 | 161 | 307 |
//!
//! (See the crate's README for the final table; the machine was shared with other
//! builds while measuring, so absolute numbers wobble by ±20%.) `gemm` with `x86-v4`
//! is the fastest pure-Rust option, it takes arbitrary row and column strides (so
//! transposed operands need no copy), it has f64 kernels, it runs on wasm32, and its
//! kernels are chosen at run time, so the binary still runs on CPUs without AVX-512.
//!
//! # Dtypes
//!
//! f32 and f64 call `gemm` directly. f16 and bf16 operands are widened to f32, the
//! product runs in the f32 kernels and C is rounded back once: `gemm`'s own f16 path
//! measured slower (≈ 130 vs ≈ 200 GFLOP/s at n = 1024, the conversions being O(n²)
//! next to O(n³) work) and accumulates in f16 on some ARM CPUs, while the trait asks
//! for f32 accumulation everywhere.
//!
//! # Threads
//!
//! One big product uses `gemm`'s own rayon parallelism (it splits the output into
//! blocks and decides from the size whether threads pay). A batch of small products
//! (attention: `batch × heads` matrices of `seq × seq`) runs one product per task
//! instead, which avoids a fork-join per matrix.

use crate::check;
use crate::par;
use brrr_backend::{Error, GemmSpec, HostData, Result};
use half::slice::HalfFloatSliceExt;

/// Below this many flops per matrix a batch is spread over threads one matrix per
/// task; above it each matrix is itself split by `gemm`.
const SMALL_GEMM_FLOPS: usize = 1 << 23;

pub(crate) fn gemm(spec: &GemmSpec, a: &HostData, b: &HostData, c: &mut HostData) -> Result<()> {
    const OP: &str = "gemm";
    let (need_a, need_b, need_c) = required_lens(spec)?;
    check::len(OP, a, need_a)?;
    check::len(OP, b, need_b)?;
    check::len(OP, c, need_c)?;
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
            batched(spec, &a[..need_a], &b[..need_b], &mut c[..need_c]);
        }
        (HostData::F64(a), HostData::F64(b), HostData::F64(c)) => {
            batched(spec, &a[..need_a], &b[..need_b], &mut c[..need_c]);
        }
        (HostData::F16(a), HostData::F16(b), HostData::F16(c)) => {
            let mut cf = vec![0f32; need_c];
            if spec.beta != 0.0 {
                c[..need_c].convert_to_f32_slice(&mut cf);
            }
            batched(
                spec,
                &a[..need_a].to_f32_vec(),
                &b[..need_b].to_f32_vec(),
                &mut cf,
            );
            store_blocks(spec, &cf, &mut c[..need_c], |s, d| {
                d.convert_from_f32_slice(s)
            });
        }
        (HostData::BF16(a), HostData::BF16(b), HostData::BF16(c)) => {
            let mut cf = vec![0f32; need_c];
            if spec.beta != 0.0 {
                c[..need_c].convert_to_f32_slice(&mut cf);
            }
            batched(
                spec,
                &a[..need_a].to_f32_vec(),
                &b[..need_b].to_f32_vec(),
                &mut cf,
            );
            store_blocks(spec, &cf, &mut c[..need_c], |s, d| {
                d.convert_from_f32_slice(s)
            });
        }
        (a, b, c) => return Err(check::dtype_error(OP, &[c, a, b])),
    }
    Ok(())
}

/// The lengths A, B and C must have, computed without overflow (the spec comes from the
/// caller and a wrapped product would pass the length checks).
fn required_lens(spec: &GemmSpec) -> Result<(usize, usize, usize)> {
    const OP: &str = "gemm";
    let need = |stride: usize, rows: usize, cols: usize| -> Result<usize> {
        let size = check::mul(OP, rows, cols)?;
        if spec.batch == 0 || size == 0 {
            return Ok(0);
        }
        check::mul(OP, spec.batch - 1, stride)?
            .checked_add(size)
            .ok_or_else(|| Error::invalid(OP, "operand extent overflows usize"))
    };
    Ok((
        need(spec.stride_a, spec.m, spec.k)?,
        need(spec.stride_b, spec.k, spec.n)?,
        need(spec.stride_c, spec.m, spec.n)?,
    ))
}

/// Writes the `batch` result blocks of `src` (f32) into `dst` (f16/bf16), leaving any
/// gap between blocks (`stride_c > m·n`) untouched.
fn store_blocks<D>(
    spec: &GemmSpec,
    src: &[f32],
    dst: &mut [D],
    convert: impl Fn(&[f32], &mut [D]),
) {
    let size = spec.m * spec.n;
    if size == 0 {
        return;
    }
    for i in 0..spec.batch {
        let o = i * spec.stride_c;
        convert(&src[o..o + size], &mut dst[o..o + size]);
    }
}

/// The scalar types `gemm` has kernels for that we call it with.
trait GemmScalar: Copy + Send + Sync + 'static {
    fn from_f32(x: f32) -> Self;
    fn zero() -> Self;
    fn mul(self, other: Self) -> Self;
}
impl GemmScalar for f32 {
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
fn batched<T: GemmScalar>(spec: &GemmSpec, a: &[T], b: &[T], c: &mut [T]) {
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
    let flops = 2 * m * n * k;
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
            );
        }
    }
}

/// `C = alpha·op(A)·op(B) + beta·C` for one matrix; the slices start at the matrix and
/// hold at least its elements.
fn one<T: GemmScalar>(spec: &GemmSpec, a: &[T], b: &[T], c: &mut [T], threaded: bool) {
    let (m, n, k) = (spec.m, spec.n, spec.k);
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // Row-major strides of op(A) (m × k) and op(B) (k × n): a transposed operand is
    // the same memory read with the strides swapped, so it costs no copy.
    let (a_rs, a_cs) = if spec.trans_a { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if spec.trans_b { (1, k) } else { (n, 1) };
    let parallelism = if threaded {
        big_parallelism()
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: `gemm` reads op(A)[i][p] at `a + i*a_rs + p*a_cs` for i < m, p < k, which
    // is below m·k for both layouts (likewise B below k·n, C below m·n with row stride
    // n); the asserts above guarantee the slices hold that much. C does not alias A or
    // B (it is a `&mut`).
    // Note the crate's convention: `dst = alpha·dst + beta·lhs·rhs`, i.e. its alpha is
    // our beta and its beta our alpha; with `read_dst = false` C is not read at all, so
    // beta = 0 overwrites C even if it held NaNs (the BLAS convention).
    unsafe {
        gemm::gemm(
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
fn big_parallelism() -> gemm::Parallelism {
    if par::threads() > 1 {
        gemm::Parallelism::Rayon(0) // 0 = rayon's current pool size
    } else {
        gemm::Parallelism::None
    }
}

#[cfg(target_arch = "wasm32")]
fn big_parallelism() -> gemm::Parallelism {
    gemm::Parallelism::None
}
