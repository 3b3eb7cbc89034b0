//! The pipeline chapter's table (every schedule's bubble and memory, simulated beside
//! the closed forms) and its timelines, from brrr-pp.

use crate::md::{Md, page};
use brrr_pp::{Costs, ScheduleKind, generate, simulate, svg, theory};

/// The sizes the chapter draws.
const P: usize = 4;
const M: usize = 8;
const V: usize = 2;

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// Schedule, bubble (theory, simulated), steady-state bubble, in flight per stage.
fn bubble_table() -> Result<String, String> {
    let mut t = Md::new(&[
        "schedule",
        "bubble, theory",
        "bubble, simulated",
        "back-to-back steps",
        "in flight per stage",
        "pending W per stage",
    ])
    .left(&[4, 5]);
    for kind in ScheduleKind::all(V) {
        let s = generate(kind, P, M).map_err(|e| e.to_string())?;
        let tl = simulate(&s, Costs::unit().per_chunk(kind.chunks()))
            .map_err(|d| format!("{kind}: deadlock {:?}", d.stuck))?;
        t.row(vec![
            format!("`{kind}`"),
            theory::bubble_fraction(kind, P, M, Costs::unit()).map_or("-".into(), pct),
            pct(tl.bubble_fraction()),
            pct(tl.steady_bubble_fraction()),
            format!("{:?}", tl.peak_in_flight),
            format!("{:?}", tl.peak_pending_w),
        ]);
    }
    Ok(page(&format!(
        "{}\np = {P} stages, m = {M} micro-batches, F = B = W = 1 per stage (interleaved: \
         v = {V} chunks of half the cost each, so its counts are chunk stashes). \
         `brrr pipeline plan` prints the same.\n",
        t.render()
    )))
}

/// The simulated timeline of `kind` as SVG.
fn timeline(kind: ScheduleKind) -> Result<String, String> {
    let s = generate(kind, P, M).map_err(|e| e.to_string())?;
    let tl = simulate(&s, Costs::unit().per_chunk(kind.chunks()))
        .map_err(|d| format!("{kind}: deadlock {:?}", d.stuck))?;
    Ok(svg::timeline_svg(
        &tl,
        &format!("{kind}, p = {P}, m = {M}, F = B = W = 1"),
        "cost units",
    ))
}

/// The chapter's generated files.
pub fn files() -> Result<Vec<(String, String)>, String> {
    let mut out = vec![("pipeline-bubbles.md".to_string(), bubble_table()?)];
    for kind in ScheduleKind::all(V) {
        let name = format!("pipeline-{}.svg", kind.to_string().replace(':', "-"));
        out.push((name, timeline(kind)?));
    }
    Ok(out)
}
