//! `brrr recompute`: the activation-recomputation planner explorer (`plan`) and the
//! strategy comparison that fills the README's table (`compare`).

use brrr_backend::{Backend, DType, Error, Result};
use brrr_checkpoint::{Chain, Curve, GptShape, Op, Recompute, Schedule, Strategy};
use brrr_cpu::CpuBackend;
use brrr_nn::{Gpt, GptConfig, MicroBatch};
use brrr_tensor::Tensor;
use brrr_train::{Batcher, Corpus, TrainConfig, Trainer, val_batches};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The model and micro-batch both subcommands plan for (defaults: `brrr train`'s).
#[derive(Clone, Debug, clap::Args)]
pub struct ShapeArgs {
    /// Transformer blocks.
    #[arg(long, default_value_t = 4)]
    pub n_layer: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 4)]
    pub n_head: usize,
    /// Width.
    #[arg(long, default_value_t = 128)]
    pub n_embd: usize,
    /// Sequences per micro-batch.
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Tokens per sequence (also the context length).
    #[arg(long, default_value_t = 128)]
    pub seq_len: usize,
}

impl ShapeArgs {
    fn gpt_config(&self) -> GptConfig {
        GptConfig {
            vocab_size: 256,
            block_size: self.seq_len,
            n_layer: self.n_layer,
            n_head: self.n_head,
            n_embd: self.n_embd,
        }
    }

    fn shape(&self) -> GptShape {
        GptShape {
            n_layer: self.n_layer,
            n_head: self.n_head,
            n_embd: self.n_embd,
            vocab_size: 256,
            batch: self.batch_size,
            seq_len: self.seq_len,
            dtype_bytes: 4,
        }
    }
}

/// Flags of `brrr recompute plan`.
#[derive(Clone, Debug, clap::Args)]
pub struct PlanArgs {
    /// The model and batch whose activations are planned.
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// none, every:K, sqrt, selective or budget:BYTES.
    #[arg(long, default_value = "sqrt", value_parser = parse_strategy)]
    pub checkpoint: Strategy,
    /// Also draw the predicted and measured memory curves to this SVG file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Only plan: do not run the schedule on the CPU backend to measure it.
    #[arg(long)]
    pub no_measure: bool,
}

/// Flags of `brrr recompute compare`.
#[derive(Clone, Debug, clap::Args)]
pub struct CompareArgs {
    /// Blocks of the models compared (the default GPT and a deeper one).
    #[arg(long, value_delimiter = ',', default_values_t = vec![4, 16])]
    pub n_layers: Vec<usize>,
    /// Training steps per strategy; the step time is the median of all but the first.
    #[arg(long, default_value_t = 6)]
    pub steps: u64,
}

/// Parses a `--checkpoint` value.
pub fn parse_strategy(s: &str) -> std::result::Result<Strategy, String> {
    s.parse()
        .map_err(|e: brrr_checkpoint::PlanError| e.to_string())
}

fn plan_err(e: brrr_checkpoint::PlanError) -> Error {
    Error::invalid("recompute", e.to_string())
}

/// Memory after and during each op, measured on a device (bytes above the start).
pub struct MeasuredCurve {
    /// Bytes in use after each op.
    pub after: Vec<u64>,
    /// Peak bytes during each op.
    pub during: Vec<u64>,
}

/// Runs `schedule` once (forward and backward of one micro-batch) on the CPU backend
/// and records the memory after and during every op.
pub fn measure(
    cfg: &GptConfig,
    batch: usize,
    chain: &Chain,
    schedule: &Schedule,
) -> Result<MeasuredCurve> {
    let backend = CpuBackend::new();
    let mut model = Gpt::new(
        &backend,
        cfg.clone(),
        DType::F32,
        &mut ChaCha8Rng::seed_from_u64(1),
    )?;
    let n = batch * cfg.block_size;
    let ids: Vec<u32> = (0..n as u32).map(|i| (i * 31 + 7) % 256).collect();
    let targets: Vec<i32> = ids.iter().map(|&i| ((i * 17 + 3) % 256) as i32).collect();
    let ids = Tensor::from_u32(&backend, &ids, [batch, cfg.block_size])?;
    let targets = Tensor::from_i32(&backend, &targets, [batch, cfg.block_size])?;
    let mut exec = Recompute::new(schedule.clone(), chain)?;
    let base = backend.memory_stats().bytes_in_use;
    backend.reset_peak_memory();
    let mut curve = MeasuredCurve {
        after: Vec::new(),
        during: Vec::new(),
    };
    let mut record = |_: &Op| {
        let m = backend.memory_stats();
        curve.after.push(m.bytes_in_use.saturating_sub(base));
        curve.during.push(m.peak_bytes.saturating_sub(base));
        backend.reset_peak_memory();
    };
    let mb = MicroBatch(0);
    let losses = exec.forward_loss_observed(&mut model, mb, &ids, &targets, &mut record)?;
    drop(losses);
    exec.backward_observed(&mut model, mb, 1.0 / n as f32, &mut record)?;
    Ok(curve)
}

fn mib(b: u64) -> String {
    format!("{:.2}", b as f64 / (1u64 << 20) as f64)
}

/// `brrr recompute plan`: the report (and the SVG, if asked).
pub fn run_plan(args: &PlanArgs) -> Result<String> {
    let cfg = args.shape.gpt_config();
    cfg.validate()?;
    args.shape.shape().check().map_err(plan_err)?;
    let chain = args.shape.shape().chain();
    let schedule = args.checkpoint.plan(&chain).map_err(plan_err)?;
    let curve = schedule.simulate(&chain).map_err(plan_err)?;
    let none = brrr_checkpoint::Strategy::None
        .plan(&chain)
        .and_then(|s| s.simulate(&chain))
        .map_err(plan_err)?;
    let measured = if args.no_measure {
        None
    } else {
        Some(measure(&cfg, args.shape.batch_size, &chain, &schedule)?)
    };
    let mut out = report(args, &chain, &schedule, &curve, &none, measured.as_ref());
    if let Some(path) = &args.svg {
        let title = format!(
            "{} on {} blocks: memory per op",
            args.checkpoint, args.shape.n_layer
        );
        let svg = render_curves_svg(&title, &curve, measured.as_ref())?;
        crate::atomic::write_atomic(path, svg.as_bytes())?;
        let _ = writeln!(out, "\nwrote {}", path.display());
    }
    Ok(out)
}

fn report(
    args: &PlanArgs,
    chain: &Chain,
    schedule: &Schedule,
    curve: &Curve,
    none: &Curve,
    measured: Option<&MeasuredCurve>,
) -> String {
    let mut o = String::new();
    let s = &args.shape;
    let _ = writeln!(
        o,
        "{} on a GPT of {} blocks ({} heads, {} wide), micro-batch {} × {} tokens, f32\n",
        args.checkpoint, s.n_layer, s.n_head, s.n_embd, s.batch_size, s.seq_len
    );
    let (stashes, inputs) = schedule.kept_after_forward();
    let _ = writeln!(
        o,
        "| segment | kept by the forward | stash MiB | input MiB |"
    );
    let _ = writeln!(o, "|---|---|---:|---:|");
    for (i, seg) in chain.segments.iter().enumerate() {
        let kept = if stashes.contains(&i) {
            "stash (no recompute)"
        } else if inputs.contains(&i) {
            "input (recomputed)"
        } else {
            "nothing (recomputed)"
        };
        let _ = writeln!(
            o,
            "| {} | {kept} | {} | {} |",
            seg.name,
            mib(seg.stash),
            mib(seg.input)
        );
    }
    let _ = writeln!(o, "\nschedule: {}", schedule.to_text());
    let _ = writeln!(
        o,
        "extra compute: {:.1}% of one forward ({:.3e} FLOPs)",
        100.0 * curve.extra_cost / chain.forward_cost(),
        curve.extra_cost
    );
    let _ = writeln!(
        o,
        "predicted peak: {} MiB (no recomputation: {} MiB, {:.1}%)",
        mib(curve.peak),
        mib(none.peak),
        100.0 * curve.peak as f64 / none.peak as f64
    );
    if let Some(m) = measured {
        let peak = m.during.iter().copied().max().unwrap_or(0);
        let worst = curve
            .after
            .iter()
            .zip(&m.after)
            .map(|(p, q)| p.abs_diff(*q))
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            o,
            "measured peak (CPU backend): {} MiB ({:+.2}% from predicted); largest gap between \
             the curves after an op: {worst} bytes",
            mib(peak),
            100.0 * (peak as f64 - curve.peak as f64) / curve.peak.max(1) as f64
        );
    }
    let _ = writeln!(
        o,
        "\n| op | predicted during | predicted after | measured during | measured after |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|");
    for (k, op) in schedule.ops.iter().enumerate() {
        let (md, ma) = measured.map_or(("".into(), "".into()), |m| {
            (mib(m.during[k]), mib(m.after[k]))
        });
        let _ = writeln!(
            o,
            "| {op} | {} | {} | {md} | {ma} |",
            mib(curve.during[k]),
            mib(curve.after[k])
        );
    }
    o
}

/// The predicted (and measured) memory through the schedule's ops, MiB.
pub fn render_curves_svg(
    title: &str,
    curve: &Curve,
    measured: Option<&MeasuredCurve>,
) -> Result<String> {
    use plotters::prelude::*;
    let to_mib = |b: &u64| *b as f64 / (1u64 << 20) as f64;
    let n = curve.during.len().max(1);
    let top = curve
        .during
        .iter()
        .chain(measured.map_or(&[][..], |m| &m.during[..]))
        .map(to_mib)
        .fold(0.0f64, f64::max)
        * 1.1;
    let err = |e: &dyn std::fmt::Display| Error::invalid("render_curves_svg", e.to_string());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 540)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(0..n, 0.0..top.max(1e-3))
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("op of the schedule (forward sweep, then backward with recomputation)")
            .y_desc("activation memory (MiB)")
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        let mut series = vec![
            (
                "predicted, during op",
                RGBColor(31, 119, 180),
                curve.during.clone(),
            ),
            (
                "predicted, after op",
                RGBColor(174, 199, 232),
                curve.after.clone(),
            ),
        ];
        if let Some(m) = measured {
            series.push((
                "measured, during op",
                RGBColor(255, 127, 14),
                m.during.clone(),
            ));
            series.push((
                "measured, after op",
                RGBColor(255, 187, 120),
                m.after.clone(),
            ));
        }
        for (name, color, values) in series {
            let points: Vec<(usize, f64)> = values
                .iter()
                .enumerate()
                .map(|(i, b)| (i, to_mib(b)))
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// One row of the comparison.
pub struct CompareRow {
    /// Blocks.
    pub n_layer: usize,
    /// The strategy.
    pub strategy: Strategy,
    /// Predicted activation peak, bytes.
    pub predicted: u64,
    /// Measured activation peak (largest over the steps), bytes.
    pub measured: u64,
    /// Median step seconds (all steps but the first).
    pub step_s: f64,
    /// Extra forward compute, fraction of one forward.
    pub extra: f64,
}

/// `brrr recompute compare`: trains a few steps with each strategy on the shipped
/// corpus, on the CPU backend, in this one process.
pub fn run_compare(args: &CompareArgs) -> Result<Vec<CompareRow>> {
    let corpus = Corpus::load(crate::data::DEFAULT_CORPUS)?;
    let mut rows = Vec::new();
    for &n_layer in &args.n_layers {
        let mut cfg = TrainConfig {
            steps: args.steps.max(2),
            corpus: crate::data::DEFAULT_CORPUS.to_string(),
            eval_every: 1_000_000,
            eval_batches: 1,
            ..TrainConfig::default()
        };
        cfg.model.n_layer = n_layer;
        let chain = cfg.recompute_chain();
        let none_peak = Strategy::None
            .plan(&chain)
            .and_then(|s| s.simulate(&chain))
            .map_err(plan_err)?
            .peak;
        let smallest = brrr_checkpoint::min_budget(&chain).map_err(plan_err)?;
        let strategies = [
            Strategy::None,
            Strategy::Selective,
            Strategy::Sqrt,
            Strategy::Every(1),
            Strategy::Budget((none_peak + smallest) / 2),
            Strategy::Budget(smallest),
        ];
        for s in strategies {
            cfg.checkpoint = s;
            let curve = s
                .plan(&chain)
                .and_then(|p| p.simulate(&chain))
                .map_err(plan_err)?;
            let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
            let val = val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, 1)?;
            let mut t = Trainer::new(&CpuBackend::new(), cfg.clone(), Box::new(data), val)?;
            let mut times = Vec::new();
            let mut measured = 0;
            for i in 0..cfg.steps {
                let st = t.step_blocking()?;
                measured = measured.max(st.activation_peak_bytes);
                if i > 0 {
                    times.push(st.seconds.unwrap_or(f64::NAN));
                }
            }
            times.sort_by(f64::total_cmp);
            rows.push(CompareRow {
                n_layer,
                strategy: s,
                predicted: curve.peak,
                measured,
                step_s: times[times.len() / 2],
                extra: curve.extra_cost / chain.forward_cost(),
            });
        }
    }
    Ok(rows)
}

/// The comparison as a Markdown table.
pub fn compare_table(rows: &[CompareRow]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "| blocks | --checkpoint | activation peak, measured (MiB) | predicted (MiB) | extra forward | step time (ms) |"
    );
    let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            o,
            "| {} | `{}` | {} | {} | {:.0}% | {:.0} |",
            r.n_layer,
            r.strategy,
            mib(r.measured),
            mib(r.predicted),
            100.0 * r.extra,
            1000.0 * r.step_s
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_report_lists_segments_and_agrees_with_the_measurement() {
        let args = PlanArgs {
            shape: ShapeArgs {
                n_layer: 3,
                n_head: 2,
                n_embd: 16,
                batch_size: 2,
                seq_len: 8,
            },
            checkpoint: Strategy::Sqrt,
            svg: None,
            no_measure: false,
        };
        let text = run_plan(&args).unwrap();
        for want in [
            "| h.0 | input (recomputed)",
            "| head | stash",
            "extra compute",
            "measured peak",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        let chain = args.shape.shape().chain();
        let schedule = Strategy::Sqrt.plan(&chain).unwrap();
        let curve = schedule.simulate(&chain).unwrap();
        let m = measure(&args.shape.gpt_config(), 2, &chain, &schedule).unwrap();
        let peak = *m.during.iter().max().unwrap();
        let gap = (peak as f64 - curve.peak as f64).abs() / curve.peak as f64;
        assert!(gap < 0.02, "measured {peak}, predicted {}", curve.peak);
        let svg = render_curves_svg("t", &curve, Some(&m)).unwrap();
        assert!(svg.contains("measured, during op"));
    }
}
