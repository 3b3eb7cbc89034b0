//! Memory ops: fill, strided copies (the kernel that makes a transpose or a broadcast
//! real), and dtype casts.

use crate::check;
use crate::par;
use crate::scalar;
use crate::strided::{Walk, check_layout};
use brrr_backend::{Error, HostData, Layout, Result};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// Elements per task for copies and casts (they are memory-bound, so tasks are big).
const COPY_TASK: usize = 1 << 16;

/// Any element type, seen through f64, which holds every value of every dtype exactly.
trait Elem: Copy + Send + Sync {
    fn to_f64(self) -> f64;
    /// Round to nearest even for floats (correctly, in one rounding); for integers truncate toward zero and saturate
    /// (NaN becomes 0), as Rust's `as` does and as `HostData::from_f64` documents.
    fn from_f64(x: f64) -> Self;
}

impl Elem for f16 {
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_f64(x: f64) -> Self {
        scalar::f16_from_f64(x)
    }
}
impl Elem for bf16 {
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn from_f64(x: f64) -> Self {
        scalar::bf16_from_f64(x)
    }
}
impl Elem for f32 {
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}
impl Elem for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> Self {
        x
    }
}
impl Elem for i32 {
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(x: f64) -> Self {
        x as i32
    }
}
impl Elem for u32 {
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(x: f64) -> Self {
        x as u32
    }
}

pub(crate) fn fill(buf: &mut HostData, value: f64) -> Result<()> {
    match buf {
        HostData::F16(v) => fill_typed(v, scalar::f16_from_f64(value)),
        HostData::BF16(v) => fill_typed(v, scalar::bf16_from_f64(value)),
        HostData::F32(v) => fill_typed(v, value as f32),
        HostData::F64(v) => fill_typed(v, value),
        HostData::I32(v) => fill_typed(v, value as i32),
        HostData::U32(v) => fill_typed(v, value as u32),
    }
    Ok(())
}

fn fill_typed<T: Copy + Send + Sync>(v: &mut [T], value: T) {
    par::run(par::chunks(v, COPY_TASK), |_, c| c.fill(value));
}

pub(crate) fn copy_strided(
    src: &HostData,
    src_layout: &Layout,
    dst: &mut HostData,
    dst_layout: &Layout,
) -> Result<()> {
    const OP: &str = "copy_strided";
    if src.dtype() != dst.dtype() {
        return Err(Error::DType {
            op: OP,
            expected: dst.dtype(),
            got: src.dtype(),
        });
    }
    let shape = src_layout.shape.dims().to_vec();
    check_layout(OP, "source view", src_layout, &shape, src.len())?;
    check_layout(OP, "destination view", dst_layout, &shape, dst.len())?;
    check_no_overlap(OP, dst_layout)?;
    let (l, d) = (src_layout, dst_layout);
    match (src, dst) {
        (HostData::F16(s), HostData::F16(o)) => copy_typed(s, l, o, d),
        (HostData::BF16(s), HostData::BF16(o)) => copy_typed(s, l, o, d),
        (HostData::F32(s), HostData::F32(o)) => copy_typed(s, l, o, d),
        (HostData::F64(s), HostData::F64(o)) => copy_typed(s, l, o, d),
        (HostData::I32(s), HostData::I32(o)) => copy_typed(s, l, o, d),
        (HostData::U32(s), HostData::U32(o)) => copy_typed(s, l, o, d),
        (s, o) => return Err(check::dtype_error(OP, &[o, s])),
    }
    Ok(())
}

/// Rejects destination views that would write two elements to one place (a zero
/// stride, or strides too small for the sizes inside them). The test is the usual
/// sufficient one: sorted by stride, each stride must step past everything the
/// smaller ones reach. Every view made by slicing, permuting or reshaping a
/// contiguous tensor passes it.
fn check_no_overlap(op: &'static str, layout: &Layout) -> Result<()> {
    let mut dims: Vec<(usize, usize)> = layout
        .shape
        .dims()
        .iter()
        .zip(&layout.strides)
        .filter(|&(&d, _)| d > 1)
        .map(|(&d, &s)| (s, d))
        .collect();
    if layout.shape.elem_count() == 0 {
        return Ok(());
    }
    dims.sort_unstable();
    let mut reach = 0usize; // furthest offset the smaller dimensions reach
    for (s, d) in dims {
        if s <= reach {
            return Err(Error::invalid(
                op,
                format!(
                    "destination view (shape {}, strides {:?}) maps several elements to one place",
                    layout.shape, layout.strides
                ),
            ));
        }
        reach += (d - 1) * s; // no overflow: check_layout bounded the span
    }
    Ok(())
}

/// `dst[view d, element i] = src[view l, element i]` for checked layouts.
fn copy_typed<T: Copy + Send + Sync>(src: &[T], l: &Layout, dst: &mut [T], d: &Layout) {
    let n = l.shape.elem_count();
    if n == 0 {
        return;
    }
    if d.is_contiguous() {
        // The common case (making a view dense): cut the destination into tasks.
        let dst = &mut dst[d.offset..d.offset + n];
        let walk = Walk::new([l]);
        par::run(par::chunks(dst, COPY_TASK), |t, out| {
            let start = t * COPY_TASK;
            walk.runs(
                start,
                start + out.len(),
                usize::MAX,
                |pos, [off], [stride], len| {
                    let o = &mut out[pos - start..pos - start + len];
                    if stride == 1 {
                        o.copy_from_slice(&src[off..off + len]);
                    } else {
                        for (i, x) in o.iter_mut().enumerate() {
                            *x = src[off + i * stride];
                        }
                    }
                },
            );
        });
        return;
    }
    // Writing into part of a larger tensor: one thread, walking both views together
    // (such copies are memory-bound, and one core nearly saturates the bus).
    let walk = Walk::new([l, d]);
    walk.runs(0, n, usize::MAX, |_, [so, doff], [ss, ds], len| {
        if ss == 1 && ds == 1 {
            dst[doff..doff + len].copy_from_slice(&src[so..so + len]);
        } else {
            for i in 0..len {
                dst[doff + i * ds] = src[so + i * ss];
            }
        }
    });
}

/// Converts the first `dst.len()` elements of `src` into `dst`'s dtype.
pub(crate) fn cast(src: &HostData, dst: &mut HostData) -> Result<()> {
    const OP: &str = "cast";
    let n = dst.len();
    check::len(OP, src, n)?;
    match (src, dst) {
        // The conversions mixed-precision training runs every step have vectorised
        // paths in `half` (F16C on x86).
        (HostData::F16(s), HostData::F32(d)) => {
            convert_with(&s[..n], d, |s, d| s.convert_to_f32_slice(d))
        }
        (HostData::BF16(s), HostData::F32(d)) => {
            convert_with(&s[..n], d, |s, d| s.convert_to_f32_slice(d))
        }
        (HostData::F32(s), HostData::F16(d)) => {
            convert_with(&s[..n], d, |s, d| d.convert_from_f32_slice(s))
        }
        (HostData::F32(s), HostData::BF16(d)) => {
            convert_with(&s[..n], d, |s, d| d.convert_from_f32_slice(s))
        }
        (HostData::F16(s), d) => cast_into(&s[..n], d),
        (HostData::BF16(s), d) => cast_into(&s[..n], d),
        (HostData::F32(s), d) => cast_into(&s[..n], d),
        (HostData::F64(s), d) => cast_into(&s[..n], d),
        (HostData::I32(s), d) => cast_into(&s[..n], d),
        (HostData::U32(s), d) => cast_into(&s[..n], d),
    }
    Ok(())
}

fn cast_into<S: Elem>(src: &[S], dst: &mut HostData) {
    match dst {
        HostData::F16(d) => cast_typed(src, d),
        HostData::BF16(d) => cast_typed(src, d),
        HostData::F32(d) => cast_typed(src, d),
        HostData::F64(d) => cast_typed(src, d),
        HostData::I32(d) => cast_typed(src, d),
        HostData::U32(d) => cast_typed(src, d),
    }
}

/// Through f64: exact for the source, then one rounding into the destination (so
/// f64 → f16 is rounded once, not via f32).
fn cast_typed<S: Elem, D: Elem>(src: &[S], dst: &mut [D]) {
    convert_with(src, dst, |s, d| {
        for (o, &x) in d.iter_mut().zip(s) {
            *o = D::from_f64(x.to_f64());
        }
    });
}

fn convert_with<S: Sync, D: Send>(
    src: &[S],
    dst: &mut [D],
    f: impl Fn(&[S], &mut [D]) + Sync + Send,
) {
    par::run(par::chunks(dst, COPY_TASK), |t, d| {
        let start = t * COPY_TASK;
        f(&src[start..start + d.len()], d);
    });
}
