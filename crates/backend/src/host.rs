use crate::{DType, Element, Error, Result};
use half::{bf16, f16};

/// Data on the host, tagged with its dtype. It is what uploads take and readbacks
/// return, and it is the CPU backend's storage.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    /// [`DType::F16`] elements.
    F16(Vec<f16>),
    /// [`DType::BF16`] elements.
    BF16(Vec<bf16>),
    /// [`DType::F32`] elements.
    F32(Vec<f32>),
    /// [`DType::F64`] elements.
    F64(Vec<f64>),
    /// [`DType::I32`] elements.
    I32(Vec<i32>),
    /// [`DType::U32`] elements.
    U32(Vec<u32>),
}

impl HostData {
    /// The dtype of the elements (the variant).
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F16(_) => DType::F16,
            HostData::BF16(_) => DType::BF16,
            HostData::F32(_) => DType::F32,
            HostData::F64(_) => DType::F64,
            HostData::I32(_) => DType::I32,
            HostData::U32(_) => DType::U32,
        }
    }

    /// Number of elements (not bytes).
    pub fn len(&self) -> usize {
        match self {
            HostData::F16(v) => v.len(),
            HostData::BF16(v) => v.len(),
            HostData::F32(v) => v.len(),
            HostData::F64(v) => v.len(),
            HostData::I32(v) => v.len(),
            HostData::U32(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` zeros of `dtype`.
    ///
    /// Every dtype comes from the allocator's zeroed memory (`calloc`): the standard
    /// library does that for `vec![0; n]` of primitive numbers, and 16-bit floats are
    /// made as `u16` zeros and reinterpreted (same size and alignment, and zero bits are
    /// +0.0), rather than written element by element.
    pub fn zeros(dtype: DType, len: usize) -> Self {
        match dtype {
            DType::F16 => HostData::F16(bytemuck::allocation::cast_vec(vec![0u16; len])),
            DType::BF16 => HostData::BF16(bytemuck::allocation::cast_vec(vec![0u16; len])),
            DType::F32 => HostData::F32(vec![0.0; len]),
            DType::F64 => HostData::F64(vec![0.0; len]),
            DType::I32 => HostData::I32(vec![0; len]),
            DType::U32 => HostData::U32(vec![0; len]),
        }
    }

    /// Converts f64 values to `dtype`: floats correctly rounded to nearest even (for f16
    /// and bf16 through [`f16_from_f64`] / [`bf16_from_f64`], so once, not twice);
    /// integers truncated toward zero and saturated at the type's range, NaN giving 0
    /// (Rust's `as`).
    pub fn from_f64(dtype: DType, v: &[f64]) -> Self {
        match dtype {
            DType::F16 => HostData::F16(v.iter().map(|&x| f16_from_f64(x)).collect()),
            DType::BF16 => HostData::BF16(v.iter().map(|&x| bf16_from_f64(x)).collect()),
            DType::F32 => HostData::F32(v.iter().map(|&x| x as f32).collect()),
            DType::F64 => HostData::F64(v.to_vec()),
            DType::I32 => HostData::I32(v.iter().map(|&x| x as i32).collect()),
            DType::U32 => HostData::U32(v.iter().map(|&x| x as u32).collect()),
        }
    }

    /// Converts f32 values to `dtype` (floats rounded to nearest even, integers as in
    /// [`HostData::from_f64`]).
    pub fn from_f32(dtype: DType, v: &[f32]) -> Self {
        match dtype {
            DType::F32 => HostData::F32(v.to_vec()),
            DType::F16 => HostData::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
            DType::BF16 => HostData::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
            _ => HostData::from_f64(dtype, &v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()),
        }
    }

    /// Every element widened to f64 (exact for every dtype here).
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            HostData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            HostData::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            HostData::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            HostData::F64(v) => v.clone(),
            HostData::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            HostData::U32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        }
    }

    /// Every element as f32 (rounding f64; integers above 2^24 lose precision).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            HostData::F32(v) => v.clone(),
            HostData::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            HostData::BF16(v) => v.iter().map(|x| x.to_f32()).collect(),
            other => other.to_f64().into_iter().map(|x| x as f32).collect(),
        }
    }

    /// Borrows the data as `&[T]` if the dtype is `T`'s; otherwise an [`Error::DType`].
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        let bytes: &[u8] = self.as_bytes();
        if T::DTYPE != self.dtype() {
            return Err(Error::DType {
                op: "HostData::as_slice",
                expected: T::DTYPE,
                got: self.dtype(),
            });
        }
        Ok(bytemuck::cast_slice(bytes))
    }

    /// The data as a `Vec<T>` if the dtype is `T`'s (a copy of the elements, made by
    /// [`HostData::as_slice`]); otherwise an [`Error::DType`].
    pub fn into_vec<T: Element>(self) -> Result<Vec<T>> {
        Ok(self.as_slice::<T>()?.to_vec())
    }

    /// Wraps a vector in the variant of `T`'s dtype (the elements are copied into a new
    /// vector).
    pub fn from_vec<T: Element>(v: Vec<T>) -> Self {
        let bytes: &[u8] = bytemuck::cast_slice(&v);
        HostData::from_bytes(T::DTYPE, bytes).expect("length is a multiple of the element size")
    }

    /// The raw bytes of the elements, in the machine's byte order (little-endian on every
    /// target brrr builds for: x86-64, aarch64, wasm32).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            HostData::F16(v) => bytemuck::cast_slice(v),
            HostData::BF16(v) => bytemuck::cast_slice(v),
            HostData::F32(v) => bytemuck::cast_slice(v),
            HostData::F64(v) => bytemuck::cast_slice(v),
            HostData::I32(v) => bytemuck::cast_slice(v),
            HostData::U32(v) => bytemuck::cast_slice(v),
        }
    }

    /// Builds from raw bytes in the machine's byte order, as [`HostData::as_bytes`]
    /// gives them (copied, so they need not be aligned); the length must be a multiple
    /// of the element size, otherwise an [`Error::Invalid`].
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> Result<Self> {
        let es = dtype.size_in_bytes();
        if !bytes.len().is_multiple_of(es) {
            return Err(Error::invalid(
                "HostData::from_bytes",
                format!(
                    "{} bytes is not a whole number of {dtype} elements ({es} bytes each)",
                    bytes.len()
                ),
            ));
        }
        // `pod_collect_to_vec` copies, so unaligned input is fine.
        Ok(match dtype {
            DType::F16 => HostData::F16(bytemuck::pod_collect_to_vec(bytes)),
            DType::BF16 => HostData::BF16(bytemuck::pod_collect_to_vec(bytes)),
            DType::F32 => HostData::F32(bytemuck::pod_collect_to_vec(bytes)),
            DType::F64 => HostData::F64(bytemuck::pod_collect_to_vec(bytes)),
            DType::I32 => HostData::I32(bytemuck::pod_collect_to_vec(bytes)),
            DType::U32 => HostData::U32(bytemuck::pod_collect_to_vec(bytes)),
        })
    }
}

/// f64 → f32 rounded *to odd*: exact values stay; an inexact one is truncated toward
/// zero and its last mantissa bit set. Rounding that result again, to nearest even, into
/// a format with at least two fewer mantissa bits (f16 has 11, bf16 8, f32 24) gives
/// the correctly rounded f64 value: the odd bit records "there was more" without ever
/// creating a false tie (Boldo & Melquiond 2008, *Emulation of FMA and correctly
/// rounded sums: proved algorithms using rounding to odd*, IEEE Trans. Computers 57(4)).
///
/// This exists because `half` 2.7's `f16::from_f64` goes through `as f32` on CPUs with
/// F16C (a double rounding) and its `bf16::from_f64` ignores the low 32 mantissa bits
/// when breaking ties; both are off by one ulp on rare inputs.
pub fn f64_to_f32_round_odd(x: f64) -> f32 {
    let t = x as f32;
    if x.is_nan() || f64::from(t) == x {
        return t;
    }
    let mut bits = t.to_bits();
    if f64::from(t).abs() > x.abs() {
        bits -= 1; // rounded away from zero: step back (|t| > |x| >= 0, so t != 0)
    }
    f32::from_bits(bits | 1)
}

/// f64 → f16, correctly rounded to nearest even (see [`f64_to_f32_round_odd`]).
pub fn f16_from_f64(x: f64) -> f16 {
    f16::from_f32(f64_to_f32_round_odd(x))
}

/// f64 → bf16, correctly rounded to nearest even (see [`f64_to_f32_round_odd`]).
pub fn bf16_from_f64(x: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_round_odd(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Just above a tie of the 16-bit format, by less than f32 can hold: rounding through
    /// f32 first lands exactly on the tie and goes to even (down); correct rounding goes up.
    #[test]
    fn from_f64_rounds_once() {
        let tiny = 2f64.powi(-40);
        let x16 = 1.0 + 2f64.powi(-11) + tiny; // f16 has 10 fraction bits
        let xb = 1.0 + 2f64.powi(-8) + tiny; // bf16 has 7
        let got = HostData::from_f64(DType::F16, &[x16, -x16]).to_f64();
        assert_eq!(got, [1.0 + 2f64.powi(-10), -(1.0 + 2f64.powi(-10))]);
        let got = HostData::from_f64(DType::BF16, &[xb, -xb]).to_f64();
        assert_eq!(got, [1.0 + 2f64.powi(-7), -(1.0 + 2f64.powi(-7))]);
        // Exact ties still go to even, and values representable in f32 are unchanged.
        let tie = 1.0 + 2f64.powi(-11);
        assert_eq!(HostData::from_f64(DType::F16, &[tie]).to_f64(), [1.0]);
        assert_eq!(f64_to_f32_round_odd(0.1f32.into()), 0.1f32);
        // Overflow and underflow keep their sign.
        assert_eq!(f16_from_f64(1e300), f16::INFINITY);
        assert_eq!(f16_from_f64(-1e-300).to_bits(), 0x8000);
        assert!(bf16_from_f64(f64::NAN).is_nan());
    }
}
