//! Closed forms the simulator and the measurements are compared with. `p` stages, `m`
//! micro-batches, `v` chunks per stage; `f`, `b`, `w` the times of F, B, W of a whole
//! stage (a fused backward is `b + w`).

use crate::schedule::ScheduleKind;
use crate::simulate::Costs;

/// Bubble time of each stage, in the unit of `c`, as the papers derive it:
/// GPipe and 1F1B `(p − 1)(f + b + w)` (Huang et al. 2019; Narayanan et al. 2021),
/// interleaved the same over `v` (Narayanan et al. 2021, SC, §2.2), ZB-H1
/// `(p − 1)(f + b − w)` and ZB-H2 `(p − 1)(f + b − 2w)`, not below 0 (Qi et al. 2024,
/// Table 1; ZB-H2's in the steady state of back-to-back steps, and only once
/// `m >= 2p − 1` micro-batches fill its warm-up). `None` for a custom schedule.
pub fn bubble_time(kind: ScheduleKind, p: usize, c: Costs) -> Option<f64> {
    let q = p.saturating_sub(1) as f64;
    Some(match kind {
        ScheduleKind::GPipe | ScheduleKind::OneFOneB => q * (c.f + c.b + c.w),
        ScheduleKind::Interleaved { v } => q * (c.f + c.b + c.w) / v.max(1) as f64,
        ScheduleKind::ZbH1 => q * (c.f + c.b - c.w).max(0.0),
        ScheduleKind::ZbH2 => q * (c.f + c.b - 2.0 * c.w).max(0.0),
        ScheduleKind::Custom => return None,
    })
}

/// Whether the closed form holds at these sizes: ZB-H2's needs `m >= 2p − 1`
/// micro-batches to fill its warm-up; below that there is none (its bubble is then
/// what the simulator measures, not 0).
fn closed_form_applies(kind: ScheduleKind, p: usize, m: usize) -> bool {
    kind != ScheduleKind::ZbH2 || m >= (2 * p).saturating_sub(1)
}

/// The bubble as a fraction of the whole step: `bubble / (m(f + b + w) + bubble)`.
/// For GPipe and 1F1B with any costs this is `(p − 1)/(m + p − 1)`. `None` for a custom
/// schedule, and for ZB-H2 with fewer than `2p − 1` micro-batches.
pub fn bubble_fraction(kind: ScheduleKind, p: usize, m: usize, c: Costs) -> Option<f64> {
    if !closed_form_applies(kind, p, m) {
        return None;
    }
    let bubble = bubble_time(kind, p, c)?;
    let ideal = m as f64 * (c.f + c.b + c.w);
    Some(if ideal + bubble > 0.0 {
        bubble / (ideal + bubble)
    } else {
        0.0
    })
}

/// The bubble over the ideal time `m(f + b + w)`: `(p − 1)/m` for GPipe and 1F1B,
/// `(p − 1)/(v·m)` interleaved.
pub fn bubble_over_ideal(kind: ScheduleKind, p: usize, m: usize, c: Costs) -> Option<f64> {
    if !closed_form_applies(kind, p, m) {
        return None;
    }
    let ideal = m as f64 * (c.f + c.b + c.w);
    Some(if ideal > 0.0 {
        bubble_time(kind, p, c)? / ideal
    } else {
        0.0
    })
}

/// Most micro-batches whose activations stage `r` holds at once (each of `v` chunks'
/// stash counting `1/v` of a micro-batch): GPipe `m`, 1F1B and ZB-H1 `min(p − r, m)`,
/// ZB-H2 `min(2(p − r) − 1, m)`, interleaved `(2(p − r − 1) + (v − 1)p + 1)/v` chunk stashes.
pub fn peak_in_flight(kind: ScheduleKind, p: usize, m: usize, r: usize) -> Option<f64> {
    let pr = p.saturating_sub(r);
    Some(match kind {
        ScheduleKind::GPipe => m as f64,
        ScheduleKind::OneFOneB | ScheduleKind::ZbH1 => pr.min(m) as f64,
        ScheduleKind::ZbH2 => (2 * pr).saturating_sub(1).min(m) as f64,
        ScheduleKind::Interleaved { v } => {
            let v = v.max(1);
            let warm = if v == 1 {
                pr - 1
            } else {
                2 * (pr - 1) + (v - 1) * p
            };
            (warm + 1).min(m * v) as f64 / v as f64
        }
        ScheduleKind::Custom => return None,
    })
}
