//! Activation recomputation: a GPT shape and a strategy in, `brrr-checkpoint`'s schedule,
//! its memory curve through the forward and the backward, what each segment keeps and
//! the extra forward compute out. Every number comes from the planner
//! (`GptShape::chain`, `Strategy::plan`, `Schedule::simulate`, `min_budget`).

use brrr_checkpoint::{
    Chain, Curve, GptShape, Mode, Op, PlanError, Schedule, Strategy, min_budget,
};

/// The strategy menu: `(key, text)`.
pub const STRATEGIES: [(&str, &str); 5] = [
    ("none", "none (keep every stash)"),
    ("every", "every K-th input"),
    ("sqrt", "√n groups (Chen et al.)"),
    ("selective", "selective (Korthikanti et al.)"),
    ("budget", "memory budget (optimal)"),
];

/// The most layers the page plans: the budget's dynamic program grows about as `n⁴`
/// (measured in a debug build: 12 ms at 24 layers, 0.6 s at 48, 19 s at 96), and the
/// page replans on every slider move.
pub const MAX_LAYERS: u64 = 48;

/// Everything the page's controls set.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointInput {
    /// The GPT and its micro-batch, as the planner counts them.
    pub shape: GptShape,
    /// A key of [`STRATEGIES`].
    pub strategy: String,
    /// `K` of `every:K`.
    pub every: usize,
    /// The budget in bytes for `budget`; `None` until the reader moves the slider
    /// (then halfway, geometrically, between the smallest feasible budget and the peak
    /// without recomputation). Clamped into that range by [`plan`].
    pub budget: Option<u64>,
}

impl Default for CheckpointInput {
    /// GPT-2 small (12 layers, width 768, 12 heads, 1024 tokens, vocabulary 50257) in
    /// f32, 8 sequences per micro-batch, planned for a budget.
    fn default() -> Self {
        CheckpointInput {
            shape: GptShape {
                n_layer: 12,
                n_head: 12,
                n_embd: 768,
                vocab_size: 50257,
                batch: 8,
                seq_len: 1024,
                dtype_bytes: 4,
            },
            strategy: "budget".into(),
            every: 4,
            budget: None,
        }
    }
}

/// What the first forward leaves of a segment for its backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Its whole stash (`Fall`): its backward runs without recomputation.
    All,
    /// Its stash without attention's scores (selective).
    Selective,
    /// Only its input (`Fck`): the segment is recomputed from it.
    Input,
    /// Nothing (`F∅`): recomputed from an earlier kept input.
    Dropped,
}

impl Kept {
    /// A short name (CSS class and legend).
    pub fn key(self) -> &'static str {
        match self {
            Kept::All => "all",
            Kept::Selective => "selective",
            Kept::Input => "input",
            Kept::Dropped => "dropped",
        }
    }
}

/// One box of the row of segments.
#[derive(Clone, Debug, PartialEq)]
pub struct SegmentView {
    /// `h.3`, `head`.
    pub name: String,
    /// What the first forward keeps of it.
    pub kept: Kept,
    /// How many times the backward runs its forward again.
    pub recomputed: usize,
}

/// Everything the page shows.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointView {
    /// The strategy planned (with the budget in bytes for `budget`).
    pub strategy: Strategy,
    /// The GPT as a chain of segments.
    pub chain: Chain,
    /// The schedule.
    pub schedule: Schedule,
    /// Its memory curve.
    pub curve: Curve,
    /// One entry per segment.
    pub segments: Vec<SegmentView>,
    /// Extra forward compute, in percent of one forward.
    pub extra_percent: f64,
    /// The smallest budget any schedule fits in, bytes.
    pub min_budget: u64,
    /// The peak without recomputation, bytes.
    pub none_peak: u64,
    /// Bytes the forward of `none` leaves for the backward: every segment's input and
    /// stash (the activations).
    pub activations: u64,
    /// The budget planned for (`budget` only).
    pub budget: Option<u64>,
}

/// The strategy the input asks for, with `budget` clamped into `[lo, hi]`.
pub fn strategy_of(input: &CheckpointInput, lo: u64, hi: u64) -> Result<Strategy, PlanError> {
    Ok(match input.strategy.as_str() {
        "none" => Strategy::None,
        "every" => Strategy::Every(input.every.max(1)),
        "sqrt" => Strategy::Sqrt,
        "selective" => Strategy::Selective,
        "budget" => Strategy::Budget(input.budget.unwrap_or_else(|| default_budget(lo, hi))),
        other => return Err(PlanError::Parse(other.to_string())),
    }
    .clamped(lo, hi))
}

/// Halfway between `lo` and `hi` on a log scale (the slider is logarithmic).
pub fn default_budget(lo: u64, hi: u64) -> u64 {
    let (a, b) = (lo.max(1) as f64, hi.max(1) as f64);
    ((a * b).sqrt().round() as u64).clamp(lo, hi.max(lo))
}

trait Clamped {
    fn clamped(self, lo: u64, hi: u64) -> Self;
}

impl Clamped for Strategy {
    fn clamped(self, lo: u64, hi: u64) -> Self {
        match self {
            Strategy::Budget(b) => Strategy::Budget(b.clamp(lo, hi.max(lo))),
            s => s,
        }
    }
}

/// Plans the input's strategy on its shape, with the budget clamped between the
/// smallest feasible one and the peak without recomputation.
pub fn plan(input: &CheckpointInput) -> Result<CheckpointView, PlanError> {
    let (chain, lo, hi, activations) = bounds(&input.shape)?;
    plan_strategy(chain, strategy_of(input, lo, hi)?, lo, hi, activations)
}

/// Plans `strategy` as given (a budget below the smallest feasible one is the planner's
/// error, which names that budget).
pub fn plan_exact(shape: &GptShape, strategy: Strategy) -> Result<CheckpointView, PlanError> {
    let (chain, lo, hi, activations) = bounds(shape)?;
    plan_strategy(chain, strategy, lo, hi, activations)
}

/// The chain, its smallest feasible budget, the peak of `none` and what `none`'s
/// forward leaves.
fn bounds(shape: &GptShape) -> Result<(Chain, u64, u64, u64), PlanError> {
    shape.check()?;
    let chain = shape.chain();
    let lo = min_budget(&chain)?;
    let none = Strategy::None.plan(&chain)?;
    let curve = none.simulate(&chain)?;
    let activations = curve.after[none.forward_len() - 1];
    Ok((chain, lo, curve.peak, activations))
}

fn plan_strategy(
    chain: Chain,
    strategy: Strategy,
    min_budget: u64,
    none_peak: u64,
    activations: u64,
) -> Result<CheckpointView, PlanError> {
    let schedule = strategy.plan(&chain)?;
    let curve = schedule.simulate(&chain)?;
    let segments = segment_views(&chain, &schedule);
    let extra_percent = 100.0 * curve.extra_cost / chain.forward_cost();
    let budget = match strategy {
        Strategy::Budget(b) => Some(b),
        _ => None,
    };
    Ok(CheckpointView {
        strategy,
        chain,
        schedule,
        curve,
        segments,
        extra_percent,
        min_budget,
        none_peak,
        activations,
        budget,
    })
}

/// What the first sweep keeps of each segment, and how often each is run again.
fn segment_views(chain: &Chain, schedule: &Schedule) -> Vec<SegmentView> {
    let fwd = schedule.forward_len();
    let mut views: Vec<SegmentView> = chain
        .segments
        .iter()
        .map(|s| SegmentView {
            name: s.name.clone(),
            kept: Kept::Dropped,
            recomputed: 0,
        })
        .collect();
    for (k, op) in schedule.ops.iter().enumerate() {
        let Op::Forward { seg, mode } = *op else {
            continue;
        };
        let Some(v) = views.get_mut(seg) else {
            continue;
        };
        if k >= fwd {
            v.recomputed += 1;
        } else {
            v.kept = match mode {
                Mode::SaveAll => Kept::All,
                Mode::SaveSelective => Kept::Selective,
                Mode::SaveInput => Kept::Input,
                Mode::NoSave => Kept::Dropped,
            };
        }
    }
    views
}

/// Chart points `(x, y)`.
pub type Points = Vec<(f64, f64)>;

/// The curve as chart points: `(op number from 1, bytes)` during each op and after it.
pub fn curve_points(curve: &Curve) -> (Points, Points) {
    let pts = |v: &[u64]| {
        v.iter()
            .enumerate()
            .map(|(i, &b)| ((i + 1) as f64, b as f64))
            .collect()
    };
    (pts(&curve.during), pts(&curve.after))
}

/// A tooltip per op: its name (`Fck3`, `B5`) and the bytes during it.
pub fn op_tips(view: &CheckpointView) -> Vec<String> {
    view.schedule
        .ops
        .iter()
        .zip(&view.curve.during)
        .map(|(op, &b)| format!("{op}: {}", brrr_perf::table::bytes_binary(b as f64)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use brrr_checkpoint::sqrt_group;

    fn with(strategy: &str) -> CheckpointInput {
        CheckpointInput {
            strategy: strategy.into(),
            ..CheckpointInput::default()
        }
    }

    #[test]
    fn none_peaks_above_all_activations_and_keeps_every_stash() {
        let v = plan(&with("none")).unwrap();
        let c = &v.chain;
        let sum: u64 = c.segments.iter().map(|s| s.input + s.stash).sum();
        assert_eq!(
            v.activations, sum,
            "none's forward keeps every input and stash"
        );
        assert_eq!(v.curve.peak, v.none_peak);
        assert!(v.curve.peak >= sum);
        assert!(
            v.segments
                .iter()
                .all(|s| s.kept == Kept::All && s.recomputed == 0)
        );
        assert_eq!(v.extra_percent, 0.0);
        // The curve rises through the forward and falls to the embedding's gradient δ_0
        // alone at the end.
        let fwd = v.schedule.forward_len();
        assert!(v.curve.after[..fwd].windows(2).all(|w| w[0] < w[1]));
        assert_eq!(*v.curve.after.last().unwrap(), c.delta_bytes(0));
    }

    #[test]
    fn a_budget_below_the_smallest_feasible_names_it() {
        let shape = CheckpointInput::default().shape;
        let lo = plan(&CheckpointInput::default()).unwrap().min_budget;
        let err = plan_exact(&shape, Strategy::Budget(lo - 1)).unwrap_err();
        assert_eq!(
            err,
            PlanError::BudgetTooSmall {
                budget: lo - 1,
                smallest: lo
            }
        );
        assert!(err.to_string().contains(&format!("budget:{lo}")));
        let ok = plan_exact(&shape, Strategy::Budget(lo)).unwrap();
        assert!(ok.curve.peak <= lo);
    }

    #[test]
    fn the_page_clamps_the_budget_into_the_slider_range() {
        let mut input = with("budget");
        input.budget = Some(1);
        let v = plan(&input).unwrap();
        assert_eq!(v.budget, Some(v.min_budget));
        assert!(v.curve.peak <= v.min_budget);
        input.budget = Some(u64::MAX);
        let v = plan(&input).unwrap();
        assert_eq!(v.budget, Some(v.none_peak));
        assert_eq!(v.extra_percent, 0.0, "the no-recomputation peak needs none");
        // Halfway: within the budget, recomputing something.
        input.budget = None;
        let v = plan(&input).unwrap();
        let b = v.budget.unwrap();
        assert!(v.min_budget < b && b < v.none_peak);
        assert!(v.curve.peak <= b && v.extra_percent > 0.0);
        assert!(v.segments.iter().any(|s| s.recomputed > 0));
    }

    #[test]
    fn sqrt_keeps_about_root_n_inputs() {
        for layers in [12, 24, 48] {
            let mut input = with("sqrt");
            input.shape.n_layer = layers;
            let v = plan(&input).unwrap();
            let n = v.chain.len() as f64;
            let inputs = v.segments.iter().filter(|s| s.kept == Kept::Input).count();
            assert!(
                (inputs as f64 - n.sqrt()).abs() <= 1.5,
                "{layers} layers: {inputs} kept inputs"
            );
            // At most one extra forward, and less memory than none.
            assert!(v.extra_percent > 0.0 && v.extra_percent <= 100.0);
            assert!(v.curve.peak < v.none_peak);
            assert_eq!(
                inputs,
                v.chain.len().div_ceil(sqrt_group(v.chain.len())) - 1
            );
        }
    }

    #[test]
    fn selective_recomputes_only_attention_scores() {
        let v = plan(&with("selective")).unwrap();
        let blocks = v.segments.len() - 1;
        assert!(
            v.segments[..blocks]
                .iter()
                .all(|s| s.kept == Kept::Selective)
        );
        assert!(v.segments.iter().all(|s| s.recomputed == 0));
        assert!(v.curve.peak < v.none_peak);
        assert!(v.extra_percent > 0.0 && v.extra_percent < 10.0);
    }

    #[test]
    fn every_k_keeps_every_kth_input() {
        let mut input = with("every");
        input.every = 3;
        let v = plan(&input).unwrap();
        // 13 segments, groups 0, 3, 6, 9, 12: inputs of 0, 3, 6, 9 kept, the last group
        // (the head) keeps its stash.
        let kept: Vec<usize> = (0..v.segments.len())
            .filter(|&i| v.segments[i].kept == Kept::Input)
            .collect();
        assert_eq!(kept, vec![0, 3, 6, 9]);
        assert_eq!(v.segments[12].kept, Kept::All);
        let (during, after) = curve_points(&v.curve);
        assert_eq!(during.len(), v.schedule.ops.len());
        assert_eq!(after.len(), during.len());
        assert_eq!(op_tips(&v).len(), during.len());
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut input = with("sqrt");
        input.shape.n_layer = 0;
        assert!(matches!(plan(&input), Err(PlanError::Shape(_))));
        let mut input = with("sqrt");
        input.shape.seq_len = usize::MAX / 2;
        assert!(matches!(plan(&input), Err(PlanError::Shape(_))));
        assert!(matches!(plan(&with("sometimes")), Err(PlanError::Parse(_))));
    }
}
