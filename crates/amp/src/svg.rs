//! Two SVG figures of the numerics explorer, written as plain text (no plotting crate,
//! so they render the same in the CLI, the book and the browser).

use crate::numerics::{F16, Format, Log2Histogram};
use std::fmt::Write;

const W: f64 = 760.0;
const H: f64 = 300.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The classic picture of loss scaling: the gradients' magnitudes (log2 bins) before
/// and after multiplying by `scale`, against f16's subnormal, normal and overflow
/// limits. `before` and `after` are [`Log2Histogram::of`] the same values with scale 1
/// and with `scale`.
pub fn gradient_histogram(
    title: &str,
    before: &Log2Histogram,
    after: &Log2Histogram,
    scale: f64,
) -> String {
    let f = F16;
    let lo_bin = before
        .bins
        .iter()
        .chain(&after.bins)
        .map(|b| b.0)
        .min()
        .unwrap_or(-30)
        .min(f.min_exponent() - f.mantissa_bits as i32 - 2);
    let hi_bin = before
        .bins
        .iter()
        .chain(&after.bins)
        .map(|b| b.0)
        .max()
        .unwrap_or(0)
        .max(f.max_exponent() + 2);
    let peak = before
        .bins
        .iter()
        .chain(&after.bins)
        .map(|b| b.1)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let span = f64::from(hi_bin - lo_bin + 1);
    let x = |k: f64| LEFT + (k - f64::from(lo_bin)) / span * (W - LEFT - RIGHT);
    let y = |c: f64| H - BOTTOM - c / peak * (H - TOP - BOTTOM);
    let mut s = header(title);
    // f16's regions: flushed to zero, subnormal, normal, overflow.
    let sub = f64::from(f.min_exponent() - f.mantissa_bits as i32);
    let norm = f64::from(f.min_exponent());
    let over = f64::from(f.max_exponent() + 1);
    for (a, b, color, label) in [
        (f64::from(lo_bin), sub, "#f4cccc", "f16: 0"),
        (sub, norm, "#fde9c9", "subnormal"),
        (over, f64::from(hi_bin + 1), "#f4cccc", "f16: inf"),
    ] {
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="{color}"/><text x="{:.1}" y="{:.1}" font-size="11" fill="#555">{label}</text>"##,
            x(a),
            (x(b) - x(a)).max(0.0),
            H - TOP - BOTTOM,
            x(a) + 3.0,
            TOP + 12.0
        );
    }
    for (hist, color, name) in [
        (before, "#4a7bd0", "gradients".to_string()),
        (after, "#d0704a", format!("× loss scale {scale}")),
    ] {
        let mut pts = String::new();
        for &(k, c) in &hist.bins {
            let _ = write!(
                pts,
                "{:.1},{:.1} {:.1},{:.1} ",
                x(f64::from(k)),
                y(c as f64),
                x(f64::from(k) + 1.0),
                y(c as f64)
            );
        }
        let _ = write!(
            s,
            r#"<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"><title>{}</title></polyline>"#,
            escape(&name)
        );
    }
    axis(&mut s, lo_bin, hi_bin, &x);
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" font-size="12" fill="#4a7bd0">— gradients</text><text x="{:.1}" y="{:.1}" font-size="12" fill="#d0704a">— × {scale}</text></svg>"##,
        W - 220.0,
        TOP - 8.0,
        W - 120.0,
        TOP - 8.0
    );
    s
}

/// The ranges of `formats` on a log2 axis: subnormal and normal spans as bars.
pub fn format_ranges(title: &str, formats: &[Format]) -> String {
    let lo = formats
        .iter()
        .map(|f| f.min_exponent() - f.mantissa_bits as i32)
        .min()
        .unwrap_or(-30);
    let hi = formats
        .iter()
        .map(|f| f.max_exponent() + 1)
        .max()
        .unwrap_or(16);
    let span = f64::from(hi - lo + 1);
    let x = |k: f64| LEFT + (k - f64::from(lo)) / span * (W - LEFT - RIGHT);
    let mut s = header(title);
    let row = (H - TOP - BOTTOM) / formats.len().max(1) as f64;
    for (i, f) in formats.iter().enumerate() {
        let top = TOP + i as f64 * row + row * 0.2;
        let h = row * 0.6;
        let sub = f64::from(f.min_exponent() - f.mantissa_bits as i32);
        let norm = f64::from(f.min_exponent());
        let max = f64::from(f.max_exponent() + 1);
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{h:.1}" fill="#fde9c9"/><rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{h:.1}" fill="#9fc5e8"/><text x="4" y="{:.1}" font-size="12">{}</text>"##,
            x(sub),
            x(norm) - x(sub),
            x(norm),
            x(max) - x(norm),
            top + h / 2.0 + 4.0,
            f.name
        );
    }
    axis(&mut s, lo, hi, &x);
    s.push_str("</svg>");
    s
}

fn header(title: &str) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif"><rect width="{W}" height="{H}" fill="white"/><text x="{LEFT}" y="20" font-size="14">{}</text>"#,
        escape(title)
    )
}

/// The log2 axis with a tick every 8 powers of two (or a multiple of 8, at most about
/// 12 ticks).
fn axis(s: &mut String, lo: i32, hi: i32, x: &dyn Fn(f64) -> f64) {
    let base = H - BOTTOM;
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{base}" x2="{:.1}" y2="{base}" stroke="#333"/>"##,
        W - RIGHT
    );
    let step = ((hi - lo) / 12 / 8 + 1) * 8;
    let first = lo.div_euclid(step) * step;
    let mut k = first;
    while k <= hi {
        if k >= lo {
            let _ = write!(
                s,
                r##"<line x1="{0:.1}" y1="{base}" x2="{0:.1}" y2="{1}" stroke="#333"/><text x="{0:.1}" y="{2}" font-size="11" text-anchor="middle">2^{k}</text>"##,
                x(f64::from(k)),
                base + 5.0,
                base + 18.0
            );
        }
        k += step;
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">|value| (log2 scale)</text>"#,
        (W + LEFT) / 2.0,
        H - 10.0
    );
}
