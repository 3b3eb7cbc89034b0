//! A [`Plan`] for people (the best layouts, what each step is made of, why the rest were
//! discarded), for scripts (JSON) and as a picture (predicted step time against memory
//! per GPU, every candidate a point).

use super::{Plan, PlanInputs};
use crate::plot::{PALETTE, plot_err};
use crate::report::Report;
use crate::table::{self, Table};
use crate::{PerfError, Result};
use plotters::prelude::*;
use serde_json::json;

impl Plan {
    /// The `top` best layouts with their step's parts, and the discarded ones by reason.
    pub fn report(&self, inp: &PlanInputs, top: usize) -> Report {
        let c = &inp.cluster;
        let title = format!(
            "Layouts for a {} model on {} × {} ({} sequences of {} tokens per step)",
            table::count(inp.model.params()),
            c.gpus,
            c.gpu.id,
            inp.global_batch,
            inp.model.seq_len
        );
        let mut r = Report::new(title, json!({}));
        let mut t = Table::new([
            "#",
            "layout",
            "memory/GPU",
            "step",
            "MFU",
            "compute",
            "tp",
            "dp",
            "pp",
            "bubble",
            "limited by",
        ]);
        for (i, cand) in self.candidates.iter().take(top).enumerate() {
            let s = &cand.time;
            let share = |x: f64| table::percent(x / s.total_s());
            t.row([
                (i + 1).to_string(),
                cand.name.clone(),
                table::bytes_binary(cand.memory_bytes),
                table::duration(s.total_s()),
                table::percent(cand.mfu),
                share(s.compute_s),
                share(s.tp_s),
                share(s.dp_exposed_s),
                share(s.pp_s),
                share(s.bubble_s),
                s.limit().to_string(),
            ]);
        }
        r.table("Best layouts (time shares of each step)", t);
        r.note(self.summary(inp));
        r.json = json!({
            "considered": self.considered,
            "fit": self.candidates.len(),
            "efficiency": inp.efficiency,
            "candidates": self.candidates.iter().take(top).collect::<Vec<_>>(),
            "rejected": self.rejected,
        });
        r
    }

    fn summary(&self, inp: &PlanInputs) -> String {
        let mut s = format!(
            "{} layouts considered, {} fit. Compute at {:.0}% of the matmul peak for a large \
             GEMM (--efficiency), less where the widest GEMM is memory-bound.",
            self.considered,
            self.candidates.len(),
            inp.efficiency * 100.0
        );
        for (reason, n, example) in self.rejected.iter().take(4) {
            s.push_str(&format!("\nDiscarded {n}: {reason} (e.g. {example})."));
        }
        s
    }

    /// Every candidate as a point: predicted step time against memory per GPU, the best
    /// `top` in colour, the GPU's usable memory as a line.
    pub fn svg(&self, inp: &PlanInputs, top: usize) -> Result<String> {
        let Some(best) = self.candidates.first() else {
            return Err(PerfError::Invalid("no layout fits: nothing to plot".into()));
        };
        let gib = (1u64 << 30) as f64;
        let cap = inp.headroom * inp.cluster.gpu.memory_bytes / gib;
        let t_min = best.time.total_s();
        let t_max = self
            .candidates
            .iter()
            .map(|c| c.time.total_s())
            .fold(t_min, f64::max);
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (900, 600)).into_drawing_area();
            root.fill(&WHITE).map_err(plot_err)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    "Layouts that fit: step time against memory",
                    ("sans-serif", 20),
                )
                .margin(15)
                .x_label_area_size(45)
                .y_label_area_size(60)
                .build_cartesian_2d((t_min * 0.8..t_max * 1.25).log_scale(), 0.0..cap * 1.1)
                .map_err(plot_err)?;
            chart
                .configure_mesh()
                .x_desc("predicted seconds per step (log)")
                .y_desc("GiB per GPU (2^30 bytes)")
                .draw()
                .map_err(plot_err)?;
            let grey = RGBColor(170, 170, 170);
            let points = self.candidates.iter().skip(top);
            chart
                .draw_series(points.map(|c| {
                    Circle::new((c.time.total_s(), c.memory_bytes / gib), 2, grey.filled())
                }))
                .map_err(plot_err)?
                .label("other layouts that fit")
                .legend(move |(x, y)| Circle::new((x + 6, y), 3, grey.filled()));
            for (i, c) in self.candidates.iter().take(top.min(5)).enumerate() {
                let color = PALETTE[i % PALETTE.len()];
                let at = (c.time.total_s(), c.memory_bytes / gib);
                chart
                    .draw_series(std::iter::once(Circle::new(at, 6, color.filled())))
                    .map_err(plot_err)?
                    .label(format!("#{} {}", i + 1, c.name))
                    .legend(move |(x, y)| Circle::new((x + 6, y), 5, color.filled()));
            }
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(t_min * 0.8, cap), (t_max * 1.25, cap)],
                    BLACK.stroke_width(2),
                )))
                .map_err(plot_err)?
                .label(format!("usable memory: {cap:.1} GiB"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(plot_err)?;
            root.present().map_err(plot_err)?;
        }
        Ok(svg)
    }
}
