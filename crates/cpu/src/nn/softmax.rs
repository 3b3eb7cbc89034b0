//! Row-wise softmax with an optional causal mask, and its backward.

use crate::check;
use crate::par;
use crate::reduce::{dot, max, sum};
use crate::scalar::{self, Float, Real};
use brrr_backend::{DType, Error, HostData, Result, SegmentMask, SoftmaxSpec};

/// Simple operations per element of a row, for task sizing (`exp` is ~10).
const WORK_PER_ELEM: usize = 12;

pub(crate) fn softmax(spec: &SoftmaxSpec, x: &HostData, y: &mut HostData) -> Result<()> {
    const OP: &str = "softmax";
    let total = check::mul(OP, spec.rows, spec.cols)?;
    check::len(OP, x, total)?;
    check::len(OP, y, total)?;
    match (x, &mut *y) {
        (HostData::F16(x), HostData::F16(y)) => forward(spec, &x[..total], &mut y[..total]),
        (HostData::BF16(x), HostData::BF16(y)) => forward(spec, &x[..total], &mut y[..total]),
        (HostData::F32(x), HostData::F32(y)) => forward(spec, &x[..total], &mut y[..total]),
        (HostData::F64(x), HostData::F64(y)) => forward(spec, &x[..total], &mut y[..total]),
        (x, y) => return Err(check::dtype_error(OP, &[y, x])),
    }
    Ok(())
}

/// Columns row `r` may see: all, or with the causal mask `j <= r % cols` (rows are a
/// stack of `cols × cols` score blocks).
#[inline(always)]
fn visible(spec: &SoftmaxSpec, r: usize) -> usize {
    if spec.causal {
        r % spec.cols + 1
    } else {
        spec.cols
    }
}

fn forward<T: Float>(spec: &SoftmaxSpec, x: &[T], y: &mut [T]) {
    let cols = spec.cols;
    if cols == 0 || y.is_empty() {
        return;
    }
    let per_task = par::rows_per_task(cols * WORK_PER_ELEM);
    let scale = T::C::from_f32(spec.scale);
    par::run(par::chunks(y, per_task * cols), |t, y| {
        par::simd(
            #[inline(always)]
            || {
                let (mut sx, mut sy) = (Vec::new(), Vec::new());
                for (j, yr) in y.chunks_mut(cols).enumerate() {
                    let r = t * per_task + j;
                    let xr = scalar::load(&x[r * cols..(r + 1) * cols], &mut sx);
                    let v = visible(spec, r);
                    scalar::store_with(
                        yr,
                        &mut sy,
                        #[inline(always)]
                        |yr| {
                            let (zv, masked) = yr.split_at_mut(v);
                            // Subtracting the row maximum keeps exp() from overflowing without
                            // changing the result (softmax is shift-invariant).
                            for (z, &xv) in zv.iter_mut().zip(&xr[..v]) {
                                *z = scale * xv;
                            }
                            let m = max(zv);
                            for z in zv.iter_mut() {
                                *z = (*z - m).exp();
                            }
                            let inv = T::C::ONE / sum(zv);
                            for z in zv.iter_mut() {
                                *z *= inv;
                            }
                            masked.fill(T::C::ZERO);
                        },
                    );
                }
            },
        );
    });
}

pub(crate) fn softmax_backward(
    spec: &SoftmaxSpec,
    y: &HostData,
    dy: &HostData,
    dx: &mut HostData,
) -> Result<()> {
    const OP: &str = "softmax_backward";
    let total = check::mul(OP, spec.rows, spec.cols)?;
    check::len(OP, y, total)?;
    check::len(OP, dy, total)?;
    check::len(OP, dx, total)?;
    match (y, dy, &mut *dx) {
        (HostData::F16(y), HostData::F16(dy), HostData::F16(dx)) => {
            backward(spec, &y[..total], &dy[..total], &mut dx[..total])
        }
        (HostData::BF16(y), HostData::BF16(dy), HostData::BF16(dx)) => {
            backward(spec, &y[..total], &dy[..total], &mut dx[..total])
        }
        (HostData::F32(y), HostData::F32(dy), HostData::F32(dx)) => {
            backward(spec, &y[..total], &dy[..total], &mut dx[..total])
        }
        (HostData::F64(y), HostData::F64(dy), HostData::F64(dx)) => {
            backward(spec, &y[..total], &dy[..total], &mut dx[..total])
        }
        (y, dy, dx) => return Err(check::dtype_error(OP, &[dx, y, dy])),
    }
    Ok(())
}

/// `dx = scale · y ⊙ (dy − Σ_j dy_j y_j)`: the softmax Jacobian `diag(y) − y yᵀ` applied
/// to `dy`, times the chain-rule factor of the input scaling. Masked columns get 0.
fn backward<T: Float>(spec: &SoftmaxSpec, y: &[T], dy: &[T], dx: &mut [T]) {
    let cols = spec.cols;
    if cols == 0 || dx.is_empty() {
        return;
    }
    let per_task = par::rows_per_task(cols * 4);
    let scale = T::C::from_f32(spec.scale);
    par::run(par::chunks(dx, per_task * cols), |t, dx| {
        par::simd(
            #[inline(always)]
            || {
                let (mut sy, mut sdy, mut sdx) = (Vec::new(), Vec::new(), Vec::new());
                for (j, dxr) in dx.chunks_mut(cols).enumerate() {
                    let r = t * per_task + j;
                    let v = visible(spec, r);
                    let yr = scalar::load(&y[r * cols..r * cols + v], &mut sy);
                    let dyr = scalar::load(&dy[r * cols..r * cols + v], &mut sdy);
                    let d = dot(yr, dyr);
                    scalar::store_with(
                        dxr,
                        &mut sdx,
                        #[inline(always)]
                        |dxr| {
                            let (dv, masked) = dxr.split_at_mut(v);
                            for ((o, &yv), &g) in dv.iter_mut().zip(yr).zip(dyr) {
                                *o = scale * yv * (g - d);
                            }
                            masked.fill(T::C::ZERO);
                        },
                    );
                }
            },
        );
    });
}

/// Causal softmax with a document mask ([`SegmentMask`]): row `r` sees column `j` when
/// `j <= i` and the two tokens carry the same segment id.
pub(crate) fn softmax_segmented(
    spec: &SoftmaxSpec,
    mask: &SegmentMask,
    segments: &HostData,
    x: &HostData,
    y: &mut HostData,
) -> Result<()> {
    const OP: &str = "softmax_segmented";
    let seqs = mask.sequences(spec)?;
    let total = check::mul(OP, spec.rows, spec.cols)?;
    check::len(OP, x, total)?;
    check::len(OP, y, total)?;
    let HostData::U32(seg) = segments else {
        return Err(Error::DType {
            op: OP,
            expected: DType::U32,
            got: segments.dtype(),
        });
    };
    let need = check::mul(OP, seqs, spec.cols)?;
    if seg.len() < need {
        return Err(Error::BufferTooSmall {
            op: OP,
            needed: need,
            len: seg.len(),
        });
    }
    let seg = &seg[..need];
    match (x, &mut *y) {
        (HostData::F16(x), HostData::F16(y)) => {
            masked(spec, mask, seg, &x[..total], &mut y[..total])
        }
        (HostData::BF16(x), HostData::BF16(y)) => {
            masked(spec, mask, seg, &x[..total], &mut y[..total])
        }
        (HostData::F32(x), HostData::F32(y)) => {
            masked(spec, mask, seg, &x[..total], &mut y[..total])
        }
        (HostData::F64(x), HostData::F64(y)) => {
            masked(spec, mask, seg, &x[..total], &mut y[..total])
        }
        (x, y) => return Err(check::dtype_error(OP, &[y, x])),
    }
    Ok(())
}

fn masked<T: Float>(spec: &SoftmaxSpec, mask: &SegmentMask, seg: &[u32], x: &[T], y: &mut [T]) {
    let cols = spec.cols;
    let per_task = par::rows_per_task(cols * WORK_PER_ELEM);
    let scale = T::C::from_f32(spec.scale);
    par::run(par::chunks(y, per_task * cols), |t, y| {
        let (mut sx, mut sy) = (Vec::new(), Vec::new());
        for (k, yr) in y.chunks_mut(cols).enumerate() {
            let r = t * per_task + k;
            let i = r % cols;
            let ids = &seg[(r / cols / mask.heads) * cols..][..cols];
            let seen = |j: usize| j <= i && ids[j] == ids[i];
            let xr = scalar::load(&x[r * cols..(r + 1) * cols], &mut sx);
            scalar::store_with(yr, &mut sy, |yr| {
                // The row maximum over the visible entries only (j = i always is).
                let mut m = scale * xr[i];
                for j in (0..=i).filter(|&j| seen(j)) {
                    let z = scale * xr[j];
                    if z > m {
                        m = z;
                    }
                }
                let mut s = T::C::ZERO;
                for (j, o) in yr.iter_mut().enumerate() {
                    *o = if seen(j) {
                        (scale * xr[j] - m).exp()
                    } else {
                        T::C::ZERO
                    };
                    s += *o;
                }
                let inv = T::C::ONE / s;
                for o in yr.iter_mut() {
                    *o *= inv;
                }
            });
        }
    });
}
