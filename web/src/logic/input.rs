//! Reading controls: sizes typed by readers, and the logarithmic slider's mapping.

/// Slider positions of a size control: `0..=SLIDER_STEPS`.
pub const SLIDER_STEPS: f64 = 1000.0;

/// A size control's range and scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliderScale {
    /// Smallest value.
    pub min: u64,
    /// Largest value.
    pub max: u64,
    /// Linear instead of logarithmic (for small ranges such as degrees).
    pub linear: bool,
}

impl SliderScale {
    /// The slider position of `v`: over `log2(v)` so that 1 and 100 000 are both
    /// reachable, or linear.
    pub fn position(&self, v: u64) -> f64 {
        let (lo, hi, v) = (self.min.max(1) as f64, self.max as f64, v as f64);
        let f = if self.linear {
            (v - lo) / (hi - lo).max(1.0)
        } else {
            (v.log2() - lo.log2()) / (hi.log2() - lo.log2()).max(1e-9)
        };
        (f * SLIDER_STEPS).clamp(0.0, SLIDER_STEPS)
    }

    /// The value at slider position `pos`, rounded and clamped into the range.
    pub fn value(&self, pos: f64) -> u64 {
        let (lo, hi) = (self.min.max(1) as f64, self.max as f64);
        let f = (pos / SLIDER_STEPS).clamp(0.0, 1.0);
        let v = if self.linear {
            lo + f * (hi - lo)
        } else {
            2f64.powf(lo.log2() + f * (hi.log2() - lo.log2()))
        };
        (v.round() as u64).clamp(self.min, self.max)
    }
}

/// Parses a size typed by a reader: digits, optionally with `_` or `,` separators or an
/// exponent (`1e6`). `None` for anything else or a negative number.
pub fn parse_size(s: &str) -> Option<u64> {
    let t: String = s
        .trim()
        .chars()
        .filter(|c| *c != '_' && *c != ',')
        .collect();
    if let Ok(v) = t.parse::<u64>() {
        return Some(v);
    }
    let f: f64 = t.parse().ok()?;
    (0.0..1.8e19).contains(&f).then(|| f.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_separators_and_exponents() {
        assert_eq!(parse_size("50_257"), Some(50257));
        assert_eq!(parse_size(" 1,024 "), Some(1024));
        assert_eq!(parse_size("1e6"), Some(1_000_000));
        assert_eq!(parse_size("-3"), None);
        assert_eq!(parse_size("abc"), None);
        assert_eq!(parse_size("1e30"), None);
    }

    #[test]
    fn log_slider_round_trips_its_ends_and_powers_of_two() {
        let s = SliderScale {
            min: 1,
            max: 1 << 16,
            linear: false,
        };
        assert_eq!(s.value(0.0), 1);
        assert_eq!(s.value(SLIDER_STEPS), 1 << 16);
        assert_eq!(s.value(s.position(256)), 256);
        assert_eq!(s.value(-5.0), 1);
        let lin = SliderScale {
            min: 1,
            max: 64,
            linear: true,
        };
        assert_eq!(lin.value(lin.position(8)), 8);
    }
}
