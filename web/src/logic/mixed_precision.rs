//! Mixed precision: a value stored in f32, f16 and bf16 bit by bit, the formats'
//! ranges, and the loss scale of an fp16 run. Rounding, fates and ranges are
//! `brrr_amp::numerics`'; this module only splits a rounded value into its three bit
//! fields for drawing. The run's configuration is a `brrr_amp::AmpConfig` checked by the
//! scaler's own `validate`, and [`summarize`] reads the `(scale, skipped)` of every step
//! the trainer reported.

use brrr_amp::numerics::{BF16, F16, F32, FORMATS, Fate, Format, exponent_of};
use brrr_amp::{AmpConfig, AmpMode, ScalerConfig};
use brrr_train::TrainConfig;

use crate::logic::sampling::TrainPreset;

/// The training page's preset the fp16 run uses (`logic::sampling::PRESETS`): the
/// smallest, so that a run of a few dozen steps on the CPU in wasm takes seconds.
pub const AMP_PRESET: &str = "micro";

/// The slider's range, in `log10 |x|`: from below f32's smallest subnormal (1.4e-45)
/// to above its largest value (3.4e38), so every fate of every format is reachable.
pub const LOG10_RANGE: (f64, f64) = (-46.0, 39.0);

/// A format's three bit fields for a value already rounded to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    /// 1 for negative (and -0).
    pub sign: u64,
    /// The biased exponent field: 0 for zeros and subnormals, all ones for inf/NaN.
    pub exponent: u64,
    /// The stored mantissa (fraction) field.
    pub mantissa: u64,
}

impl Fields {
    /// The whole bit pattern, sign first.
    pub fn bits(&self, f: &Format) -> u64 {
        (self.sign << (f.exponent_bits + f.mantissa_bits))
            | (self.exponent << f.mantissa_bits)
            | self.mantissa
    }
}

/// The bit fields of `r`, which must be a value of `f` (as `Format::round` returns).
/// NaN gets the quiet-NaN pattern (top mantissa bit set).
pub fn encode(f: &Format, r: f64) -> Fields {
    let sign = u64::from(r.is_sign_negative());
    let all_ones = (1u64 << f.exponent_bits) - 1;
    let m = f.mantissa_bits as i32;
    if r.is_nan() {
        return Fields {
            sign,
            exponent: all_ones,
            mantissa: 1 << (m - 1),
        };
    }
    if r.is_infinite() {
        return Fields {
            sign,
            exponent: all_ones,
            mantissa: 0,
        };
    }
    let a = r.abs();
    if a == 0.0 {
        return Fields {
            sign,
            exponent: 0,
            mantissa: 0,
        };
    }
    let e = exponent_of(a);
    if e < f.min_exponent() {
        // Subnormal: a = mantissa · 2^(emin - m), no implicit bit.
        let mantissa = (a / f64::from(f.min_exponent() - m).exp2()) as u64;
        return Fields {
            sign,
            exponent: 0,
            mantissa,
        };
    }
    // Normal: a = (1 + mantissa / 2^m) · 2^e. Both factors are exact in f64 because
    // every value of these formats has at most 24 significant bits.
    let significand = a / f64::from(e).exp2();
    Fields {
        sign,
        exponent: (e + f.bias()) as u64,
        mantissa: ((significand - 1.0) * f64::from(m).exp2()) as u64,
    }
}

/// `value`'s low `width` bits as `0`/`1`, most significant first.
pub fn bit_string(value: u64, width: u32) -> String {
    (0..width)
        .rev()
        .map(|i| if value >> i & 1 == 1 { '1' } else { '0' })
        .collect()
}

/// One format's view of the reader's value.
#[derive(Clone, Debug, PartialEq)]
pub struct FormatView {
    /// The format.
    pub format: Format,
    /// The value stored (`Format::round`).
    pub rounded: f64,
    /// Its bit fields.
    pub fields: Fields,
    /// `|rounded - x| / |x|` (`Format::relative_error`); infinite on overflow.
    pub relative_error: f64,
    /// What storing it did (`Format::fate`).
    pub fate: Fate,
}

impl FormatView {
    /// How the fields make the value: `+1.5 × 2^3`, `+0.25 × 2^-14 (subnormal)`, `+inf`.
    pub fn formula(&self) -> String {
        let f = &self.format;
        let sign = if self.fields.sign == 1 { '-' } else { '+' };
        let scale = f64::from(f.mantissa_bits).exp2();
        let frac = self.fields.mantissa as f64 / scale;
        if self.rounded.is_nan() {
            "NaN".into()
        } else if self.rounded.is_infinite() {
            format!("{sign}inf (exponent all ones, mantissa 0)")
        } else if self.fields.exponent == 0 {
            let what = if self.fields.mantissa == 0 {
                "zero"
            } else {
                "subnormal"
            };
            format!("{sign}{frac} × 2^{} ({what})", f.min_exponent())
        } else {
            let e = self.fields.exponent as i32 - f.bias();
            format!("{sign}{} × 2^{e}", 1.0 + frac)
        }
    }
}

/// `x` in each of f32, f16 and bf16.
pub fn explore(x: f64) -> Vec<FormatView> {
    [F32, F16, BF16]
        .iter()
        .map(|f| {
            let rounded = f.round(x);
            FormatView {
                format: *f,
                rounded,
                fields: encode(f, rounded),
                relative_error: if rounded.is_infinite() && x.is_finite() {
                    f64::INFINITY
                } else {
                    f.relative_error(x)
                },
                fate: f.fate(x),
            }
        })
        .collect()
}

/// `x` as a `data-value` attribute JavaScript's `parseFloat` reads back exactly:
/// `Infinity`, `-Infinity` and `NaN` spelled its way (Rust writes `inf`).
pub fn data_value(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{x:e}")
    }
}

/// What the reader reads about a fate.
pub fn fate_text(fate: Fate) -> &'static str {
    match fate {
        Fate::Zero => "zero",
        Fate::Normal => "normal",
        Fate::Subnormal => "subnormal: fewer significant bits",
        Fate::Underflow => "underflow: became 0",
        Fate::Overflow => "overflow: became inf",
        Fate::NonFinite => "not finite",
    }
}

/// A format's limits, one row of the ranges table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RangeRow {
    /// The format.
    pub format: Format,
    /// Largest finite value.
    pub max: f64,
    /// Smallest positive normal value.
    pub min_normal: f64,
    /// Smallest positive subnormal value.
    pub min_subnormal: f64,
    /// Gap between 1 and the next value.
    pub epsilon: f64,
    /// Significant decimal digits.
    pub digits: f64,
}

/// The ranges of f16, bf16 and f32.
pub fn ranges() -> Vec<RangeRow> {
    FORMATS
        .iter()
        .map(|f| RangeRow {
            format: *f,
            max: f.max_finite(),
            min_normal: f.min_normal(),
            min_subnormal: f.min_subnormal(),
            epsilon: f.epsilon(),
            digits: f.decimal_digits(),
        })
        .collect()
}

/// Parses what the reader typed: a decimal (`0.1`, `-3e-8`), `inf`, `-inf` or `nan`.
pub fn parse_value(s: &str) -> Result<f64, String> {
    let t = s.trim();
    t.parse::<f64>()
        .map_err(|_| format!("{t:?} is not a number (try 0.1, 65504, 6e-8 or inf)"))
}

/// The slider's position for `x`: `log10 |x|` clamped to [`LOG10_RANGE`].
pub fn slider_of(x: f64) -> f64 {
    let a = x.abs();
    if a == 0.0 || !a.is_finite() {
        return if a == 0.0 {
            LOG10_RANGE.0
        } else {
            LOG10_RANGE.1
        };
    }
    a.log10().clamp(LOG10_RANGE.0, LOG10_RANGE.1)
}

/// The value at slider position `p` with `x`'s sign, to 4 significant digits (a value
/// the reader can type back).
pub fn value_of_slider(p: f64, negative: bool) -> f64 {
    let v = 10f64.powf(p.clamp(LOG10_RANGE.0, LOG10_RANGE.1));
    let v: f64 = format!("{v:.3e}").parse().unwrap_or(v);
    if negative { -v } else { v }
}

/// The fp16 run's scaler settings the reader chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleInput {
    /// The initial scale is `2^init_log2`.
    pub init_log2: i32,
    /// Clean steps before the scale doubles.
    pub growth_interval: u32,
    /// Overflows tolerated before backing off.
    pub hysteresis: u32,
    /// Optimizer steps of the run.
    pub steps: u64,
}

impl Default for ScaleInput {
    /// A start at 2^24, above what the tiny model's gradients tolerate in f16, so
    /// the run opens with skipped steps, and growth every 10 clean steps instead of
    /// GradScaler's 2000, so a run of 60 steps shows the scale probe upwards again.
    fn default() -> Self {
        ScaleInput {
            init_log2: 24,
            growth_interval: 10,
            hysteresis: 1,
            steps: 60,
        }
    }
}

/// The `TrainConfig::amp` of `--amp fp16` with the reader's scaler options, checked
/// by `ScalerConfig::validate`.
pub fn amp_config(input: &ScaleInput) -> Result<AmpConfig, String> {
    let init_scale = 2f64.powi(input.init_log2) as f32;
    let amp = AmpConfig {
        scaler: ScalerConfig {
            init_scale,
            growth_interval: input.growth_interval,
            hysteresis: input.hysteresis,
            ..ScalerConfig::default()
        },
        ..AmpConfig::new(AmpMode::Fp16)
    };
    amp.validate().map_err(|e| e.to_string())?;
    Ok(amp)
}

/// The run's `TrainConfig`: the preset's model and batch as the training page trains
/// them, `--amp fp16` with the reader's scaler, no evaluation until the end.
pub fn amp_train_config(p: &TrainPreset, steps: u64, corpus: &str, amp: AmpConfig) -> TrainConfig {
    let mut cfg = TrainConfig {
        steps,
        batch_size: p.batch_size,
        seq_len: p.seq_len,
        lr: p.lr,
        min_lr: p.lr / 10.0,
        warmup_steps: (steps / 20).clamp(1, 50),
        eval_every: steps.max(1),
        eval_batches: 1,
        corpus: corpus.into(),
        amp,
        ..TrainConfig::default()
    };
    (
        cfg.model.n_layer,
        cfg.model.n_head,
        cfg.model.n_embd,
        cfg.model.block_size,
    ) = (p.n_layer, p.n_head, p.n_embd, p.seq_len);
    cfg
}

/// One step of the run as the trainer reported it (`brrr_train::StepStats`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalePoint {
    /// The step, from 1.
    pub step: u64,
    /// Its training loss.
    pub loss: f32,
    /// The loss scale after the step's update.
    pub scale: f32,
    /// Whether the step overflowed and was skipped.
    pub skipped: bool,
}

/// What the run's scale did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScaleSummary {
    /// Steps skipped (inf/NaN gradients).
    pub skipped: u64,
    /// Steps applied.
    pub applied: u64,
    /// Times the scale went down.
    pub backoffs: u64,
    /// Times the scale went up.
    pub growths: u64,
    /// The scale after the last step.
    pub last_scale: Option<f32>,
    /// The first step that was applied.
    pub first_applied: Option<u64>,
}

/// Counts skips, backoffs and growths, comparing each step's scale with the one before
/// (`init_scale` before the first).
pub fn summarize(init_scale: f32, points: &[ScalePoint]) -> ScaleSummary {
    let mut s = ScaleSummary::default();
    let mut prev = init_scale;
    for p in points {
        if p.skipped {
            s.skipped += 1;
        } else {
            s.applied += 1;
            s.first_applied.get_or_insert(p.step);
        }
        if p.scale < prev {
            s.backoffs += 1;
        } else if p.scale > prev {
            s.growths += 1;
        }
        prev = p.scale;
    }
    s.last_scale = points.last().map(|p| p.scale);
    s
}

/// Chart points `(x, y)`.
pub type Points = Vec<(f64, f64)>;

/// The chart's series: the scale used by each step (`(step, scale)`, a staircase that
/// starts at `init_scale`), and the skipped steps at the scale that overflowed.
pub fn scale_series(init_scale: f32, points: &[ScalePoint]) -> (Points, Points) {
    let mut line = Vec::with_capacity(2 * points.len());
    let mut skipped = Vec::new();
    let mut used = f64::from(init_scale);
    for p in points {
        let x = p.step as f64;
        line.push((x - 0.5, used));
        line.push((x + 0.5, used));
        if p.skipped {
            skipped.push((x, used));
        }
        used = f64::from(p.scale);
    }
    (line, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn samples() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            1.0,
            0.1,
            -0.1,
            65504.0,
            65519.0,
            65520.0,
            1e5,
            6e-8,
            3e-8,
            2.9e-8,
            6.1e-5,
            1e-7,
            1e-40,
            3.3e38,
            1.0009765,
            1.000_488_3,
            1.0 / 3.0,
        ];
        let mut x = 1.234_567e-30f32;
        while x < 1e30 {
            v.push(x);
            v.push(-x * 1.7);
            x *= 3.7;
        }
        v
    }

    #[test]
    fn bit_patterns_match_half_and_std() {
        for x in samples() {
            let views = explore(f64::from(x));
            let [v32, v16, vb] = [&views[0], &views[1], &views[2]];
            assert_eq!(v32.fields.bits(&F32), u64::from(x.to_bits()), "f32 {x:e}");
            assert_eq!(
                v16.fields.bits(&F16),
                u64::from(f16::from_f32(x).to_bits()),
                "f16 {x:e}"
            );
            assert_eq!(
                vb.fields.bits(&BF16),
                u64::from(bf16::from_f32(x).to_bits()),
                "bf16 {x:e}"
            );
        }
    }

    #[test]
    fn special_values_have_their_patterns() {
        let inf = explore(f64::INFINITY);
        assert_eq!(inf[1].fields.bits(&F16), 0x7c00);
        assert_eq!(inf[1].formula(), "+inf (exponent all ones, mantissa 0)");
        let nan = explore(f64::NAN);
        assert!(f16::from_bits(nan[1].fields.bits(&F16) as u16).is_nan());
        assert_eq!(nan[1].fate, Fate::NonFinite);
        let neg0 = explore(-0.0);
        assert_eq!(neg0[1].fields.bits(&F16), 0x8000);
    }

    #[test]
    fn fates_errors_and_formulas() {
        let v = explore(1e5);
        assert_eq!(
            (v[0].fate, v[1].fate, v[2].fate),
            (Fate::Normal, Fate::Overflow, Fate::Normal)
        );
        assert!(v[1].relative_error.is_infinite());
        // 1e5 in bf16: 8 significant bits give 99840 (the two neighbours are 99840 and 100352).
        assert_eq!(v[2].rounded, 99840.0);
        assert!((v[2].relative_error - 0.0016).abs() < 1e-12);
        let tiny = explore(2f64.powi(-24));
        assert_eq!(tiny[1].fate, Fate::Subnormal);
        assert_eq!(
            tiny[1].fields,
            Fields {
                sign: 0,
                exponent: 0,
                mantissa: 1
            }
        );
        assert_eq!(tiny[1].formula(), "+0.0009765625 × 2^-14 (subnormal)");
        assert_eq!(explore(2f64.powi(-26))[1].fate, Fate::Underflow);
        assert_eq!(explore(-1.5)[1].formula(), "-1.5 × 2^0");
        assert_eq!(explore(0.1)[0].relative_error, F32.relative_error(0.1));
        assert_eq!(bit_string(0b1011, 6), "001011");
        assert_eq!(data_value(f64::INFINITY), "Infinity");
        assert_eq!(data_value(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(data_value(f64::NAN), "NaN");
        assert_eq!(data_value(6e-8), "6e-8");
    }

    #[test]
    fn ranges_are_the_formats() {
        let r = ranges();
        let f16r = r.iter().find(|r| r.format == F16).unwrap();
        assert_eq!(f16r.max, 65504.0);
        assert_eq!(f16r.min_normal, f64::from(f16::MIN_POSITIVE.to_f32()));
        assert_eq!(f16r.min_subnormal, f64::from(f16::from_bits(1).to_f32()));
        assert_eq!(f16r.epsilon, f64::from(f16::EPSILON.to_f32()));
        let b = r.iter().find(|r| r.format == BF16).unwrap();
        assert_eq!(b.max, f64::from(bf16::MAX.to_f32()));
        assert_eq!(b.epsilon, f64::from(bf16::EPSILON.to_f32()));
        let f = r.iter().find(|r| r.format == F32).unwrap();
        assert_eq!(
            (f.max, f.min_normal),
            (f64::from(f32::MAX), f64::from(f32::MIN_POSITIVE))
        );
    }

    #[test]
    fn input_and_slider() {
        assert_eq!(parse_value(" 6e-8 "), Ok(6e-8));
        assert!(parse_value("inf").unwrap().is_infinite());
        assert!(parse_value("one").unwrap_err().contains("not a number"));
        assert_eq!(slider_of(1000.0), 3.0);
        assert_eq!(slider_of(0.0), LOG10_RANGE.0);
        assert_eq!(value_of_slider(3.0, true), -1000.0);
        assert_eq!(value_of_slider(-7.5, false), 3.162e-8);
    }

    #[test]
    fn the_amp_config_is_validated() {
        let a = amp_config(&ScaleInput::default()).unwrap();
        assert!(a.scales_loss());
        assert_eq!(a.scaler.init_scale, 2f32.powi(24));
        let bad = ScaleInput {
            growth_interval: 0,
            ..ScaleInput::default()
        };
        assert!(amp_config(&bad).unwrap_err().contains("growth_interval"));
    }

    #[test]
    fn the_summary_counts_what_the_scale_did() {
        let p = |step, scale, skipped| ScalePoint {
            step,
            loss: 1.0,
            scale,
            skipped,
        };
        let points = [
            p(1, 8.0, true),
            p(2, 4.0, true),
            p(3, 4.0, false),
            p(4, 8.0, false),
            p(5, 4.0, true),
        ];
        let s = summarize(16.0, &points);
        assert_eq!((s.skipped, s.applied, s.backoffs, s.growths), (3, 2, 3, 1));
        assert_eq!((s.last_scale, s.first_applied), (Some(4.0), Some(3)));
        let (line, skipped) = scale_series(16.0, &points);
        assert_eq!(line[0], (0.5, 16.0));
        assert_eq!(line[3], (2.5, 8.0));
        assert_eq!(skipped, vec![(1.0, 16.0), (2.0, 8.0), (5.0, 8.0)]);
    }
}
