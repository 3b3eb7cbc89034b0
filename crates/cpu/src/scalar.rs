//! The two traits every kernel is generic over.
//!
//! - [`Real`] is the type a kernel *computes* in: `f32`, or `f64` for f64 data.
//! - [`Float`] is the type a buffer *stores*: f16, bf16, f32 or f64, each with its compute
//!   type and the conversions to and from it.
//!
//! f16 and bf16 are loaded into f32, computed on, and rounded once when stored, as
//! tensor-core hardware does (and as the backend trait asks). Kernels convert whole rows
//! or blocks at a time through [`Float::load_slice`] / [`Float::store_slice`], which
//! use `half`'s vectorised slice conversions (F16C on x86) instead of one call per
//! element; for f32 and f64 data [`Float::as_compute`] hands out the slice itself, so
//! those dtypes pay no copy.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// Arithmetic a kernel needs from its compute type (f32 or f64).
///
/// Every method is `#[inline(always)]` so that kernels run inside the SIMD dispatch
/// (see [`crate::par::simd`]) are compiled, all the way down, for the instruction set chosen.
pub(crate) trait Real:
    Copy
    + Send
    + Sync
    + Debug
    + PartialOrd
    + Default
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + Sum
{
    const ZERO: Self;
    const ONE: Self;
    const NEG_INFINITY: Self;

    fn from_f32(x: f32) -> Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn from_usize(n: usize) -> Self;

    /// `e^x`, fast: for f32 a vectorisable Cephes polynomial (≤ 2 ulp, see
    /// [`exp_f32`]); for f64 the standard library's `exp`.
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn abs(self) -> Self;
    /// IEEE maxNum, like `f64::max`: a NaN operand loses to a number.
    fn max(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
    fn is_finite(self) -> bool;
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NEG_INFINITY: Self = f32::NEG_INFINITY;

    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn from_usize(n: usize) -> Self {
        n as f32
    }
    #[inline(always)]
    fn exp(self) -> Self {
        exp_f32(self)
    }
    #[inline(always)]
    fn ln(self) -> Self {
        f32::ln(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        f32::tanh(self)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        f32::abs(self)
    }
    #[inline(always)]
    fn max(self, other: Self) -> Self {
        f32::max(self, other)
    }
    #[inline(always)]
    fn min(self, other: Self) -> Self {
        f32::min(self, other)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NEG_INFINITY: Self = f64::NEG_INFINITY;

    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        f64::from(x)
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_usize(n: usize) -> Self {
        n as f64
    }
    #[inline(always)]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn ln(self) -> Self {
        f64::ln(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        f64::tanh(self)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        f64::abs(self)
    }
    #[inline(always)]
    fn max(self, other: Self) -> Self {
        f64::max(self, other)
    }
    #[inline(always)]
    fn min(self, other: Self) -> Self {
        f64::min(self, other)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
}

/// `e^x` in f32 without a libm call, so that loops over it vectorise.
///
/// Softmax and cross-entropy are dominated by `exp` (a GPT-2 vocabulary is 50 257
/// exponentials per token, twice); libm's `expf` is a scalar call of ~5 ns, this is a
/// few instructions per SIMD lane. The algorithm is Cephes' `expf` (S. Moshier,
/// <https://www.netlib.org/cephes/>), as in most SIMD math libraries:
/// `x = n·ln2 + r` with `|r| ≤ ln2/2` (ln2 split in two constants so `r` is exact),
/// `e^r` by a degree-6 polynomial, `2^n` built in the exponent bits. Rounding to the
/// nearest integer uses the `1.5·2^23` trick, which needs no SSE4.1 `round`.
/// Relative error ≤ 2 ulp (checked against f64 in the tests); `-inf` and anything
/// below the smallest normal result give 0, overflow gives `inf`, NaN stays NaN.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4; // exactly 0.693359375: few mantissa bits, so n*LN2_HI is exact
    const LN2_LO: f32 = -2.121_944_4e-4;
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    const HI: f32 = 88.722_83; // ln(f32::MAX)
    const LO: f32 = -87.336_55; // ln(f32::MIN_POSITIVE)
    let xc = x.clamp(LO, HI);
    // n = round(x / ln2), as a float and as an integer read from the mantissa bits.
    let t = xc * LOG2E + MAGIC;
    let n = t - MAGIC;
    let ni = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = xc - n * LN2_HI - n * LN2_LO;
    let r2 = r * r;
    // Cephes' coefficients; its last, 5.0000001201e-1, is 0.5 once rounded to f32.
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let er = p * r2 + r + 1.0;
    // 2^n for n in [-126, 128] (128 when x rounds up near HI): built as 2^a * 2^b with
    // a = n/2 and b = n - a, both well inside the exponent range, so no special case.
    let a = ni >> 1;
    let b = ni - a;
    let y =
        er * f32::from_bits(((a + 127) as u32) << 23) * f32::from_bits(((b + 127) as u32) << 23);
    if x < LO {
        0.0
    } else if x > HI {
        f32::INFINITY
    } else if x.is_nan() {
        x
    } else {
        y
    }
}

/// A storage dtype: how its elements become compute values and back.
pub(crate) trait Float: Copy + Send + Sync + Debug + Default + 'static {
    /// What kernels compute in: f32 for f16/bf16/f32, f64 for f64.
    type C: Real;

    /// Whether f32 holds per-row statistics of this dtype without loss. The trait stores
    /// LayerNorm's mean and rstd as f32; for f64 data that would cap a finite-difference
    /// check at f32 precision, so the f64 backward recomputes them instead.
    const F32_STATS: bool = true;

    fn load(self) -> Self::C;
    /// Rounds to nearest even (for f16/bf16: the single rounding of a result).
    fn store(c: Self::C) -> Self;

    /// `dst[i] = load(src[i])`; the slices have the same length.
    fn load_slice(src: &[Self], dst: &mut [Self::C]);
    /// `dst[i] = store(src[i])`; the slices have the same length.
    fn store_slice(src: &[Self::C], dst: &mut [Self]);

    /// The slice itself, when the storage type *is* the compute type (f32, f64).
    fn as_compute(src: &[Self]) -> Option<&[Self::C]>;
    fn as_compute_mut(dst: &mut [Self]) -> Option<&mut [Self::C]>;
}

impl Float for f16 {
    type C = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(c: f32) -> Self {
        f16::from_f32(c)
    }
    fn load_slice(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn store_slice(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
    fn as_compute(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_compute_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

impl Float for bf16 {
    type C = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(c: f32) -> Self {
        bf16::from_f32(c)
    }
    fn load_slice(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn store_slice(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
    fn as_compute(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_compute_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

impl Float for f32 {
    type C = f32;
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
    #[inline(always)]
    fn store(c: f32) -> Self {
        c
    }
    fn load_slice(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn store_slice(src: &[f32], dst: &mut [Self]) {
        dst.copy_from_slice(src);
    }
    fn as_compute(src: &[Self]) -> Option<&[f32]> {
        Some(src)
    }
    fn as_compute_mut(dst: &mut [Self]) -> Option<&mut [f32]> {
        Some(dst)
    }
}

impl Float for f64 {
    type C = f64;
    const F32_STATS: bool = false;
    #[inline(always)]
    fn load(self) -> f64 {
        self
    }
    #[inline(always)]
    fn store(c: f64) -> Self {
        c
    }
    fn load_slice(src: &[Self], dst: &mut [f64]) {
        dst.copy_from_slice(src);
    }
    fn store_slice(src: &[f64], dst: &mut [Self]) {
        dst.copy_from_slice(src);
    }
    fn as_compute(src: &[Self]) -> Option<&[f64]> {
        Some(src)
    }
    fn as_compute_mut(dst: &mut [Self]) -> Option<&mut [f64]> {
        Some(dst)
    }
}

/// `src` as compute values: the slice itself for f32/f64, else converted into `scratch`.
#[inline(always)]
pub(crate) fn load<'a, T: Float>(src: &'a [T], scratch: &'a mut Vec<T::C>) -> &'a [T::C] {
    match T::as_compute(src) {
        Some(s) => s,
        None => {
            scratch.clear();
            scratch.resize(src.len(), T::C::ZERO);
            T::load_slice(src, scratch);
            scratch
        }
    }
}

/// Runs `f` on `dst` as a compute slice: in place for f32/f64; for f16/bf16 on
/// `scratch`, stored (rounded once) into `dst` afterwards. `f` must write every element.
#[inline(always)]
pub(crate) fn store_with<T: Float, R>(
    dst: &mut [T],
    scratch: &mut Vec<T::C>,
    f: impl FnOnce(&mut [T::C]) -> R,
) -> R {
    match T::as_compute_mut(dst) {
        Some(d) => f(d),
        None => {
            scratch.clear();
            scratch.resize(dst.len(), T::C::ZERO);
            let r = f(scratch);
            T::store_slice(scratch, dst);
            r
        }
    }
}

/// Runs `f` on `dst` as a compute slice holding `dst`'s current values (for kernels
/// that read-modify-write, such as accumulation); see [`store_with`].
#[inline(always)]
pub(crate) fn update_with<T: Float, R>(
    dst: &mut [T],
    scratch: &mut Vec<T::C>,
    f: impl FnOnce(&mut [T::C]) -> R,
) -> R {
    match T::as_compute_mut(dst) {
        Some(d) => f(d),
        None => {
            scratch.clear();
            scratch.resize(dst.len(), T::C::ZERO);
            T::load_slice(dst, scratch);
            let r = f(scratch);
            T::store_slice(scratch, dst);
            r
        }
    }
}

// f64 → f16/bf16 conversions live in brrr-backend (`brrr_backend::f16_from_f64`), where
// `HostData::from_f64` uses them too.
pub(crate) use brrr_backend::{bf16_from_f64, f16_from_f64};
