//! Reductions over the middle axis of a contiguous `[outer, n, inner]` view.
//!
//! Sums accumulate in the compute type (f32, or f64 for f64 data). Along a contiguous
//! axis (`inner == 1`) they use 8 independent partial sums, which both vectorises and
//! keeps the rounding error closer to pairwise summation than one running sum does.
//! Max and min follow IEEE maxNum/minNum like `f64::max` (a NaN loses to a number),
//! matching `BinaryOp::apply`.

use crate::check;
use crate::par;
use crate::scalar::{self, Float, Real};
use brrr_backend::{ElemRange, Error, HostData, ReduceOp, Result};

pub(crate) fn reduce(
    op: ReduceOp,
    x: &HostData,
    outer: usize,
    n: usize,
    inner: usize,
    out: &mut HostData,
) -> Result<()> {
    const OP: &str = "reduce";
    let n_out = check::mul(OP, outer, inner)?;
    let n_x = check::mul(OP, n_out, n)?;
    check::len(OP, x, n_x)?;
    check::len(OP, out, n_out)?;
    if n == 0 && op != ReduceOp::Sum && n_out > 0 {
        return Err(Error::invalid(
            OP,
            format!("{op:?} over an empty axis (n = 0) is undefined"),
        ));
    }
    let dims = Dims { n, inner };
    match (x, &mut *out) {
        (HostData::F16(x), HostData::F16(o)) => reduce_typed(op, &x[..n_x], dims, &mut o[..n_out]),
        (HostData::BF16(x), HostData::BF16(o)) => {
            reduce_typed(op, &x[..n_x], dims, &mut o[..n_out])
        }
        (HostData::F32(x), HostData::F32(o)) => reduce_typed(op, &x[..n_x], dims, &mut o[..n_out]),
        (HostData::F64(x), HostData::F64(o)) => reduce_typed(op, &x[..n_x], dims, &mut o[..n_out]),
        (x, o) => return Err(check::dtype_error(OP, &[o, x])),
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Dims {
    n: usize,
    inner: usize,
}

fn reduce_typed<T: Float>(op: ReduceOp, x: &[T], d: Dims, out: &mut [T]) {
    if out.is_empty() {
        return;
    }
    if d.n == 0 {
        out.fill(T::store(T::C::ZERO)); // an empty sum
        return;
    }
    if d.inner == 1 {
        let per_task = par::rows_per_task(d.n);
        par::run(par::chunks(out, per_task), |t, out| {
            par::simd(
                #[inline(always)]
                || {
                    let (mut sx, mut so) = (Vec::new(), Vec::new());
                    scalar::store_with(
                        out,
                        &mut so,
                        #[inline(always)]
                        |out| {
                            for (j, o) in out.iter_mut().enumerate() {
                                let row = t * per_task + j;
                                let xs = scalar::load(&x[row * d.n..(row + 1) * d.n], &mut sx);
                                *o = reduce_row(op, xs);
                            }
                        },
                    );
                },
            );
        });
        return;
    }
    // Columns: each task owns a stretch of the flattened `[outer, inner]` output and
    // walks the `n` rows above it, adding whole rows (vectorised along `inner`).
    let width = (par::MIN_TASK_WORK / d.n).max(256);
    par::run(par::chunks(out, width), |t, out| {
        let start = t * width;
        par::simd(
            #[inline(always)]
            || {
                let (mut sx, mut acc) = (Vec::new(), Vec::new());
                let mut pos = start;
                let end = start + out.len();
                while pos < end {
                    let (o, i0) = (pos / d.inner, pos % d.inner);
                    let len = (d.inner - i0).min(end - pos);
                    let at = |r: usize| (o * d.n + r) * d.inner + i0;
                    acc.clear();
                    acc.extend_from_slice(scalar::load(&x[at(0)..at(0) + len], &mut sx));
                    for r in 1..d.n {
                        let xs = scalar::load(&x[at(r)..at(r) + len], &mut sx);
                        // One loop per op (not a match per element), so each vectorises.
                        match op {
                            ReduceOp::Sum | ReduceOp::Mean => {
                                for (a, &v) in acc.iter_mut().zip(xs) {
                                    *a += v;
                                }
                            }
                            ReduceOp::Max => {
                                for (a, &v) in acc.iter_mut().zip(xs) {
                                    *a = a.max(v);
                                }
                            }
                            ReduceOp::Min => {
                                for (a, &v) in acc.iter_mut().zip(xs) {
                                    *a = a.min(v);
                                }
                            }
                        }
                    }
                    if op == ReduceOp::Mean {
                        let n = T::C::from_usize(d.n);
                        for a in acc.iter_mut() {
                            *a = *a / n;
                        }
                    }
                    T::store_slice(&acc, &mut out[pos - start..pos - start + len]);
                    pos += len;
                }
            },
        );
    });
}

/// One contiguous row, `xs` non-empty.
#[inline(always)]
fn reduce_row<C: Real>(op: ReduceOp, xs: &[C]) -> C {
    match op {
        ReduceOp::Sum => sum(xs),
        ReduceOp::Mean => sum(xs) / C::from_usize(xs.len()),
        ReduceOp::Max => fold8(
            xs,
            xs[0],
            #[inline(always)]
            |a, b| a.max(b),
        ),
        ReduceOp::Min => fold8(
            xs,
            xs[0],
            #[inline(always)]
            |a, b| a.min(b),
        ),
    }
}

/// `out[0] = Σ x[offset..offset + len]²` in f32 (see `Backend::sum_squares`), in
/// [`sum`]'s order: element `i` of the range goes into accumulator `i % 8`, and the
/// eight are combined as [`fold8`] does. So the result is bitwise what squaring into a
/// temporary and summing it gives, without the temporary. 16-bit data is widened a
/// block at a time (a block is a multiple of 8 long, so the order is unchanged).
pub(crate) fn sum_squares(
    x: &HostData,
    offset: usize,
    len: usize,
    out: &mut HostData,
) -> Result<()> {
    const OP: &str = "sum_squares";
    let end = ElemRange::new(offset, len).end(OP)?;
    check::len(OP, x, end)?;
    let total = match x {
        HostData::F32(v) => sum_squares_typed(&v[offset..end]),
        HostData::F16(v) => sum_squares_typed(&v[offset..end]),
        HostData::BF16(v) => sum_squares_typed(&v[offset..end]),
        other => {
            return Err(Error::invalid(
                OP,
                format!("x must be f32, f16 or bf16, got {:?}", other.dtype()),
            ));
        }
    };
    check::f32s_mut(OP, out, 1)?[0] = total;
    Ok(())
}

fn sum_squares_typed<T: Float<C = f32>>(xs: &[T]) -> f32 {
    const BLOCK: usize = 8 * 512;
    par::simd(
        #[inline(always)]
        || {
            let mut acc = [0f32; 8];
            let mut wide = [0f32; BLOCK];
            for block in xs.chunks(BLOCK) {
                let ys: &[f32] = match T::as_compute(block) {
                    Some(ys) => ys,
                    None => {
                        T::load_slice(block, &mut wide[..block.len()]);
                        &wide[..block.len()]
                    }
                };
                // Only the last block can leave a remainder: BLOCK is a multiple of 8.
                let mut chunks = ys.chunks_exact(8);
                for c in &mut chunks {
                    for (a, &v) in acc.iter_mut().zip(c) {
                        *a += v * v;
                    }
                }
                for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
                    *a += v * v;
                }
            }
            let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
            ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
        },
    )
}

/// Sum with 8 independent accumulators (vectorises; error grows like n/8, not n).
#[inline(always)]
pub(crate) fn sum<C: Real>(xs: &[C]) -> C {
    fold8(
        xs,
        C::ZERO,
        #[inline(always)]
        |a, b| a + b,
    )
}

#[inline(always)]
fn fold8<C: Real>(xs: &[C], init: C, f: impl Fn(C, C) -> C) -> C {
    let mut acc = [init; 8];
    let mut chunks = xs.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = f(*a, v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a = f(*a, v);
    }
    let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
    f(f(f(a0, a1), f(a2, a3)), f(f(a4, a5), f(a6, a7)))
}

/// Largest element (maxNum: NaNs are skipped); `-inf` for an empty slice.
#[inline(always)]
pub(crate) fn max<C: Real>(xs: &[C]) -> C {
    fold8(
        xs,
        C::NEG_INFINITY,
        #[inline(always)]
        |a, b| a.max(b),
    )
}

/// `Σ a[i]·b[i]` with 8 partial sums.
#[inline(always)]
pub(crate) fn dot<C: Real>(a: &[C], b: &[C]) -> C {
    let mut acc = [C::ZERO; 8];
    let (mut ca, mut cb) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    for (i, (&x, &y)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
        acc[i] += x * y;
    }
    let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
    ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
}
