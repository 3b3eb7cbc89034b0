//! Element-wise kernels: unary functions, broadcasting binary ops, `axpy`, and the
//! block-wise helpers GELU also uses.
//!
//! Each task converts `BLOCK` elements at a time into the compute type (a no-op for
//! f32/f64), applies the function in a plain loop that the SIMD dispatch vectorises, and
//! stores the block back (one rounding for f16/bf16).

use crate::check;
use crate::par;
use crate::scalar::{self, Float, Real};
use crate::strided::{Walk, check_layout};
use brrr_backend::{BinaryOp, HostData, Layout, Result, UnaryOp};

/// Elements converted at a time: 4–8 KiB of f32/f64, so a block stays in L1.
const BLOCK: usize = 1024;
/// Elements per task (element-wise work is cheap, so tasks are large).
const TASK: usize = 1 << 16;

pub(crate) fn unary(op: UnaryOp, x: &HostData, out: &mut HostData) -> Result<()> {
    const OP: &str = "unary";
    let n = out.len();
    check::len(OP, x, n)?;
    match (x, &mut *out) {
        (HostData::F16(x), HostData::F16(o)) => unary_typed(op, &x[..n], o),
        (HostData::BF16(x), HostData::BF16(o)) => unary_typed(op, &x[..n], o),
        (HostData::F32(x), HostData::F32(o)) => unary_typed(op, &x[..n], o),
        (HostData::F64(x), HostData::F64(o)) => unary_typed(op, &x[..n], o),
        (x, o) => return Err(check::dtype_error(OP, &[o, x])),
    }
    Ok(())
}

/// One monomorphised loop per op: matching on `op` outside the loop lets each one
/// vectorise. The closures are `#[inline(always)]` because they run inside the SIMD
/// dispatch (see [`par::simd`]); a closure left out of line there would be compiled for
/// the baseline instruction set. (Kept one per line, hence `rustfmt::skip`.)
#[rustfmt::skip]
fn unary_typed<T: Float>(op: UnaryOp, x: &[T], out: &mut [T]) {
    let one = T::C::ONE;
    match op {
        UnaryOp::Neg => map1(x, out, #[inline(always)] |v| -v),
        UnaryOp::Exp => map1(x, out, #[inline(always)] |v| v.exp()),
        UnaryOp::Log => map1(x, out, #[inline(always)] |v| v.ln()),
        UnaryOp::Sqrt => map1(x, out, #[inline(always)] |v| v.sqrt()),
        UnaryOp::Rsqrt => map1(x, out, #[inline(always)] move |v| one / v.sqrt()),
        UnaryOp::Abs => map1(x, out, #[inline(always)] |v| v.abs()),
        UnaryOp::Square => map1(x, out, #[inline(always)] |v| v * v),
        UnaryOp::Recip => map1(x, out, #[inline(always)] move |v| one / v),
        UnaryOp::Relu => map1(x, out, #[inline(always)] |v| v.max(T::C::ZERO)),
        UnaryOp::Tanh => map1(x, out, #[inline(always)] |v| v.tanh()),
        UnaryOp::Sigmoid => map1(x, out, #[inline(always)] move |v| one / (one + (-v).exp())),
        UnaryOp::Affine { mul, add } => {
            let (mul, add) = (T::C::from_f32(mul), T::C::from_f32(add));
            map1(x, out, #[inline(always)] move |v| v * mul + add)
        }
        UnaryOp::Clamp { lo, hi } => {
            let (lo, hi) = (T::C::from_f32(lo), T::C::from_f32(hi));
            map1(x, out, #[inline(always)] move |v| v.max(lo).min(hi))
        }
    }
}

/// `out[i] = f(x[i])`; `x` and `out` have the same length.
pub(crate) fn map1<T: Float>(x: &[T], out: &mut [T], f: impl Fn(T::C) -> T::C + Sync + Send) {
    par::run(par::chunks(out, TASK), |t, out| {
        let x = &x[t * TASK..t * TASK + out.len()];
        par::simd(
            #[inline(always)]
            || {
                let (mut sx, mut so) = (Vec::new(), Vec::new());
                for (xb, ob) in x.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
                    let xs = scalar::load(xb, &mut sx);
                    scalar::store_with(
                        ob,
                        &mut so,
                        #[inline(always)]
                        |os| {
                            for (o, &v) in os.iter_mut().zip(xs) {
                                *o = f(v);
                            }
                        },
                    );
                }
            },
        );
    });
}

/// `out[i] = f(a[i], b[i])`; all three have the same length.
pub(crate) fn map2<T: Float>(
    a: &[T],
    b: &[T],
    out: &mut [T],
    f: impl Fn(T::C, T::C) -> T::C + Sync + Send,
) {
    par::run(par::chunks(out, TASK), |t, out| {
        let range = t * TASK..t * TASK + out.len();
        let (a, b) = (&a[range.clone()], &b[range]);
        par::simd(
            #[inline(always)]
            || {
                let (mut sa, mut sb, mut so) = (Vec::new(), Vec::new(), Vec::new());
                for ((ab, bb), ob) in a
                    .chunks(BLOCK)
                    .zip(b.chunks(BLOCK))
                    .zip(out.chunks_mut(BLOCK))
                {
                    let xa = scalar::load(ab, &mut sa);
                    let xb = scalar::load(bb, &mut sb);
                    scalar::store_with(
                        ob,
                        &mut so,
                        #[inline(always)]
                        |os| {
                            for ((o, &u), &v) in os.iter_mut().zip(xa).zip(xb) {
                                *o = f(u, v);
                            }
                        },
                    );
                }
            },
        );
    });
}

pub(crate) fn binary(
    op: BinaryOp,
    a: &HostData,
    a_layout: &Layout,
    b: &HostData,
    b_layout: &Layout,
    out: &mut HostData,
) -> Result<()> {
    const OP: &str = "binary";
    let shape = a_layout.shape.dims().to_vec();
    check_layout(OP, "a", a_layout, &shape, a.len())?;
    check_layout(OP, "b", b_layout, &shape, b.len())?;
    let n = a_layout.shape.elem_count();
    check::len(OP, out, n)?;
    match (a, b, &mut *out) {
        (HostData::F16(x), HostData::F16(y), HostData::F16(o)) => {
            binary_typed(op, x, a_layout, y, b_layout, &mut o[..n])
        }
        (HostData::BF16(x), HostData::BF16(y), HostData::BF16(o)) => {
            binary_typed(op, x, a_layout, y, b_layout, &mut o[..n])
        }
        (HostData::F32(x), HostData::F32(y), HostData::F32(o)) => {
            binary_typed(op, x, a_layout, y, b_layout, &mut o[..n])
        }
        (HostData::F64(x), HostData::F64(y), HostData::F64(o)) => {
            binary_typed(op, x, a_layout, y, b_layout, &mut o[..n])
        }
        (a, b, o) => return Err(check::dtype_error(OP, &[o, a, b])),
    }
    Ok(())
}

#[rustfmt::skip]
fn binary_typed<T: Float>(op: BinaryOp, a: &[T], al: &Layout, b: &[T], bl: &Layout, out: &mut [T]) {
    match op {
        BinaryOp::Add => broadcast2(a, al, b, bl, out, #[inline(always)] |x, y| x + y),
        BinaryOp::Sub => broadcast2(a, al, b, bl, out, #[inline(always)] |x, y| x - y),
        BinaryOp::Mul => broadcast2(a, al, b, bl, out, #[inline(always)] |x, y| x * y),
        BinaryOp::Div => broadcast2(a, al, b, bl, out, #[inline(always)] |x, y| x / y),
        BinaryOp::Max => broadcast2(a, al, b, bl, out, #[inline(always)] |x, y| x.max(y)),
        BinaryOp::Min => broadcast2(a, al, b, bl, out, #[inline(always)] |x, y| x.min(y)),
    }
}

/// `out = f(a, b)` over two strided views of `out`'s shape (checked by the caller).
fn broadcast2<T: Float>(
    a: &[T],
    al: &Layout,
    b: &[T],
    bl: &Layout,
    out: &mut [T],
    f: impl Fn(T::C, T::C) -> T::C + Sync + Send,
) {
    if out.is_empty() {
        return;
    }
    let walk = Walk::new([al, bl]);
    par::run(par::chunks(out, TASK), |t, out| {
        let start = t * TASK;
        par::simd(
            #[inline(always)]
            || {
                let (mut sa, mut sb, mut so) = (Vec::new(), Vec::new(), Vec::new());
                walk.runs(
                    start,
                    start + out.len(),
                    BLOCK,
                    #[inline(always)]
                    |pos, [oa, ob], [da, db], len| {
                        let xa = gather(a, oa, da, len, &mut sa);
                        let xb = gather(b, ob, db, len, &mut sb);
                        let o = &mut out[pos - start..pos - start + len];
                        scalar::store_with(
                            o,
                            &mut so,
                            #[inline(always)]
                            |os| {
                                for ((o, &u), &v) in os.iter_mut().zip(xa).zip(xb) {
                                    *o = f(u, v);
                                }
                            },
                        );
                    },
                );
            },
        );
    });
}

/// Elements `off, off + stride, ...` (`len` of them) as compute values.
#[inline(always)]
fn gather<'a, T: Float>(
    src: &'a [T],
    off: usize,
    stride: usize,
    len: usize,
    scratch: &'a mut Vec<T::C>,
) -> &'a [T::C] {
    if stride == 1 {
        return scalar::load(&src[off..off + len], scratch);
    }
    scratch.clear();
    if stride == 0 {
        scratch.resize(len, src[off].load()); // a broadcast operand
    } else {
        scratch.extend((0..len).map(|i| src[off + i * stride].load()));
    }
    scratch
}

pub(crate) fn axpy(
    alpha: f32,
    x: &HostData,
    y: &mut HostData,
    y_offset: Option<usize>,
) -> Result<()> {
    const OP: &str = "axpy";
    let r = brrr_backend::axpy_range(OP, x.len(), y.len(), y_offset)?;
    let n = r.len();
    match (x, &mut *y) {
        (HostData::F16(x), HostData::F16(y)) => axpy_typed(alpha, &x[..n], &mut y[r]),
        (HostData::BF16(x), HostData::BF16(y)) => axpy_typed(alpha, &x[..n], &mut y[r]),
        (HostData::F32(x), HostData::F32(y)) => axpy_typed(alpha, &x[..n], &mut y[r]),
        (HostData::F64(x), HostData::F64(y)) => axpy_typed(alpha, &x[..n], &mut y[r]),
        (x, y) => return Err(check::dtype_error(OP, &[y, x])),
    }
    Ok(())
}

fn axpy_typed<T: Float>(alpha: f32, x: &[T], y: &mut [T]) {
    let alpha = T::C::from_f32(alpha);
    par::run(par::chunks(y, TASK), |t, y| {
        let x = &x[t * TASK..t * TASK + y.len()];
        par::simd(
            #[inline(always)]
            || {
                let (mut sx, mut sy) = (Vec::new(), Vec::new());
                for (xb, yb) in x.chunks(BLOCK).zip(y.chunks_mut(BLOCK)) {
                    let xs = scalar::load(xb, &mut sx);
                    scalar::update_with(
                        yb,
                        &mut sy,
                        #[inline(always)]
                        |ys| {
                            for (y, &v) in ys.iter_mut().zip(xs) {
                                *y += alpha * v;
                            }
                        },
                    );
                }
            },
        );
    });
}
