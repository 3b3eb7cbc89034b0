//! An SVG line/scatter chart on linear or log axes. It draws what it is given; the axes
//! come from [`crate::logic::chart::Axis`], the numbers from the crates.

use crate::logic::chart::{Axis, si_tick};
use yew::prelude::*;

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesStyle {
    /// A solid line.
    Line,
    /// A dashed line with small dots at the points.
    Trail,
    /// Dots only.
    Points,
    /// A solid line with dots.
    LinePoints,
}

/// One series.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// CSS colour.
    pub color: String,
    /// `(x, y)` in data units.
    pub points: Vec<(f64, f64)>,
    /// How to draw it.
    pub style: SeriesStyle,
    /// Tooltip per point (same length as `points`, or empty).
    pub tips: Vec<String>,
    /// A point to draw large (the current op).
    pub highlight: Option<usize>,
}

impl Series {
    /// A series with no tooltips and no highlight.
    pub fn new(
        name: impl Into<String>,
        color: &str,
        style: SeriesStyle,
        points: Vec<(f64, f64)>,
    ) -> Self {
        Series {
            name: name.into(),
            color: color.into(),
            points,
            style,
            tips: Vec::new(),
            highlight: None,
        }
    }
}

/// Props of [`Chart`].
#[derive(Properties, PartialEq)]
pub struct ChartProps {
    /// `data-testid` and accessible name.
    pub id: AttrValue,
    /// X axis title (with its unit).
    pub x_label: AttrValue,
    /// Y axis title (with its unit).
    pub y_label: AttrValue,
    /// Logarithmic x.
    #[prop_or_default]
    pub x_log: bool,
    /// Logarithmic y.
    #[prop_or_default]
    pub y_log: bool,
    /// The data.
    pub series: Vec<Series>,
    /// Force the y range to include this value (e.g. 0, or a ceiling).
    #[prop_or_default]
    pub y_include: Option<f64>,
    /// Vertical reference lines `(x, label)`.
    #[prop_or_default]
    pub x_marks: Vec<(f64, String)>,
}

const W: f64 = 720.0;
const H: f64 = 380.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 18.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 50.0;

struct Frame {
    x: Axis,
    y: Axis,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        LEFT + self.x.fraction(x) * (W - LEFT - RIGHT)
    }
    fn py(&self, y: f64) -> f64 {
        H - BOTTOM - self.y.fraction(y) * (H - TOP - BOTTOM)
    }
    fn path(&self, pts: &[(f64, f64)]) -> String {
        let mut d = String::new();
        for (i, &(x, y)) in pts.iter().enumerate() {
            if !(x.is_finite() && y.is_finite()) {
                continue;
            }
            let cmd = if i == 0 || d.is_empty() { 'M' } else { 'L' };
            d.push_str(&format!("{cmd}{:.1},{:.1} ", self.px(x), self.py(y)));
        }
        d
    }
}

fn grid(f: &Frame) -> Html {
    let xt = f.x.ticks().into_iter().map(|t| {
        let x = f.px(t);
        html! { <g>
            <line class="grid" x1={format!("{x:.1}")} x2={format!("{x:.1}")} y1={TOP.to_string()} y2={(H - BOTTOM).to_string()} />
            <text class="tick" x={format!("{x:.1}")} y={(H - BOTTOM + 16.0).to_string()} text-anchor="middle">{ si_tick(t) }</text>
        </g> }
    });
    let yt = f.y.ticks().into_iter().map(|t| {
        let y = f.py(t);
        html! { <g>
            <line class="grid" x1={LEFT.to_string()} x2={(W - RIGHT).to_string()} y1={format!("{y:.1}")} y2={format!("{y:.1}")} />
            <text class="tick" x={(LEFT - 6.0).to_string()} y={format!("{:.1}", y + 4.0)} text-anchor="end">{ si_tick(t) }</text>
        </g> }
    });
    html! { <g>{ for xt }{ for yt }</g> }
}

fn series_svg(f: &Frame, s: &Series) -> Html {
    let line = match s.style {
        SeriesStyle::Points => html! {},
        SeriesStyle::Trail => html! {
            <path d={f.path(&s.points)} fill="none" stroke={s.color.clone()} stroke-width="1.5" stroke-dasharray="5 4" />
        },
        SeriesStyle::Line | SeriesStyle::LinePoints => html! {
            <path d={f.path(&s.points)} fill="none" stroke={s.color.clone()} stroke-width="2.2" />
        },
    };
    let dots = !matches!(s.style, SeriesStyle::Line);
    let points =
        s.points.iter().enumerate().filter(|(i, (x, y))| {
            x.is_finite() && y.is_finite() && (dots || s.highlight == Some(*i))
        });
    let points = points.map(|(i, &(x, y))| {
        let big = s.highlight == Some(i);
        let r = if big {
            7.0
        } else if s.style == SeriesStyle::Trail {
            3.0
        } else {
            4.0
        };
        let tip = s.tips.get(i).cloned().unwrap_or_default();
        html! {
            <circle cx={format!("{:.1}", f.px(x))} cy={format!("{:.1}", f.py(y))} r={r.to_string()}
                fill={s.color.clone()} stroke={if big { "#fff" } else { "none" }} stroke-width="2">
                <title>{ tip }</title>
            </circle>
        }
    });
    html! { <g>{ line }{ for points }</g> }
}

/// A chart with axes, grid, series and a legend under it.
#[function_component(Chart)]
pub fn chart(props: &ChartProps) -> Html {
    let xs = props
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let xs: Vec<f64> = xs.chain(props.x_marks.iter().map(|m| m.0)).collect();
    let ys = props
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1));
    let ys: Vec<f64> = ys.chain(props.y_include).collect();
    let frame = Frame {
        x: if props.x_log {
            Axis::covering(xs, true)
        } else {
            tight_linear(&xs)
        },
        y: Axis::covering(ys, props.y_log),
    };
    let marks = props.x_marks.iter().map(|(x, label)| {
        let px = frame.px(*x);
        html! { <g>
            <line class="mark" x1={format!("{px:.1}")} x2={format!("{px:.1}")} y1={TOP.to_string()} y2={(H - BOTTOM).to_string()} />
            <text class="mark-label" x={format!("{:.1}", px + 4.0)} y={(TOP + 12.0).to_string()}>{ label }</text>
        </g> }
    });
    let legend = props.series.iter().filter(|s| !s.name.is_empty()).map(|s| {
        html! { <span class="legend-item"><i style={format!("background:{}", s.color)}></i>{ &s.name }</span> }
    });
    html! {
        <figure class="chart" data-testid={props.id.clone()}>
            <svg viewBox={format!("0 0 {W} {H}")} role="img" aria-label={props.id.clone()}>
                <rect class="plot-bg" x={LEFT.to_string()} y={TOP.to_string()} width={(W - LEFT - RIGHT).to_string()} height={(H - TOP - BOTTOM).to_string()} />
                { grid(&frame) }
                { for marks }
                { for props.series.iter().map(|s| series_svg(&frame, s)) }
                <text class="axis-label" x={((LEFT + W - RIGHT) / 2.0).to_string()} y={(H - 8.0).to_string()} text-anchor="middle">{ &props.x_label }</text>
                <text class="axis-label" transform={format!("translate(14,{}) rotate(-90)", (TOP + H - BOTTOM) / 2.0)} text-anchor="middle">{ &props.y_label }</text>
            </svg>
            <figcaption class="legend">{ for legend }</figcaption>
        </figure>
    }
}

/// A linear x axis over exactly the data (a sweep around a size should not start at 0).
fn tight_linear(xs: &[f64]) -> Axis {
    let finite = xs.iter().copied().filter(|x| x.is_finite());
    let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if lo.is_finite() && hi > lo {
        Axis {
            min: lo,
            max: hi,
            log: false,
        }
    } else {
        Axis::covering(xs.iter().copied(), false)
    }
}
