//! GELU, tanh approximation (Hendrycks & Gimpel 2016), as in GPT-2.
//!
//! `0.5·x·(1 + tanh(u))` with `u = √(2/π)·(x + 0.044715·x³)` is computed as
//! `x · σ(2u)`, the same function (since `(1 + tanh u)/2 = σ(2u)`), because σ needs one
//! `exp` that vectorises (see [`crate::scalar::exp_f32`]) and has no cancellation for
//! negative `x`. Its derivative is `σ(2u) + 2x·σ(2u)(1 − σ(2u))·u'(x)`.

use crate::check;
use crate::elementwise::{map1, map2};
use crate::scalar::{Float, Real};
use brrr_backend::{HostData, Result};

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const COEFF: f64 = 0.044_715;

/// `(σ(2u), u'(x))` for the tanh-approximate GELU.
#[inline(always)]
fn parts<C: Real>(x: C) -> (C, C) {
    let k = C::from_f64(SQRT_2_OVER_PI);
    let c = C::from_f64(COEFF);
    let x2 = x * x;
    let u = k * (x + c * x2 * x);
    let s = C::ONE / (C::ONE + (-(u + u)).exp());
    let du = k * (C::ONE + C::from_f64(3.0) * c * x2);
    (s, du)
}

pub(crate) fn gelu(x: &HostData, y: &mut HostData) -> Result<()> {
    const OP: &str = "gelu";
    let n = y.len();
    check::len(OP, x, n)?;
    match (x, &mut *y) {
        (HostData::F16(x), HostData::F16(y)) => forward(&x[..n], y),
        (HostData::BF16(x), HostData::BF16(y)) => forward(&x[..n], y),
        (HostData::F32(x), HostData::F32(y)) => forward(&x[..n], y),
        (HostData::F64(x), HostData::F64(y)) => forward(&x[..n], y),
        (x, y) => return Err(check::dtype_error(OP, &[y, x])),
    }
    Ok(())
}

fn forward<T: Float>(x: &[T], y: &mut [T]) {
    map1(
        x,
        y,
        #[inline(always)]
        |v| v * parts(v).0,
    );
}

pub(crate) fn gelu_backward(x: &HostData, dy: &HostData, dx: &mut HostData) -> Result<()> {
    const OP: &str = "gelu_backward";
    let n = dx.len();
    check::len(OP, x, n)?;
    check::len(OP, dy, n)?;
    match (x, dy, &mut *dx) {
        (HostData::F16(x), HostData::F16(dy), HostData::F16(dx)) => backward(&x[..n], &dy[..n], dx),
        (HostData::BF16(x), HostData::BF16(dy), HostData::BF16(dx)) => {
            backward(&x[..n], &dy[..n], dx)
        }
        (HostData::F32(x), HostData::F32(dy), HostData::F32(dx)) => backward(&x[..n], &dy[..n], dx),
        (HostData::F64(x), HostData::F64(dy), HostData::F64(dx)) => backward(&x[..n], &dy[..n], dx),
        (x, dy, dx) => return Err(check::dtype_error(OP, &[dx, x, dy])),
    }
    Ok(())
}

fn backward<T: Float>(x: &[T], dy: &[T], dx: &mut [T]) {
    map2(
        x,
        dy,
        dx,
        #[inline(always)]
        |v, g| {
            let (s, du) = parts(v);
            let two = T::C::ONE + T::C::ONE;
            g * (s + two * v * s * (T::C::ONE - s) * du)
        },
    );
}
