//! `brrr pipeline plan` (a schedule, its simulated timeline and SVG), `brrr pipeline
//! compare` (every schedule run for real on in-process stages by brrr-pp's
//! `PipelineEngine`: measured idle fraction and activations in flight beside the
//! simulator and theory) and `brrr estimate pipeline`. Training with `--pp` is `brrr
//! train`'s, through brrr-launch like every layout.

use brrr_backend::{Error, Result};
use brrr_collectives::run_in_process;
use brrr_cpu::CpuBackend;
use brrr_pp::{
    Action, Costs, PipelineEngine, ScheduleKind, Timeline, generate, planned, simulate, svg, theory,
};
use brrr_train::{Observer, StepStats, TrainConfig};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `brrr pipeline plan`.
#[derive(clap::Args, Debug, Clone)]
pub struct PlanArgs {
    /// Pipeline stages.
    #[arg(long, default_value_t = 4)]
    pub pp: usize,
    /// Micro-batches per step.
    #[arg(long, default_value_t = 8)]
    pub micro_batches: usize,
    /// gpipe, 1f1b, interleaved:V, zb-h1 or zb-h2.
    #[arg(long, default_value = "1f1b")]
    pub schedule: String,
    /// Time of a stage's forward of one micro-batch.
    #[arg(long, default_value_t = 1.0)]
    pub f: f64,
    /// Time of a stage's backward for the input gradient.
    #[arg(long, default_value_t = 1.0)]
    pub b: f64,
    /// Time of a stage's backward for the weight gradient.
    #[arg(long, default_value_t = 1.0)]
    pub w: f64,
    /// Latency of one message between stages.
    #[arg(long, default_value_t = 0.0)]
    pub comm: f64,
    /// Write the timeline as SVG here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

/// The schedule's per-stage order, its simulated bubble beside theory, and the
/// micro-batches in flight per stage.
pub fn run_plan(a: &PlanArgs) -> Result<String> {
    let kind = ScheduleKind::parse(&a.schedule).map_err(|e| Error::invalid("pipeline plan", e))?;
    let costs = Costs {
        f: a.f,
        b: a.b,
        w: a.w,
        comm: a.comm,
    };
    let positive = |x: f64| x > 0.0 && x.is_finite();
    if ![a.f, a.b, a.w].into_iter().all(positive) || !(a.comm == 0.0 || positive(a.comm)) {
        return Err(Error::invalid(
            "pipeline plan",
            "--f, --b, --w must be positive and --comm at least 0",
        ));
    }
    let s = generate(kind, a.pp, a.micro_batches)
        .map_err(|e| Error::invalid("pipeline plan", e.to_string()))?;
    brrr_pp::validate(&s).map_err(|e| Error::invalid("pipeline plan", e.to_string()))?;
    let t = planned(kind, a.pp, a.micro_batches, costs)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{kind}: p = {}, m = {}, v = {}",
        a.pp, a.micro_batches, s.v
    );
    for r in 0..a.pp {
        let line = s.compute_line(r);
        let line = if line.len() > 160 {
            format!("{} …", &line[..line[..160].rfind(' ').unwrap_or(160)])
        } else {
            line
        };
        let _ = writeln!(
            out,
            "stage {r}: {line}\n         idle {:.1}%, peak in flight {}, pending W {}",
            100.0 * t.idle_fraction(r),
            t.peak_in_flight[r],
            t.peak_pending_w[r]
        );
    }
    let th = theory::bubble_fraction(kind, a.pp, a.micro_batches, costs);
    let _ = writeln!(
        out,
        "bubble: simulated {:.2}% of stage time ({:.2}% over the ideal), steady state {:.2}%; theory {}",
        100.0 * t.bubble_fraction(),
        100.0 * t.bubble_over_ideal(),
        100.0 * t.steady_bubble_fraction(),
        th.map_or("-".into(), |x| format!("{:.2}%", 100.0 * x))
    );
    if let Some(path) = &a.svg {
        let title = format!("{kind}, p = {}, m = {}", a.pp, a.micro_batches);
        write_file(path, &svg::timeline_svg(&t, &title, "cost units"))?;
        let _ = writeln!(out, "wrote {}", path.display());
    }
    Ok(out)
}

/// `brrr pipeline compare`.
#[derive(clap::Args, Debug, Clone)]
pub struct CompareArgs {
    /// Pipeline stages.
    #[arg(long, default_value_t = 4)]
    pub pp: usize,
    /// Micro-batches per step.
    #[arg(long, default_value_t = 8)]
    pub micro_batches: usize,
    /// Chunks per stage of the interleaved schedule.
    #[arg(long, default_value_t = 2)]
    pub chunks: usize,
    /// Steps per schedule (the first is not timed).
    #[arg(long, default_value_t = 3)]
    pub steps: u64,
    /// Blocks of the model (at least pp × chunks).
    #[arg(long, default_value_t = 8)]
    pub n_layer: usize,
    /// Width.
    #[arg(long, default_value_t = 128)]
    pub n_embd: usize,
    /// Heads.
    #[arg(long, default_value_t = 4)]
    pub n_head: usize,
    /// Tokens per row (also the model's context).
    #[arg(long, default_value_t = 64)]
    pub seq_len: usize,
    /// Rows per micro-batch.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Write each schedule's measured timeline as DIR/pipeline-SCHEDULE.svg.
    #[arg(long)]
    pub svg_dir: Option<PathBuf>,
}

/// One schedule's row of `brrr pipeline compare`.
#[derive(Clone, Debug)]
pub struct CompareRow {
    /// The schedule.
    pub kind: ScheduleKind,
    /// The fraction of the step the stages sat idle, measured on the executor.
    pub measured_bubble: f64,
    /// The simulator's idle fraction with unit costs (F = 1, B = 1, W = 1 per chunk).
    pub simulated_bubble: f64,
    /// The simulator on the executor's own mean F, B, W (and fused BW) durations of the
    /// timed steps, per chunk: the prediction for this machine, beside the measurement.
    pub simulated_measured: f64,
    /// Those mean durations in ms: `(F, B, W)`, B being the fused BW where the schedule
    /// has no W.
    pub measured_costs_ms: (f64, f64, f64),
    /// The closed-form bubble, where the schedule has one (`None` otherwise).
    pub theory_bubble: Option<f64>,
    /// Per stage, the most micro-batches whose activations it held at once (measured).
    pub peak_in_flight: Vec<usize>,
    /// Per stage, that count as the schedule plans it.
    pub planned_in_flight: Vec<usize>,
    /// Per stage, the peak bytes of activations held, from the backend's counters.
    pub activation_bytes: Vec<u64>,
    /// Mean wall seconds of a timed step.
    pub seconds_per_step: f64,
}

/// Mean F, B and W durations (seconds, per chunk) of the compute spans of `t`; a fused
/// BW counts as B (with W = 0) when there is no W.
fn mean_costs(t: &Timeline) -> Costs {
    let mean = |pick: &dyn Fn(&Action) -> bool| {
        let d: Vec<f64> = t
            .spans
            .iter()
            .filter(|s| pick(&s.action))
            .map(|s| s.end - s.start)
            .collect();
        if d.is_empty() {
            0.0
        } else {
            d.iter().sum::<f64>() / d.len() as f64
        }
    };
    let w = mean(&|a| matches!(a, Action::W { .. }));
    let b = mean(&|a| matches!(a, Action::B { .. } | Action::BW { .. }));
    Costs {
        f: mean(&|a| matches!(a, Action::F { .. })),
        b,
        w,
        comm: 0.0,
    }
}

/// Runs every schedule for `a.steps` steps on the shipped corpus.
pub fn run_compare(a: &CompareArgs) -> Result<Vec<CompareRow>> {
    let mut cfg = TrainConfig {
        model: brrr_nn::GptConfig {
            vocab_size: 256,
            block_size: a.seq_len,
            n_layer: a.n_layer,
            n_head: a.n_head,
            n_embd: a.n_embd,
        },
        steps: a.steps,
        batch_size: a.batch_size,
        seq_len: a.seq_len,
        grad_accum: a.micro_batches,
        warmup_steps: 1,
        eval_every: a.steps.max(1),
        corpus: crate::data::DEFAULT_CORPUS.into(),
        ..TrainConfig::default()
    };
    cfg.layout.pp = a.pp;
    let corpus = brrr_data::DataSpec::open(&cfg.data_options())?;
    let mut rows = Vec::new();
    for kind in ScheduleKind::all(a.chunks) {
        cfg.layout.schedule = kind.to_string();
        cfg.validate()?;
        let run = measure(&cfg, &corpus)?;
        let plan = planned(kind, a.pp, a.micro_batches, Costs::unit())?;
        if let Some(dir) = &a.svg_dir {
            let title = format!(
                "{kind}, p = {}, m = {}: measured (s)",
                a.pp, a.micro_batches
            );
            let name = format!("pipeline-{}.svg", kind.to_string().replace(':', "-"));
            write_file(
                &dir.join(name),
                &svg::timeline_svg(&run.timeline, &title, "s"),
            )?;
        }
        let costs = mean_costs(&run.timeline);
        let s = generate(kind, a.pp, a.micro_batches)
            .map_err(|e| Error::invalid("pipeline", e.to_string()))?;
        let on_measured = simulate(&s, costs).map_err(|d| {
            Error::invalid(
                "pipeline",
                format!("the generated schedule deadlocks at {:?}", d.stuck),
            )
        })?;
        rows.push(CompareRow {
            kind,
            measured_bubble: run.bubble,
            simulated_bubble: if kind == ScheduleKind::ZbH2 {
                plan.steady_bubble_fraction()
            } else {
                plan.bubble_fraction()
            },
            simulated_measured: on_measured.bubble_fraction(),
            measured_costs_ms: (1e3 * costs.f, 1e3 * costs.b, 1e3 * costs.w),
            theory_bubble: theory::bubble_fraction(kind, a.pp, a.micro_batches, Costs::unit()),
            peak_in_flight: run.timeline.peak_in_flight.clone(),
            planned_in_flight: plan.peak_in_flight,
            activation_bytes: run.activation_bytes,
            seconds_per_step: run.seconds_per_step,
        });
    }
    Ok(rows)
}

/// What one schedule's run measured.
struct Measured {
    /// Rank 0's last timeline (seconds).
    timeline: Timeline,
    bubble: f64,
    /// Per stage: the most bytes the step added to what it began with.
    activation_bytes: Vec<u64>,
    seconds_per_step: f64,
}

/// The activation peak and timed seconds of one rank's steps.
#[derive(Default)]
struct StageStats {
    activations: u64,
    seconds: Vec<f64>,
}

impl Observer for StageStats {
    fn on_step(&mut self, s: &StepStats) -> Result<()> {
        self.activations = self.activations.max(s.activation_peak_bytes);
        self.seconds.push(s.seconds.unwrap_or(f64::NAN));
        Ok(())
    }
}

/// Trains `cfg` (its layout a pipeline) on in-process stages through the one training
/// loop, and gathers what each stage measured.
fn measure(cfg: &TrainConfig, data: &brrr_data::DataSpec) -> Result<Measured> {
    let outs = run_in_process(cfg.layout.world(), |world| {
        let (source, val) = data.source(&cfg.data_options(), 0)?;
        let mut e = PipelineEngine::new(&CpuBackend::new(), cfg.clone(), world, source, val)?;
        let mut stats = StageStats::default();
        brrr_train::run_blocking(&mut e, cfg.steps, &mut stats)?;
        let stage = e.stage().rank;
        Ok((
            stage,
            stats,
            e.last_timeline().cloned(),
            e.measured_bubble(),
        ))
    });
    let mut activation_bytes = vec![0; cfg.layout.pp];
    let mut rank0 = None;
    for (r, o) in outs.into_iter().enumerate() {
        let (stage, stats, timeline, bubble) =
            o.map_err(|e| Error::invalid("pipeline compare", format!("rank {r}: {e}")))?;
        activation_bytes[stage] = activation_bytes[stage].max(stats.activations);
        if r == 0 {
            rank0 = Some((stats, timeline, bubble));
        }
    }
    let Some((stats, Some(timeline), Some((_, bubble)))) = rank0 else {
        return Err(Error::invalid("pipeline compare", "no step ran"));
    };
    // The first step warms up: not timed, unless it is the only one.
    let timed = &stats.seconds[usize::from(stats.seconds.len() > 1)..];
    Ok(Measured {
        timeline,
        bubble,
        activation_bytes,
        seconds_per_step: timed.iter().sum::<f64>() / timed.len().max(1) as f64,
    })
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    brrr_train::atomic::write_atomic(path, text.as_bytes())
}

/// The rows as a Markdown table.
pub fn compare_table(rows: &[CompareRow]) -> String {
    let mut s = String::from(
        "| schedule | idle measured | simulated, measured F/B/W | F / B / W ms | simulated, F = B = W | theory | in flight per stage (measured) | planned | activations per stage (MB) | s/step |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let mb: Vec<String> = r
            .activation_bytes
            .iter()
            .map(|b| format!("{:.1}", *b as f64 / 1e6))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {:.1}% | {:.1}% | {:.1} / {:.1} / {:.1} | {:.1}% | {} | {:?} | {:?} | {} | {:.3} |",
            r.kind,
            100.0 * r.measured_bubble,
            100.0 * r.simulated_measured,
            r.measured_costs_ms.0,
            r.measured_costs_ms.1,
            r.measured_costs_ms.2,
            100.0 * r.simulated_bubble,
            r.theory_bubble
                .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x)),
            r.peak_in_flight,
            r.planned_in_flight,
            mb.join(" / "),
            r.seconds_per_step
        );
    }
    s
}

/// `brrr estimate pipeline`: for each schedule, the bubble (theory and simulated with
/// F = B = W), the pipeline's time for one step when one micro-batch's F + B + W through
/// one stage takes `stage_time`, and the micro-batches in flight per stage; with
/// `per_layer = (bytes of one micro-batch's activations per layer, layers)` also the
/// activation bytes each stage holds at its peak.
pub fn estimate_table(
    p: usize,
    m: usize,
    v: usize,
    stage_time: f64,
    per_layer: Option<(f64, usize)>,
) -> Result<String> {
    if !(stage_time > 0.0 && stage_time.is_finite()) {
        return Err(Error::invalid(
            "estimate pipeline",
            "--stage-time must be positive",
        ));
    }
    // Sizes of zero describe no pipeline at all: refused here, not as a table whose
    // every row is the same error.
    for (flag, value) in [("--pp", p), ("--micro-batches", m), ("--chunks", v)] {
        if value == 0 {
            return Err(Error::invalid(
                "estimate pipeline",
                format!("{flag} must be at least 1, got 0"),
            ));
        }
    }
    let costs = Costs {
        f: stage_time / 3.0,
        b: stage_time / 3.0,
        w: stage_time / 3.0,
        comm: 0.0,
    };
    let mut s = format!(
        "p = {p} stages, m = {m} micro-batches, interleaved with v = {v}; ideal time {:.4} (m × stage time)\n",
        m as f64 * stage_time
    );
    s.push_str("| schedule | bubble (theory) | bubble (simulated) | pipeline time | in flight per stage | activations per stage |\n|---|---|---|---|---|---|\n");
    for kind in ScheduleKind::all(v) {
        let t = match planned(kind, p, m, costs) {
            Ok(t) => t,
            Err(e) => {
                let _ = writeln!(s, "| {kind} | - | - | - | {e} | - |");
                continue;
            }
        };
        // ZB-H2's bubble is zero in the steady state of back-to-back steps only.
        let (sim, time) = if kind == ScheduleKind::ZbH2 {
            (t.steady_bubble_fraction(), t.period())
        } else {
            (t.bubble_fraction(), t.makespan)
        };
        let bytes = match per_layer {
            Some((bytes, layers)) => t
                .peak_in_flight
                .iter()
                .map(|&n| {
                    format!(
                        "{:.2} GiB",
                        n as f64 * bytes * layers as f64
                            / (p * kind.chunks()) as f64
                            / (1u64 << 30) as f64
                    )
                })
                .collect::<Vec<_>>()
                .join(" / "),
            None => "- (give --model)".into(),
        };
        let _ = writeln!(
            s,
            "| {kind} | {} | {:.1}% | {time:.4} | {:?} | {bytes} |",
            theory::bubble_fraction(kind, p, m, costs)
                .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x)),
            100.0 * sim,
            t.peak_in_flight
        );
    }
    s.push_str("in flight counts chunk stashes (interleaved: each holds 1/v of a stage's layers); zb-h2's bubble and time are per step when steps run back to back\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_reports_theory_and_rejects_bad_costs() {
        let mut a = PlanArgs {
            pp: 4,
            micro_batches: 8,
            schedule: "gpipe".into(),
            f: 1.0,
            b: 1.0,
            w: 1.0,
            comm: 0.0,
            svg: None,
        };
        let text = run_plan(&a).unwrap();
        assert!(
            text.contains("simulated 27.27%") && text.contains("theory 27.27%"),
            "{text}"
        );
        a.f = -1.0;
        assert!(run_plan(&a).is_err());
        a.f = 1.0;
        a.schedule = "bogus".into();
        assert!(
            run_plan(&a)
                .unwrap_err()
                .to_string()
                .contains("unknown schedule")
        );
    }
}
