//! Element-wise comparison with tolerances by dtype.

use brrr_backend::{DType, HostData};

/// Allowed error: `|got - want| <= rel * |want| + abs * max(max|want|, scale_floor)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    pub rel: f64,
    pub abs: f64,
    /// The least magnitude the absolute term is scaled by. An output that is the small
    /// difference of large terms (a LayerNorm input gradient over two columns) carries
    /// rounding errors of the terms' size, not of its own: such a case sets the floor to
    /// the terms' magnitude. 0 for most cases.
    pub scale_floor: f64,
}

impl Tol {
    /// Exact equality (integers, casts, copies).
    pub const EXACT: Tol = Tol {
        rel: 0.0,
        abs: 0.0,
        scale_floor: 0.0,
    };

    pub fn times(self, f: f64) -> Tol {
        Tol {
            rel: self.rel * f,
            abs: self.abs * f,
            ..self
        }
    }

    /// This tolerance with its absolute term scaled by at least `floor`.
    pub fn with_scale_floor(self, floor: f64) -> Tol {
        Tol {
            scale_floor: floor,
            ..self
        }
    }
}

/// The base tolerance of a dtype: about two units in the last place of the result.
/// f16/bf16 results are rounded once from f32 on both sides, so two f32 results a hair
/// apart can round to neighbouring 16-bit values: one ulp of the output must pass.
pub fn tolerance(dtype: DType) -> Tol {
    let t = match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 2e-5,
        DType::F16 => 2.0 * 9.77e-4,
        DType::BF16 => 2.0 * 7.82e-3,
        DType::I32 | DType::U32 => 0.0,
    };
    Tol {
        rel: t,
        abs: t,
        scale_floor: 0.0,
    }
}

/// Compares `got` with `want`. `Ok(worst)` is the largest error as a fraction of the
/// allowed error (0 when exact); `Err` describes the first few bad elements.
pub fn compare(got: &HostData, want: &HostData, tol: Tol) -> Result<f64, String> {
    if got.dtype() != want.dtype() {
        return Err(format!(
            "dtype {} where the reference has {}",
            got.dtype(),
            want.dtype()
        ));
    }
    if got.len() != want.len() {
        return Err(format!(
            "length {} where the reference has {}",
            got.len(),
            want.len()
        ));
    }
    if matches!(got, HostData::I32(_) | HostData::U32(_)) {
        let (g, w) = (got.to_f64(), want.to_f64());
        let bad: Vec<usize> = (0..g.len()).filter(|&i| g[i] != w[i]).collect();
        if bad.is_empty() {
            return Ok(0.0);
        }
        let first: Vec<String> = bad
            .iter()
            .take(4)
            .map(|&i| format!("[{i}] got {} want {}", g[i], w[i]))
            .collect();
        return Err(format!(
            "{} of {} integers differ: {}",
            bad.len(),
            g.len(),
            first.join(", ")
        ));
    }
    let (g, w) = (got.to_f64(), want.to_f64());
    let scale = w
        .iter()
        .filter(|x| x.is_finite())
        .fold(tol.scale_floor, |m, x| m.max(x.abs()));
    let mut worst = 0.0f64;
    let mut bad = Vec::new();
    for i in 0..g.len() {
        let (a, b) = (g[i], w[i]);
        let ok_and_ratio = if a.is_nan() || b.is_nan() {
            None // NaN never passes
        } else if a.is_infinite() || b.is_infinite() {
            (a == b).then_some(0.0)
        } else {
            let err = (a - b).abs();
            let allowed = tol.rel * b.abs() + tol.abs * scale;
            if err == 0.0 {
                Some(0.0)
            } else if err <= allowed {
                Some(err / allowed)
            } else {
                None
            }
        };
        match ok_and_ratio {
            Some(r) => worst = worst.max(r),
            None => bad.push(i),
        }
    }
    if bad.is_empty() {
        return Ok(worst);
    }
    let first: Vec<String> = bad
        .iter()
        .take(4)
        .map(|&i| format!("[{i}] got {:e} want {:e}", g[i], w[i]))
        .collect();
    Err(format!(
        "{} of {} elements outside tolerance (rel {:.1e}, abs {:.1e} × max|want| {:.3e}): {}",
        bad.len(),
        g.len(),
        tol.rel,
        tol.abs,
        scale,
        first.join(", ")
    ))
}

/// Compares 8-bit codes packed four to a `u32`. Two backends compute a moment's new
/// value with different roundings (an FMA contracted or not, WGSL's inexact division and
/// square root), and a value that lands next to the midpoint between two codes may then
/// take either: each code may differ by one, and at most one code in 64 may differ.
/// `Ok(worst)` is the share of differing codes as a fraction of that allowance.
pub fn compare_codes(got: &HostData, want: &HostData) -> Result<f64, String> {
    let (HostData::U32(g), HostData::U32(w)) = (got, want) else {
        return Err(format!(
            "codes must be u32, got {} and reference {}",
            got.dtype(),
            want.dtype()
        ));
    };
    if g.len() != w.len() {
        return Err(format!(
            "length {} where the reference has {}",
            g.len(),
            w.len()
        ));
    }
    let bytes = |v: &[u32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let (gb, wb) = (bytes(g), bytes(w));
    let mut differ = 0usize;
    for (i, (a, b)) in gb.iter().zip(&wb).enumerate() {
        match a.abs_diff(*b) {
            0 => {}
            1 => differ += 1,
            d => return Err(format!("code [{i}] got {a} want {b} ({d} codes apart)")),
        }
    }
    let allowed = gb.len().div_ceil(64);
    if differ > allowed {
        return Err(format!(
            "{differ} of {} codes differ by one (at most {allowed} may)",
            gb.len()
        ));
    }
    Ok(differ as f64 / allowed.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_never_passes() {
        let a = HostData::F32(vec![1.0, f32::NAN]);
        assert!(compare(&a, &a, tolerance(DType::F32)).is_err());
        let b = HostData::F32(vec![1.0, 2.0]);
        assert!(
            compare(
                &a,
                &b,
                Tol {
                    rel: 1e9,
                    abs: 1e9,
                    scale_floor: 0.0
                }
            )
            .is_err()
        );
        assert!(
            compare(
                &b,
                &a,
                Tol {
                    rel: 1e9,
                    abs: 1e9,
                    scale_floor: 0.0
                }
            )
            .is_err()
        );
    }

    #[test]
    fn infinities_must_match() {
        let a = HostData::F32(vec![f32::INFINITY, -1.0]);
        assert_eq!(compare(&a, &a, Tol::EXACT), Ok(0.0));
        let b = HostData::F32(vec![f32::NEG_INFINITY, -1.0]);
        assert!(compare(&a, &b, tolerance(DType::F32)).is_err());
        let c = HostData::F32(vec![3e38, -1.0]);
        assert!(
            compare(
                &a,
                &c,
                Tol {
                    rel: 1e9,
                    abs: 1e9,
                    scale_floor: 0.0
                }
            )
            .is_err()
        );
    }

    #[test]
    fn tolerance_is_relative_plus_scaled_absolute() {
        let want = HostData::F32(vec![100.0, 1e-3]);
        let close = HostData::F32(vec![100.001, 1e-3 + 1e-3]);
        assert!(
            compare(
                &close,
                &want,
                Tol {
                    rel: 1e-5,
                    abs: 1e-5,
                    scale_floor: 0.0
                }
            )
            .is_ok()
        );
        let far = HostData::F32(vec![100.1, 1e-3]);
        assert!(
            compare(
                &far,
                &want,
                Tol {
                    rel: 1e-5,
                    abs: 1e-5,
                    scale_floor: 0.0
                }
            )
            .is_err()
        );
    }

    #[test]
    fn integers_are_exact_and_dtypes_must_match() {
        let a = HostData::I32(vec![1, 2, 3]);
        assert_eq!(compare(&a, &a, Tol::EXACT), Ok(0.0));
        assert!(
            compare(
                &HostData::I32(vec![1, 2, 4]),
                &a,
                Tol {
                    rel: 1.0,
                    abs: 1.0,
                    scale_floor: 0.0
                }
            )
            .is_err()
        );
        assert!(compare(&HostData::U32(vec![1, 2, 3]), &a, Tol::EXACT).is_err());
        assert!(compare(&HostData::I32(vec![1, 2]), &a, Tol::EXACT).is_err());
    }

    #[test]
    fn a_scale_floor_admits_the_rounding_of_cancelled_terms_only() {
        // A result of 6e-6 left from terms of size ~1, off by one f64 ulp of those terms.
        let want = HostData::F64(vec![6.224199918442836e-6, 1e-6]);
        let got = HostData::F64(vec![6.224199918606427e-6, 1e-6]);
        let tol = tolerance(DType::F64);
        assert!(compare(&got, &want, tol).is_err());
        assert!(compare(&got, &want, tol.with_scale_floor(1.0)).is_ok());
        // The floor does not excuse an error of the terms' own size.
        let wrong = HostData::F64(vec![1e-3, 1e-6]);
        assert!(compare(&wrong, &want, tol.with_scale_floor(1.0)).is_err());
    }
}
