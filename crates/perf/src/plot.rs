//! SVG plots: a roofline with ops placed on it, and a per-GPU memory breakdown bar.
//!
//! Both return the SVG as a string (so the web app can inline it) and have `write_*`
//! helpers that write a file atomically.

use crate::error::{PerfError, Result};
use crate::memory::MemoryBreakdown;
use crate::roofline::{Classification, Prediction, Roofline};
use crate::table;
use plotters::prelude::*;
use std::path::Path;

const WIDTH: u32 = 900;
const HEIGHT: u32 = 600;

pub(crate) fn plot_err<E: std::fmt::Display>(e: E) -> PerfError {
    PerfError::Invalid(format!("plotting failed: {e}"))
}

/// Colours for successive rooflines and ops: Tableau 10 (Tableau's default palette).
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Draws `rooflines` (each a flat compute ceiling joined to a sloped bandwidth ceiling at its
/// ridge point) on log-log axes of arithmetic intensity (FLOP/byte) against FLOP/s, with each
/// predicted op as a filled circle at `(intensity, attainable FLOP/s)`, and each measured op
/// (if any) as a cross at `(intensity, achieved FLOP/s)` joined to its prediction.
pub fn roofline_svg(
    title: &str,
    rooflines: &[Roofline],
    predictions: &[Prediction],
    measured: &[Classification],
) -> Result<String> {
    if rooflines.is_empty() {
        return Err(PerfError::Invalid(
            "a roofline plot needs at least one roofline".into(),
        ));
    }
    let (x_min, x_max, y_min, y_max) = roofline_ranges(rooflines, predictions, measured);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .margin_right(40)
            .x_label_area_size(45)
            .y_label_area_size(80)
            .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity (FLOP/byte)")
            .y_desc("attainable FLOP/s")
            .y_label_formatter(&|y| table::flops_per_s(*y))
            .x_label_formatter(&|x| table::sig3(*x))
            .draw()
            .map_err(plot_err)?;

        for (i, r) in rooflines.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let ridge = r.ridge();
            let points = vec![
                (x_min, r.attainable(x_min)),
                (ridge, r.peak_flops),
                (x_max, r.peak_flops),
            ];
            let label = format!("{} (ridge {} FLOP/B)", r.label, table::sig3(ridge));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(plot_err)?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        let op_color = |i: usize| PALETTE[(i + rooflines.len()) % PALETTE.len()];
        for (i, p) in predictions.iter().enumerate() {
            let color = op_color(i);
            let at = (p.intensity, p.attainable_flops);
            chart
                .draw_series(std::iter::once(Circle::new(at, 6, color.filled())))
                .map_err(plot_err)?
                .label(format!("{} ({})", p.op.name, p.regime))
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
        }
        for (i, c) in measured.iter().enumerate() {
            let color = op_color(i);
            let at = (c.predicted.intensity, c.achieved_flops);
            let top = (c.predicted.intensity, c.predicted.attainable_flops);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![top, at],
                    color.stroke_width(1),
                )))
                .map_err(plot_err)?;
            chart
                .draw_series(std::iter::once(Cross::new(at, 7, color.stroke_width(3))))
                .map_err(plot_err)?
                .label(format!(
                    "{} measured: {} of the roof, {}",
                    c.predicted.op.name,
                    table::percent(c.predicted.time_s / c.measured_s),
                    c.regime
                ))
                .legend(move |(x, y)| Cross::new((x + 10, y), 5, color.stroke_width(2)));
        }
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

/// The roofline plot's axis ranges `(x_min, x_max, y_min, y_max)`: every ridge and op
/// covered, with a decade of margin.
fn roofline_ranges(
    rooflines: &[Roofline],
    predictions: &[Prediction],
    measured: &[Classification],
) -> (f64, f64, f64, f64) {
    let mut xs: Vec<f64> = rooflines.iter().map(Roofline::ridge).collect();
    xs.extend(predictions.iter().map(|p| p.intensity));
    xs.extend(measured.iter().map(|c| c.predicted.intensity));
    let x_min = 10f64.powf(
        xs.iter()
            .cloned()
            .fold(f64::INFINITY, f64::min)
            .max(1e-6)
            .log10()
            .floor()
            - 1.0,
    );
    let x_max = 10f64.powf(xs.iter().cloned().fold(0.0, f64::max).log10().ceil() + 1.0);
    let y_max = rooflines.iter().map(|r| r.peak_flops).fold(0.0, f64::max) * 3.0;
    let mut ys: Vec<f64> = rooflines.iter().map(|r| r.attainable(x_min)).collect();
    ys.extend(measured.iter().map(|c| c.achieved_flops));
    ys.extend(predictions.iter().map(|p| p.attainable_flops));
    let y_min = 10f64.powf(
        ys.iter()
            .cloned()
            .fold(f64::INFINITY, f64::min)
            .max(1e-3)
            .log10()
            .floor(),
    );
    (x_min, x_max, y_min, y_max)
}

/// Draws the per-GPU memory breakdown as one stacked horizontal bar (weights, gradients,
/// master weights, optimizer states, activations, buffers) in GiB, the unit GPU capacities come
/// in, with the GPU's capacity as a vertical black line when given.
pub fn memory_svg(title: &str, m: &MemoryBreakdown, capacity_bytes: Option<f64>) -> Result<String> {
    let gib = 1024.0 * 1024.0 * 1024.0;
    let total = m.total() / gib;
    let cap = capacity_bytes.filter(|c| *c > 0.0).map(|c| c / gib);
    let x_max = total.max(cap.unwrap_or(0.0)).max(1e-9) * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(10)
            .build_cartesian_2d(0.0..x_max, 0.0..1.0)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc("GiB per GPU (2^30 bytes)")
            .draw()
            .map_err(plot_err)?;
        let mut x0 = 0.0;
        for (i, (label, bytes)) in m.rows().into_iter().enumerate() {
            if bytes <= 0.0 {
                continue;
            }
            let color = PALETTE[i % PALETTE.len()];
            let x1 = x0 + bytes / gib;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.65), (x1, 0.95)],
                    color.filled(),
                )))
                .map_err(plot_err)?
                .label(format!("{label}: {}", table::bytes_binary(bytes)))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
            x0 = x1;
        }
        if let Some(c) = cap {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(c, 0.0), (c, 1.0)],
                    BLACK.stroke_width(3),
                )))
                .map_err(plot_err)?
                .label(format!("GPU memory: {}", table::bytes_binary(c * gib)))
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(3))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// Writes an SVG string to `path` atomically.
pub fn write_svg(path: impl AsRef<Path>, svg: &str) -> Result<()> {
    crate::trace::write_atomic(path.as_ref(), svg.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{TrainingSetup, TransformerConfig, estimate_memory};
    use crate::roofline::OpCost;
    use crate::specs::{DType, Unit, gpu};

    #[test]
    fn roofline_plot_is_svg_with_labels() {
        let a100 = gpu("a100").unwrap();
        let tc = Roofline::for_gpu(&a100, DType::Bf16, Unit::Tensor).unwrap();
        let cc = Roofline::for_gpu(&a100, DType::F32, Unit::Vector).unwrap();
        let op = OpCost::gemm(4096, 4096, 4096, DType::Bf16).unwrap();
        let p = tc.predict(&op);
        let c = tc.classify(&op, 1e-3).unwrap();
        let svg = roofline_svg("A100", &[tc, cc], &[p], &[c]).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..50]);
        assert!(svg.contains("gemm 4096x4096x4096 bf16"));
        assert!(svg.contains("ridge 153"));
        assert!(roofline_svg("empty", &[], &[], &[]).is_err());
    }

    #[test]
    fn memory_plot_is_svg() {
        let m = estimate_memory(
            &TransformerConfig::preset("gpt2").unwrap(),
            &TrainingSetup::default(),
        )
        .unwrap();
        let svg = memory_svg("GPT-2", &m, Some(24.0 * 1024f64.powi(3))).unwrap();
        assert!(svg.contains("optimizer states") && svg.contains("GPU memory: 24.0 GiB"));
        assert!(svg.contains("GiB per GPU (2^30 bytes)"));
    }
}
