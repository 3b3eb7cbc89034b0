//! Weight-only quantization: a weight matrix stored in fewer bits with scales, read back
//! ([`Quantized::dequantize`]) for the product. Decoding one request is bound by reading
//! the weights (see the serving chapter), so bytes per weight set its speed limit, and
//! the question each format answers is how much accuracy those bytes cost.
//!
//! - [`WeightFormat::Int8`]: one scale per output channel (row of `W: [out, in]`),
//!   `absmax / 127`, codes rounded to nearest in `[-127, 127]` (LLM.int8()'s vector-wise
//!   quantization without its outlier split, Dettmers et al. 2022).
//! - [`WeightFormat::Int4`]: one scale per `group` consecutive weights of a row,
//!   `absmax / 7` (a row's last group shorter when `group` does not divide the row),
//!   codes in `[-7, 7]` packed two a byte (round-to-nearest with groups,
//!   the baseline of GPTQ and AWQ, Frantar et al. 2023, Lin et al. 2024).
//! - [`WeightFormat::Fp8E4m3`]: one scale per tensor mapping `absmax` to 448, the
//!   largest E4M3 value, each weight rounded to the nearest E4M3 number (Micikevicius
//!   et al. 2022, "FP8 Formats for Deep Learning"); emulated: the codes are bytes and
//!   [`e4m3_value`] decodes them.
//!
//! Scales are stored as f16 (2 bytes), as serving stacks do; [`Quantized::bytes`]
//! counts codes and scales. Plain Rust on f32 slices: the browser app can run it.

use half::f16;

/// How a weight matrix is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightFormat {
    /// 8-bit integers, a scale per output channel.
    Int8,
    /// 4-bit integers, a scale per `group` weights of a row.
    Int4 {
        /// Weights per scale.
        group: usize,
    },
    /// 8-bit floats (E4M3), one scale per tensor.
    Fp8E4m3,
}

impl std::fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WeightFormat::Int8 => write!(f, "int8"),
            WeightFormat::Int4 { group } => write!(f, "int4-g{group}"),
            WeightFormat::Fp8E4m3 => write!(f, "fp8-e4m3"),
        }
    }
}

impl std::str::FromStr for WeightFormat {
    type Err = String;

    /// `int8`, `int4` (groups of 32), `int4-gN`, `fp8` or `fp8-e4m3`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "int8" => Ok(WeightFormat::Int8),
            "int4" => Ok(WeightFormat::Int4 { group: 32 }),
            "fp8" | "fp8-e4m3" => Ok(WeightFormat::Fp8E4m3),
            _ => match s.strip_prefix("int4-g").map(str::parse::<usize>) {
                Some(Ok(group)) if group > 0 => Ok(WeightFormat::Int4 { group }),
                _ => Err(format!(
                    "unknown weight format {s:?}: int8, int4, int4-gN (N weights per scale) or fp8"
                )),
            },
        }
    }
}

/// A `[rows, cols]` matrix in a [`WeightFormat`].
#[derive(Clone, Debug, PartialEq)]
pub struct Quantized {
    /// The format.
    pub format: WeightFormat,
    /// Rows (output channels).
    pub rows: usize,
    /// Columns (inputs).
    pub cols: usize,
    /// The codes: a byte each (int8 as two's complement, fp8), or two a byte (int4, low
    /// nibble first, offset by 8).
    pub codes: Vec<u8>,
    /// The scales, in order (per row, per group, or one).
    pub scales: Vec<f16>,
}

/// The largest finite E4M3 value.
pub const E4M3_MAX: f32 = 448.0;

/// The value of E4M3 code `c` (1 sign, 4 exponent bits biased by 7, 3 mantissa bits;
/// no infinities; `S.1111.111` is NaN), as in the OCP 8-bit floating-point spec.
pub fn e4m3_value(c: u8) -> f32 {
    let sign = if c & 0x80 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (i32::from((c >> 3) & 0xf), f32::from(c & 0x7));
    if e == 0xf && m == 7.0 {
        return f32::NAN;
    }
    match e {
        0 => sign * m / 8.0 * 2f32.powi(-6),
        _ => sign * (1.0 + m / 8.0) * 2f32.powi(e - 7),
    }
}

/// The E4M3 code nearest to `x` (ties to the even code), saturating at ±448.
pub fn e4m3_code(x: f32) -> u8 {
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = x.abs().min(E4M3_MAX);
    // The 127 non-negative finite codes are in increasing order of value: a binary
    // search finds the neighbours.
    let (mut lo, mut hi) = (0u8, 0x7e);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if e4m3_value(mid) <= a {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let (dl, dh) = (a - e4m3_value(lo), e4m3_value(hi) - a);
    let c = if dl < dh || (dl == dh && lo % 2 == 0) {
        lo
    } else {
        hi
    };
    sign | c
}

fn scale_of(values: &[f32], top: f32) -> f32 {
    let absmax = values.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    // Rounded to f16 first, so the codes are computed with the scale that is stored;
    // never below f16's smallest step, so tiny weights do not divide by a zero scale,
    // and never above its largest value, so huge ones do not get an infinite one.
    let s = if absmax > 0.0 { absmax / top } else { 1.0 };
    let (lo, hi) = (f16::MIN_POSITIVE_SUBNORMAL.to_f32(), f16::MAX.to_f32());
    f16::from_f32(s.clamp(lo, hi)).to_f32()
}

impl Quantized {
    /// Quantizes `w: [rows, cols]` (row-major). Errors on a size mismatch, an empty
    /// group, or a weight that is not finite.
    pub fn quantize(
        w: &[f32],
        rows: usize,
        cols: usize,
        format: WeightFormat,
    ) -> Result<Self, String> {
        if rows.checked_mul(cols) != Some(w.len()) {
            return Err(format!("{} weights are not {rows} × {cols}", w.len()));
        }
        if w.iter().any(|x| !x.is_finite()) {
            return Err("a weight is not finite".into());
        }
        let (codes, scales) = match format {
            WeightFormat::Int8 => int_codes(w, cols, cols, 127.0),
            WeightFormat::Int4 { group } => {
                if group == 0 {
                    return Err("int4 groups must hold at least one weight".into());
                }
                let (c, s) = int_codes(w, cols, group, 7.0);
                let packed = c
                    .chunks(2)
                    .map(|p| {
                        let hi = p.get(1).map_or(8, |h| h.wrapping_add(8));
                        (p[0].wrapping_add(8) & 0xf) | (hi << 4)
                    })
                    .collect();
                (packed, s)
            }
            WeightFormat::Fp8E4m3 => {
                let s = scale_of(w, E4M3_MAX);
                (
                    w.iter().map(|x| e4m3_code(x / s)).collect(),
                    vec![f16::from_f32(s)],
                )
            }
        };
        Ok(Quantized {
            format,
            rows,
            cols,
            codes,
            scales,
        })
    }

    /// The matrix back in f32: each code times its scale.
    pub fn dequantize(&self) -> Vec<f32> {
        let n = self.rows * self.cols;
        // Scale of element i with `per` weights a scale, each row starting a new scale.
        let scale = |i: usize, per: usize| {
            let (row, col) = (i / self.cols, i % self.cols);
            self.scales[row * self.cols.div_ceil(per) + col / per].to_f32()
        };
        match self.format {
            WeightFormat::Int8 => (0..n)
                .map(|i| f32::from(self.codes[i] as i8) * scale(i, self.cols))
                .collect(),
            WeightFormat::Int4 { group } => (0..n)
                .map(|i| {
                    let nibble = (self.codes[i / 2] >> (4 * (i % 2))) & 0xf;
                    f32::from(nibble as i8 - 8) * scale(i, group)
                })
                .collect(),
            WeightFormat::Fp8E4m3 => {
                let s = self.scales[0].to_f32();
                self.codes.iter().map(|&c| e4m3_value(c) * s).collect()
            }
        }
    }

    /// Bytes stored: codes and f16 scales.
    pub fn bytes(&self) -> usize {
        self.codes.len() + 2 * self.scales.len()
    }
}

/// Symmetric integer codes in `[-top, top]` (as `u8` bit patterns of `i8`), with a
/// scale per `per` consecutive values of each row of `cols`; a row's last group is
/// shorter when `per` does not divide it.
fn int_codes(w: &[f32], cols: usize, per: usize, top: f32) -> (Vec<u8>, Vec<f16>) {
    let mut codes = Vec::with_capacity(w.len());
    let mut scales = Vec::new();
    for chunk in w.chunks(cols.max(1)).flat_map(|row| row.chunks(per)) {
        let s = scale_of(chunk, top);
        scales.push(f16::from_f32(s));
        codes.extend(
            chunk
                .iter()
                .map(|x| (x / s).round().clamp(-top, top) as i8 as u8),
        );
    }
    (codes, scales)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn weights(n: usize, rng: &mut impl Rng) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-0.1f32..0.1)).collect()
    }

    #[test]
    fn each_weight_is_within_half_a_step_of_its_scale() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let (rows, cols) = (8, 64);
        let w = weights(rows * cols, &mut rng);
        for (format, steps) in [
            (WeightFormat::Int8, 127.0),
            (WeightFormat::Int4 { group: 16 }, 7.0),
        ] {
            let q = Quantized::quantize(&w, rows, cols, format).unwrap();
            let per = match format {
                WeightFormat::Int4 { group } => group,
                _ => cols,
            };
            for (i, (a, b)) in w.iter().zip(q.dequantize()).enumerate() {
                let absmax = w[i / per * per..][..per]
                    .iter()
                    .fold(0f32, |m, x| m.max(x.abs()));
                // Half a step, and the f16 rounding of the scale (2^-11 relative).
                assert!(
                    (a - b).abs() <= absmax / steps * (0.5 + 1e-3) + 1e-7,
                    "{format} {i}: {a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn bytes_are_a_quarter_and_about_an_eighth_of_f32() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let w = weights(256 * 256, &mut rng);
        let f32_bytes = 4 * w.len();
        let q8 = Quantized::quantize(&w, 256, 256, WeightFormat::Int8).unwrap();
        assert_eq!(q8.bytes(), w.len() + 2 * 256);
        let q4 = Quantized::quantize(&w, 256, 256, WeightFormat::Int4 { group: 128 }).unwrap();
        assert_eq!(q4.bytes(), w.len() / 2 + 2 * w.len() / 128);
        assert!(q8.bytes() * 4 <= f32_bytes * 102 / 100 && q4.bytes() * 8 <= f32_bytes * 104 / 100);
    }

    #[test]
    fn e4m3_codes_round_to_the_nearest_value() {
        assert_eq!(e4m3_value(0x7e), 448.0);
        assert!(e4m3_value(0x7f).is_nan());
        assert_eq!(e4m3_value(0x01), 2f32.powi(-9)); // the smallest subnormal
        assert_eq!(e4m3_value(0x38), 1.0);
        assert_eq!(e4m3_code(1.0), 0x38);
        assert_eq!(e4m3_code(-448.0), 0xfe);
        assert_eq!(e4m3_code(1e6), 0x7e); // saturates
        // Between 1 and 1.125 (codes 0x38, 0x39): the midpoint goes to the even code.
        assert_eq!(e4m3_code(1.0625), 0x38);
        assert_eq!(e4m3_code(1.07), 0x39);
        // Every finite code is its own nearest.
        for c in (0u8..0x7f).chain(0x80..0xff) {
            let v = e4m3_value(c);
            assert_eq!(e4m3_value(e4m3_code(v)), v, "code {c:#x}");
        }
        // fp8 keeps about 2^-4 relative precision over the tensor's range.
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let w = weights(1024, &mut rng);
        let q = Quantized::quantize(&w, 1, 1024, WeightFormat::Fp8E4m3).unwrap();
        for (a, b) in w.iter().zip(q.dequantize()) {
            assert!((a - b).abs() <= a.abs() / 16.0 + 1e-4, "{a} vs {b}");
        }
    }

    #[test]
    fn bad_input_is_an_error_and_formats_parse() {
        assert!(Quantized::quantize(&[0.0; 6], 2, 4, WeightFormat::Int8).is_err());
        assert!(Quantized::quantize(&[0.0; 8], 2, 4, WeightFormat::Int4 { group: 0 }).is_err());
        // Groups of 3 in rows of 4: a group of 3 and one of 1 a row.
        let w = [0.3, -0.2, 0.1, 0.05, 1.0, 0.5, -0.25, 0.7];
        let q = Quantized::quantize(&w, 2, 4, WeightFormat::Int4 { group: 3 }).unwrap();
        assert_eq!(q.scales.len(), 4);
        for (a, b) in w.iter().zip(q.dequantize()) {
            // Half a step of the largest group's scale, 1/7.
            assert!((a - b).abs() <= 1.0 / 7.0 * 0.51, "{a} vs {b}");
        }
        assert!(Quantized::quantize(&[f32::NAN; 4], 1, 4, WeightFormat::Int8).is_err());
        // Tiny weights keep a nonzero scale: finite codes, values near zero.
        let tiny = Quantized::quantize(&[1e-9, -1e-9], 1, 2, WeightFormat::Int8).unwrap();
        assert!(
            tiny.dequantize()
                .iter()
                .all(|x| x.is_finite() && x.abs() < 1e-6)
        );
        let zeros = Quantized::quantize(&[0.0; 4], 1, 4, WeightFormat::Int4 { group: 2 }).unwrap();
        assert_eq!(zeros.dequantize(), vec![0.0; 4]);
        for s in ["int8", "int4", "int4-g128", "fp8"] {
            let f: WeightFormat = s.parse().unwrap();
            assert!(f.to_string().starts_with(&s[..3]));
        }
        assert!("int3".parse::<WeightFormat>().is_err());
        assert!("int4-g0".parse::<WeightFormat>().is_err());
    }
}
