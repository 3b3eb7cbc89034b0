//! The pipeline page: a schedule from `brrr-pp` for the reader's `p`, `m` and `v`,
//! simulated with F = B = W = 1 per stage; its timeline as blocks to draw, the bubble
//! beside the closed form, and the micro-batches each stage holds.

use brrr_pp::{Costs, ScheduleKind, Timeline, generate, simulate, svg, theory, validate};

/// The largest sizes the page offers (the timeline stays readable).
pub const MAX_STAGES: usize = 16;
/// Most micro-batches.
pub const MAX_MICRO_BATCHES: usize = 64;
/// Most chunks per stage (interleaved).
pub const MAX_CHUNKS: usize = 4;

/// The schedules, `(key, menu text)`.
pub const SCHEDULES: [(&str, &str); 5] = [
    ("gpipe", "GPipe"),
    ("1f1b", "1F1B (PipeDream-Flush)"),
    ("interleaved", "Interleaved 1F1B (v chunks)"),
    ("zb-h1", "Zero bubble ZB-H1"),
    ("zb-h2", "Zero bubble ZB-H2"),
];

/// What the reader picked.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineInput {
    /// Stages.
    pub p: usize,
    /// Micro-batches.
    pub m: usize,
    /// Chunks per stage (interleaved only).
    pub v: usize,
    /// A key of [`SCHEDULES`].
    pub schedule: String,
}

impl Default for PipelineInput {
    fn default() -> Self {
        PipelineInput {
            p: 4,
            m: 8,
            v: 2,
            schedule: "1f1b".into(),
        }
    }
}

/// One compute action to draw: its stage row, start and width as fractions of the step.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stage: usize,
    pub x: f64,
    pub w: f64,
    pub label: String,
    pub colour: &'static str,
    /// The action in words, with its times.
    pub tip: String,
}

/// Everything the page shows.
#[derive(Clone, Debug)]
pub struct PipelineView {
    pub kind: ScheduleKind,
    pub timeline: Timeline,
    pub blocks: Vec<Block>,
    /// Simulated idle share of the step.
    pub bubble: f64,
    /// The same when steps run back to back (ZB-H2's zero).
    pub steady: f64,
    /// The closed form (ZB-H2's for back-to-back steps).
    pub theory: Option<f64>,
    /// Compute order per stage, `F0 F1 BW0 …`.
    pub orders: Vec<String>,
}

/// The schedule kind for `input`.
pub fn kind(input: &PipelineInput) -> Result<ScheduleKind, String> {
    match input.schedule.as_str() {
        "interleaved" => Ok(ScheduleKind::Interleaved { v: input.v }),
        other => ScheduleKind::parse(other),
    }
}

/// Generates, validates and simulates the reader's schedule.
pub fn view(input: &PipelineInput) -> Result<PipelineView, String> {
    let (p, m, v) = (input.p, input.m, input.v);
    if !(1..=MAX_STAGES).contains(&p)
        || !(1..=MAX_MICRO_BATCHES).contains(&m)
        || !(1..=MAX_CHUNKS).contains(&v)
    {
        return Err(format!(
            "p in 1..={MAX_STAGES}, m in 1..={MAX_MICRO_BATCHES}, v in 1..={MAX_CHUNKS}"
        ));
    }
    let kind = kind(input)?;
    let s = generate(kind, p, m).map_err(|e| e.to_string())?;
    validate(&s).map_err(|e| e.to_string())?;
    let t = simulate(&s, Costs::unit().per_chunk(kind.chunks()))
        .map_err(|d| format!("the schedule deadlocks at {:?}", d.stuck))?;
    let span = t.makespan.max(f64::MIN_POSITIVE);
    let blocks = t
        .spans
        .iter()
        .map(|sp| Block {
            stage: sp.stage,
            x: sp.start / span,
            w: (sp.end - sp.start) / span,
            label: sp.action.label(),
            colour: svg::colour(&sp.action),
            tip: format!(
                "stage {}: {} from {:.2} to {:.2}",
                sp.stage, sp.action, sp.start, sp.end
            ),
        })
        .collect();
    Ok(PipelineView {
        kind,
        bubble: t.bubble_fraction(),
        steady: t.steady_bubble_fraction(),
        theory: theory::bubble_fraction(kind, p, m, Costs::unit()),
        orders: (0..p).map(|r| s.compute_line(r)).collect(),
        blocks,
        timeline: t,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_1f1b_with_its_textbook_bubble() {
        let v = view(&PipelineInput::default()).unwrap();
        assert!((v.bubble - 3.0 / 11.0).abs() < 1e-12);
        assert_eq!(v.theory, Some(v.bubble));
        assert_eq!(v.timeline.peak_in_flight, vec![4, 3, 2, 1]);
        assert_eq!(v.blocks.len(), 4 * 8 * 2);
        assert!(
            v.blocks
                .iter()
                .all(|b| b.x >= 0.0 && b.x + b.w <= 1.0 + 1e-12)
        );
    }

    #[test]
    fn every_schedule_draws_and_zb_h2_is_bubble_free_back_to_back() {
        for (key, _) in SCHEDULES {
            let input = PipelineInput {
                schedule: key.into(),
                ..PipelineInput::default()
            };
            let v = view(&input).unwrap();
            assert_eq!(v.orders.len(), 4, "{key}");
            if key == "zb-h2" {
                assert!(v.steady.abs() < 1e-12);
            }
        }
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let mut i = PipelineInput {
            p: 0,
            ..PipelineInput::default()
        };
        assert!(view(&i).is_err());
        i.p = 4;
        i.schedule = "interleaved".into();
        i.m = 6;
        assert!(view(&i).unwrap_err().contains("multiple"));
        i.schedule = "nope".into();
        assert!(view(&i).is_err());
    }
}
