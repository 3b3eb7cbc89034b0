//! Argument checks shared by the kernels. Every check names the op, so an error read in
//! a log says which call was wrong.

use brrr_backend::{DType, Error, HostData, Result};

/// The error for buffers whose dtypes do not fit a float kernel: the first buffer that
/// is not a float, else the first whose dtype differs from the first buffer's.
pub(crate) fn dtype_error(op: &'static str, bufs: &[&HostData]) -> Error {
    if let Some(b) = bufs.iter().find(|b| !b.dtype().is_float()) {
        // An integer where a float belongs: name the common float dtype as the expectation.
        return Error::DType {
            op,
            expected: DType::F32,
            got: b.dtype(),
        };
    }
    let first = bufs.first().map_or(DType::F32, |b| b.dtype());
    match bufs.iter().find(|b| b.dtype() != first) {
        Some(b) => Error::DType {
            op,
            expected: first,
            got: b.dtype(),
        },
        None => Error::invalid(op, format!("unsupported dtype {first}")),
    }
}

/// Checks that `buf` holds at least `needed` elements.
pub(crate) fn len(op: &'static str, buf: &HostData, needed: usize) -> Result<()> {
    Error::check_len(op, needed, buf.len())
}

/// `a * b`, or an error instead of an overflow (sizes come from callers and a wrapped
/// product would pass the length checks).
pub(crate) fn mul(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| Error::invalid(op, format!("size {a} × {b} overflows usize")))
}

/// Reads the one-element f32 device scalar `buf` (such as `inv_scale` or `found_inf`).
pub(crate) fn scalar_f32(op: &'static str, buf: &HostData) -> Result<f32> {
    match buf {
        HostData::F32(v) => v.first().copied().ok_or(Error::BufferTooSmall {
            op,
            needed: 1,
            len: 0,
        }),
        other => Err(Error::DType {
            op,
            expected: DType::F32,
            got: other.dtype(),
        }),
    }
}

/// `buf`'s first `n` elements, which must be f32.
pub(crate) fn f32s<'a>(op: &'static str, buf: &'a HostData, n: usize) -> Result<&'a [f32]> {
    match buf {
        HostData::F32(v) => {
            Error::check_len(op, n, v.len())?;
            Ok(&v[..n])
        }
        other => Err(Error::DType {
            op,
            expected: DType::F32,
            got: other.dtype(),
        }),
    }
}

/// `buf`'s first `n` elements, mutably, which must be f32.
pub(crate) fn f32s_mut<'a>(
    op: &'static str,
    buf: &'a mut HostData,
    n: usize,
) -> Result<&'a mut [f32]> {
    match buf {
        HostData::F32(v) => {
            Error::check_len(op, n, v.len())?;
            Ok(&mut v[..n])
        }
        other => Err(Error::DType {
            op,
            expected: DType::F32,
            got: other.dtype(),
        }),
    }
}
