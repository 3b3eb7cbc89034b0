//! Axes for the SVG charts: the range a set of values needs, linear or logarithmic, the
//! ticks to label, and the mapping from data to pixels. Pure arithmetic, so the chart
//! component only draws.

/// One axis: a data range drawn over a pixel range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Axis {
    /// Smallest value shown.
    pub min: f64,
    /// Largest value shown.
    pub max: f64,
    /// Logarithmic (base 10) instead of linear.
    pub log: bool,
}

impl Axis {
    /// An axis covering every finite value in `values` (positive ones only when `log`),
    /// widened to whole decades for a log axis and to multiples of a "nice" step for a
    /// linear one (include 0 in `values` for an axis that starts at 0).
    /// With nothing to cover, `[1, 10]`.
    pub fn covering(values: impl IntoIterator<Item = f64>, log: bool) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values {
            if v.is_finite() && (!log || v > 0.0) {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
        if !lo.is_finite() {
            return Axis {
                min: 1.0,
                max: 10.0,
                log,
            };
        }
        if log {
            let (a, b) = (lo.log10().floor(), hi.log10().ceil());
            let b = if b <= a { a + 1.0 } else { b };
            Axis {
                min: 10f64.powf(a),
                max: 10f64.powf(b),
                log,
            }
        } else {
            let hi = if hi <= lo { lo + 1.0 } else { hi };
            let step = nice_step((hi - lo) / 5.0);
            Axis {
                min: (lo / step).floor() * step,
                max: (hi / step).ceil() * step,
                log,
            }
        }
    }

    /// Where `v` falls, from 0 (at `min`) to 1 (at `max`); values outside the range fall
    /// outside `[0, 1]`. A non-positive value on a log axis maps to 0.
    pub fn fraction(&self, v: f64) -> f64 {
        if self.log {
            if v <= 0.0 {
                return 0.0;
            }
            (v.log10() - self.min.log10()) / (self.max.log10() - self.min.log10())
        } else {
            (v - self.min) / (self.max - self.min)
        }
    }

    /// Values to draw grid lines and labels at: each decade on a log axis (every other
    /// one when there are more than 8), multiples of a nice step on a linear one.
    pub fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.min.log10().round() as i32,
                self.max.log10().round() as i32,
            );
            let stride = if b - a > 8 { 2 } else { 1 };
            (a..=b).step_by(stride).map(|e| 10f64.powi(e)).collect()
        } else {
            let step = nice_step((self.max - self.min) / 5.0);
            let first = (self.min / step).ceil() as i64;
            let last = (self.max / step).floor() as i64;
            (first..=last).map(|i| i as f64 * step).collect()
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
pub fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let pow = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * pow >= raw * (1.0 - 1e-12) {
            return m * pow;
        }
    }
    10.0 * pow
}

/// A tick label: powers of ten as `1e6`, others in three significant figures.
pub fn tick_label(v: f64, log: bool) -> String {
    if log {
        let e = v.log10().round() as i32;
        match e {
            0 => "1".into(),
            1 => "10".into(),
            2 => "100".into(),
            -1 => "0.1".into(),
            _ => format!("1e{e}"),
        }
    } else {
        trimmed(brrr_perf::table::sig3(v))
    }
}

/// A tick label with an SI prefix and no unit (`1`, `10`, `1k`, `100M`, `1T`, `0.1`),
/// for axes whose unit is in their title.
pub fn si_tick(v: f64) -> String {
    let a = v.abs();
    for (scale, p) in [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if a >= scale {
            return format!("{}{p}", trimmed(brrr_perf::table::sig3(v / scale)));
        }
    }
    if a >= 1e-3 || a == 0.0 {
        trimmed(brrr_perf::table::sig3(v))
    } else {
        format!("{v:.0e}")
    }
}

/// `1.50` → `1.5`, `2.00` → `2`: tick labels need no trailing zeros.
fn trimmed(s: String) -> String {
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_axis_snaps_to_decades() {
        let a = Axis::covering([0.3, 250.0], true);
        assert_eq!((a.min, a.max), (0.1, 1000.0));
        assert_eq!(a.ticks(), vec![0.1, 1.0, 10.0, 100.0, 1000.0]);
        assert!((a.fraction(10.0) - 0.5).abs() < 1e-12);
        // Non-positive values are ignored on a log axis.
        assert_eq!(Axis::covering([0.0, -1.0, 5.0], true).min, 1.0);
    }

    #[test]
    fn linear_axis_uses_nice_steps_from_zero() {
        let a = Axis::covering([3.0, 87.0], false);
        assert_eq!((a.min, a.max), (0.0, 100.0));
        assert_eq!(a.ticks(), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
    }

    #[test]
    fn empty_input_gives_a_usable_axis() {
        let a = Axis::covering([f64::NAN], false);
        assert!(a.max > a.min);
        assert_eq!(tick_label(1e6, true), "1e6");
        assert_eq!(tick_label(100.0, true), "100");
        assert_eq!(si_tick(1e12), "1T");
        assert_eq!(si_tick(5e4), "50k");
        assert_eq!(si_tick(0.1), "0.1");
        assert_eq!(si_tick(50304.0), "50.3k");
    }
}
