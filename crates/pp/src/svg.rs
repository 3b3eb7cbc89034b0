//! The timeline as an SVG: one row per stage, time to the right, F/B/W/BW coloured,
//! idle time left as the row's pale red background so the bubbles show.

use crate::schedule::Action;
use crate::simulate::Timeline;
use std::fmt::Write;

/// Fill colours (Tableau 10): F blue, B green, W orange, BW teal.
pub fn colour(a: &Action) -> &'static str {
    match a {
        Action::F { .. } => "#4e79a7",
        Action::B { .. } => "#59a14f",
        Action::W { .. } => "#f28e2b",
        Action::BW { .. } => "#76b7b2",
        _ => "#bab0ac",
    }
}

/// Draws `t` with `title` above it; the subtitle gives the bubble fraction and the peak
/// micro-batches in flight per stage. `unit` names the time axis ("unit costs", "ms").
pub fn timeline_svg(t: &Timeline, title: &str, unit: &str) -> String {
    let (left, top, row, width) = (70.0, 56.0, 34.0, 900.0);
    let height = top + row * t.p as f64 + 60.0;
    let t0 = t
        .spans
        .iter()
        .map(|s| s.start)
        .fold(f64::INFINITY, f64::min);
    let t0 = if t0.is_finite() { t0 } else { 0.0 };
    let scale = if t.makespan > 0.0 {
        width / t.makespan
    } else {
        1.0
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="sans-serif" font-size="11">"#,
        w = left + width + 20.0
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="14">{}</text>"#,
        escape(title)
    );
    let peaks: Vec<String> = t.peak_in_flight.iter().map(|x| x.to_string()).collect();
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="38">bubble {:.1}% of stage time · peak in flight per stage [{}]</text>"#,
        100.0 * t.bubble_fraction(),
        peaks.join(", ")
    );
    for r in 0..t.p {
        let y = top + row * r as f64;
        let _ = writeln!(
            s,
            r##"<text x="8" y="{:.1}">stage {r}</text><rect x="{left}" y="{y:.1}" width="{width}" height="{:.1}" fill="#f6dcdc"/>"##,
            y + row * 0.6,
            row - 6.0
        );
    }
    for sp in &t.spans {
        let x = left + (sp.start - t0) * scale;
        let w = ((sp.end - sp.start) * scale).max(0.5);
        let y = top + row * sp.stage as f64;
        let _ = write!(
            s,
            r##"<rect x="{x:.2}" y="{y:.1}" width="{w:.2}" height="{:.1}" fill="{}" stroke="white" stroke-width="0.5"><title>stage {} {} {:.3}–{:.3}</title></rect>"##,
            row - 6.0,
            colour(&sp.action),
            sp.stage,
            sp.action,
            sp.start - t0,
            sp.end - t0
        );
        let label = sp.action.label();
        if w > 7.0 * label.len() as f64 {
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{:.1}" fill="white" text-anchor="middle">{label}</text>"#,
                x + w / 2.0,
                y + row * 0.55
            );
        }
        s.push('\n');
    }
    let ly = top + row * t.p as f64 + 18.0;
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="{ly}">time ({}) → 0 … {:.3}</text>"#,
        escape(unit),
        t.makespan
    );
    let legend = [
        ("F", "#4e79a7"),
        ("B", "#59a14f"),
        ("W", "#f28e2b"),
        ("BW (B+W fused)", "#76b7b2"),
        ("idle", "#f6dcdc"),
    ];
    let mut x = left;
    for (name, c) in legend {
        let _ = write!(
            s,
            r#"<rect x="{x}" y="{:.1}" width="12" height="12" fill="{c}"/><text x="{:.1}" y="{:.1}">{name}</text>"#,
            ly + 12.0,
            x + 16.0,
            ly + 22.0
        );
        x += 30.0 + 7.0 * name.len() as f64;
    }
    s.push_str("\n</svg>\n");
    s
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
