//! The numerics explorer: what f16, bf16 and f32 represent, rounding to them bit by
//! bit, and where a set of values (a run's gradients) falls against a format's range.
//!
//! Everything here is plain arithmetic on bits, so it runs in the browser as well; the
//! tests check it against the `half` crate and against the formats' definitions
//! (IEEE 754-2008 binary16 and binary32; bfloat16 is binary32's top 16 bits).

use serde::Serialize;

/// A binary floating-point format with an implicit leading bit and subnormals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Format {
    /// `f16`, `bf16`, `f32`.
    pub name: &'static str,
    /// Exponent bits.
    pub exponent_bits: u32,
    /// Stored mantissa (fraction) bits; the significand has one more.
    pub mantissa_bits: u32,
}

/// IEEE binary16.
pub const F16: Format = Format {
    name: "f16",
    exponent_bits: 5,
    mantissa_bits: 10,
};
/// bfloat16: f32's exponent, 7 stored mantissa bits.
pub const BF16: Format = Format {
    name: "bf16",
    exponent_bits: 8,
    mantissa_bits: 7,
};
/// IEEE binary32.
pub const F32: Format = Format {
    name: "f32",
    exponent_bits: 8,
    mantissa_bits: 23,
};

/// The formats the explorer compares.
pub const FORMATS: [Format; 3] = [F16, BF16, F32];

/// What happens to a value stored in a format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Fate {
    /// Exactly zero to begin with.
    Zero,
    /// Rounds to a normal number.
    Normal,
    /// Rounds to a subnormal: kept, with fewer significant bits.
    Subnormal,
    /// Non-zero, but rounds to zero.
    Underflow,
    /// Finite, but rounds to infinity.
    Overflow,
    /// Infinite or NaN already.
    NonFinite,
}

impl Format {
    /// The exponent bias, `2^(e-1) - 1`.
    pub fn bias(&self) -> i32 {
        (1 << (self.exponent_bits - 1)) - 1
    }
    /// The largest exponent of a finite number (= the bias).
    pub fn max_exponent(&self) -> i32 {
        self.bias()
    }
    /// The smallest exponent of a normal number, `1 - bias`.
    pub fn min_exponent(&self) -> i32 {
        1 - self.bias()
    }
    /// The largest finite value, `(2 - 2^-m) · 2^emax` (65504 for f16).
    pub fn max_finite(&self) -> f64 {
        (2.0 - (-(self.mantissa_bits as f64)).exp2()) * f64::from(self.max_exponent()).exp2()
    }
    /// The smallest positive normal value, `2^emin`.
    pub fn min_normal(&self) -> f64 {
        f64::from(self.min_exponent()).exp2()
    }
    /// The smallest positive subnormal value, `2^(emin - m)` (2⁻²⁴ for f16).
    pub fn min_subnormal(&self) -> f64 {
        f64::from(self.min_exponent() - self.mantissa_bits as i32).exp2()
    }
    /// The gap between 1 and the next value, `2^-m` (machine epsilon).
    pub fn epsilon(&self) -> f64 {
        (-(self.mantissa_bits as f64)).exp2()
    }
    /// Significant decimal digits, `(m + 1) · log10 2`.
    pub fn decimal_digits(&self) -> f64 {
        f64::from(self.mantissa_bits + 1) * std::f64::consts::LOG10_2
    }

    /// `x` rounded to this format (to nearest, ties to even; overflow to ±inf; NaN
    /// stays NaN), returned as an f64 (every value of these formats is one exactly).
    pub fn round(&self, x: f64) -> f64 {
        if !x.is_finite() || x == 0.0 {
            return x;
        }
        let m = self.mantissa_bits as i32;
        let sign = x.signum();
        let a = x.abs();
        // The exponent of a's leading bit, clamped at emin: below it the spacing of
        // the format's values stays 2^(emin - m) (the subnormals).
        let e = exponent_of(a).max(self.min_exponent());
        let ulp = f64::from(e - m).exp2();
        let q = round_half_even(a / ulp) * ulp;
        if q > self.max_finite() {
            // Anything that rounds above the largest finite value is inf (IEEE's
            // overflow under round-to-nearest).
            return sign * f64::INFINITY;
        }
        sign * q
    }

    /// What storing `x` in this format does to it.
    pub fn fate(&self, x: f64) -> Fate {
        if !x.is_finite() {
            return Fate::NonFinite;
        }
        if x == 0.0 {
            return Fate::Zero;
        }
        let r = self.round(x);
        if r.is_infinite() {
            Fate::Overflow
        } else if r == 0.0 {
            Fate::Underflow
        } else if r.abs() < self.min_normal() {
            Fate::Subnormal
        } else {
            Fate::Normal
        }
    }

    /// The relative error of storing `x`, `|round(x) - x| / |x|` (0 for 0).
    pub fn relative_error(&self, x: f64) -> f64 {
        if x == 0.0 {
            return 0.0;
        }
        ((self.round(x) - x) / x).abs()
    }
}

/// `floor(log2(a))` for a positive finite `a`, from the bits (a floating-point `log2`
/// can round up just below a power of two). f64 subnormals give -1023.
pub fn exponent_of(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

fn round_half_even(v: f64) -> f64 {
    let r = v.round();
    if (r - v).abs() == 0.5 && r % 2.0 != 0.0 {
        r - v.signum()
    } else {
        r
    }
}

/// f32 to bf16 bits, round to nearest even, as hardware does it: add `0x7FFF` plus the
/// lowest kept bit to the f32 bits, then drop the low 16 (NaN kept quiet).
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    let lsb = (bits >> 16) & 1;
    (bits.wrapping_add(0x7FFF + lsb) >> 16) as u16
}

/// bf16 bits to f32: the bits are f32's top half.
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// A histogram of `|x|` over powers of two: bin `k` counts values with
/// `2^k ≤ |x| < 2^(k+1)`; zeros and non-finite values are counted apart.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Log2Histogram {
    /// `(k, count)` in increasing `k`, only non-empty bins.
    pub bins: Vec<(i32, u64)>,
    /// Exact zeros.
    pub zeros: u64,
    /// Infinities and NaNs.
    pub non_finite: u64,
}

impl Log2Histogram {
    /// The histogram of `values`, each multiplied by `scale` first (a loss scale).
    pub fn of(values: &[f32], scale: f64) -> Self {
        let mut counts = std::collections::BTreeMap::<i32, u64>::new();
        let (mut zeros, mut non_finite) = (0, 0);
        for &v in values {
            let a = (f64::from(v) * scale).abs();
            if !a.is_finite() {
                non_finite += 1;
            } else if a == 0.0 {
                zeros += 1;
            } else {
                *counts.entry(exponent_of(a)).or_default() += 1;
            }
        }
        Log2Histogram {
            bins: counts.into_iter().collect(),
            zeros,
            non_finite,
        }
    }

    /// Non-zero finite values counted.
    pub fn nonzero(&self) -> u64 {
        self.bins.iter().map(|b| b.1).sum()
    }
}

/// How a set of values fares in a format, as counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FateCounts {
    /// Values that were exactly zero ([`Fate::Zero`]).
    pub zero: u64,
    /// Values that round to a normal number ([`Fate::Normal`]).
    pub normal: u64,
    /// Values kept as subnormals, with fewer significant bits ([`Fate::Subnormal`]).
    pub subnormal: u64,
    /// Non-zero values that round to zero ([`Fate::Underflow`]): lost gradient.
    pub underflow: u64,
    /// Finite values that round to infinity ([`Fate::Overflow`]).
    pub overflow: u64,
    /// Values already infinite or NaN ([`Fate::NonFinite`]).
    pub non_finite: u64,
}

impl FateCounts {
    /// Counts what storing each of `values · scale` in `format` does.
    pub fn of(format: &Format, values: &[f32], scale: f64) -> Self {
        let mut c = FateCounts::default();
        for &v in values {
            match format.fate(f64::from(v) * scale) {
                Fate::Zero => c.zero += 1,
                Fate::Normal => c.normal += 1,
                Fate::Subnormal => c.subnormal += 1,
                Fate::Underflow => c.underflow += 1,
                Fate::Overflow => c.overflow += 1,
                Fate::NonFinite => c.non_finite += 1,
            }
        }
        c
    }

    /// Non-zero values looked at.
    pub fn nonzero(&self) -> u64 {
        self.normal + self.subnormal + self.underflow + self.overflow + self.non_finite
    }

    /// The fraction of non-zero values that became zero.
    pub fn underflow_fraction(&self) -> f64 {
        self.underflow as f64 / self.nonzero().max(1) as f64
    }
}
