use half::{bf16, f16};
use std::fmt;

/// Element type of a buffer, known at run time (as in candle), so one `Tensor` type
/// covers every precision and mixed-precision code can choose dtypes per op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary16: 5 exponent bits, 10 mantissa bits. Range ±65504, which is why
    /// f16 training needs loss scaling.
    F16,
    /// bfloat16: f32's 8 exponent bits with 7 mantissa bits. f32's range, less precision.
    BF16,
    /// IEEE binary32, the default training dtype and what 16-bit data is computed in.
    F32,
    /// Used for reference computations and finite-difference gradient checks.
    F64,
    /// 32-bit signed integer: cross-entropy targets (negative = ignored) and token ids.
    I32,
    /// 32-bit unsigned integer: token ids and the segment ids of a document mask.
    U32,
}

impl DType {
    /// Every dtype, in declaration order (floats lowest precision first, then the
    /// integers).
    pub const ALL: [DType; 6] = [
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::I32,
        DType::U32,
    ];
    /// The float dtypes, lowest precision first.
    pub const FLOATS: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];

    /// Bytes per element: 2 for f16/bf16, 4 for f32/i32/u32, 8 for f64.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 => 8,
        }
    }

    /// Whether this is one of [`DType::FLOATS`] (the dtypes float kernels compute on).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// The name used in errors, configs and safetensors headers.
    pub fn as_str(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::U32 => "u32",
        }
    }

    /// Machine epsilon (distance from 1.0 to the next representable value); the
    /// natural unit for comparison tolerances.
    pub fn epsilon(self) -> f64 {
        match self {
            DType::F16 => f64::from(f16::EPSILON),
            DType::BF16 => f64::from(bf16::EPSILON),
            DType::F32 => f64::from(f32::EPSILON),
            DType::F64 => f64::EPSILON,
            DType::I32 | DType::U32 => 0.0,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DType {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| {
                crate::Error::Parse(format!(
                    "unknown dtype '{s}' (expected one of f16, bf16, f32, f64, i32, u32)"
                ))
            })
    }
}

/// A Rust scalar type that maps to a [`DType`].
///
/// Implemented for `half::f16`, `half::bf16`, `f32`, `f64`, `i32` and `u32`; it is how
/// [`HostData::from_vec`](crate::HostData::from_vec) and
/// [`HostData::as_slice`](crate::HostData::as_slice) know which variant a `Vec<T>` is.
pub trait Element: bytemuck::Pod + Copy + Send + Sync + 'static + fmt::Debug {
    /// The dtype of this Rust type.
    const DTYPE: DType;
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
}
impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for f64 {
    const DTYPE: DType = DType::F64;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl Element for u32 {
    const DTYPE: DType = DType::U32;
}
