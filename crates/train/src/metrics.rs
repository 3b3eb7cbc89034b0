//! Training metrics as CSV, and the loss curve as SVG.
//!
//! One row per optimizer step, header [`HEADER`]:
//!
//! ```text
//! step,loss,val_loss,lr,grad_norm,tokens_per_s,loss_scale,skipped,peak_bytes,activation_bytes
//! 1,5.545177,,3.000000e-5,1.234567,10342.5,1,0,14051840,9580800
//! 100,2.913004,2.950112,3.000000e-4,0.873001,10410.0,1,0,17406976,9580800
//! ```
//!
//! `loss_scale` is the dynamic loss scale after the step (`--amp fp16`; 1 without
//! scaling) and `skipped` is 1 when the step found an inf/NaN gradient and left the
//! weights unchanged. `peak_bytes` is the device's peak during the step,
//! `activation_bytes` the most the forwards and backwards added to what the step began
//! with (what `--checkpoint` changes); both are empty where unknown. Files written
//! before these four columns existed (6 fields) still read, and resume.
//!
//! Numbers are written with fixed formats ([`Row`]'s `Display`), so the same values
//! always give the same bytes: a resumed run's CSV can be compared with an
//! uninterrupted run's with `diff`, **except the `tokens_per_s` column**, which is
//! wall-clock throughput and differs from run to run. Determinism checks must ignore
//! that column (e.g. compare [`read_rows`] output with `tokens_per_s` cleared, or use
//! [`read_losses`]).

use crate::atomic::write_atomic;
use crate::engine::StepStats;
use brrr_backend::{Error, Result};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The CSV header line (without newline) that every file written now starts with.
pub const HEADER: &str =
    "step,loss,val_loss,lr,grad_norm,tokens_per_s,loss_scale,skipped,peak_bytes,activation_bytes";

/// The header of files written before the loss-scale and memory columns.
const HEADER_V1: &str = "step,loss,val_loss,lr,grad_norm,tokens_per_s";

/// One step's metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The optimizer step, counting from 1.
    pub step: u64,
    /// Training loss (mean cross-entropy, nats per token).
    pub loss: f32,
    /// Validation loss, when this step evaluated.
    pub val_loss: Option<f32>,
    /// The learning rate the step's update used (the warmup-then-cosine schedule's value).
    pub lr: f32,
    /// Global gradient L2 norm (before clipping).
    pub grad_norm: f32,
    /// Wall-clock throughput: not deterministic, see the module documentation.
    pub tokens_per_s: f64,
    /// The loss scale after the step (1 without loss scaling).
    pub loss_scale: f32,
    /// Whether the step was skipped for an inf/NaN gradient.
    pub skipped: bool,
    /// The device's peak bytes during the step (absent in older files).
    pub peak_bytes: Option<u64>,
    /// Peak bytes above the step's start: the activations (absent in older files).
    pub activation_bytes: Option<u64>,
}

impl fmt::Display for Row {
    /// The CSV line, without newline. Losses and norms with 6 decimals; the learning
    /// rate in scientific notation, because warmup takes it through values like 3e-7
    /// that 6 decimals would print as 0.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{:.6},", self.step, self.loss)?;
        if let Some(v) = self.val_loss {
            write!(f, "{v:.6}")?;
        }
        write!(
            f,
            ",{:.6e},{:.6},{:.1},{},{},",
            self.lr,
            self.grad_norm,
            self.tokens_per_s,
            self.loss_scale,
            u8::from(self.skipped)
        )?;
        if let Some(p) = self.peak_bytes {
            write!(f, "{p}")?;
        }
        f.write_str(",")?;
        if let Some(a) = self.activation_bytes {
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

impl Row {
    /// The row of a step the training library reported, with the validation loss if the
    /// step evaluated. Tokens/s is the step's own (`NaN` when it was not timed).
    pub fn from_stats(s: &StepStats, val_loss: Option<f32>) -> Row {
        Row {
            step: s.step,
            loss: s.loss,
            val_loss,
            lr: s.lr as f32,
            grad_norm: s.grad_norm as f32,
            tokens_per_s: s.tokens as f64 / s.seconds.unwrap_or(f64::NAN),
            peak_bytes: Some(s.peak_bytes),
            activation_bytes: Some(s.activation_peak_bytes),
            loss_scale: s.loss_scale,
            skipped: s.skipped,
        }
    }

    /// Parses one CSV line; `what` (file and line) goes into errors.
    fn parse(line: &str, what: &dyn fmt::Display) -> Result<Row> {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != 10 && fields.len() != 6 {
            return Err(Error::Parse(format!(
                "{what}: expected 10 comma-separated fields ({HEADER}; 6 in older runs), found {}",
                fields.len()
            )));
        }
        fn num<T: std::str::FromStr>(s: &str, col: &str, what: &dyn fmt::Display) -> Result<T> {
            s.trim()
                .parse()
                .map_err(|_| Error::Parse(format!("{what}: column {col}: {s:?} is not a number")))
        }
        Ok(Row {
            step: num(fields[0], "step", what)?,
            loss: num(fields[1], "loss", what)?,
            val_loss: if fields[2].trim().is_empty() {
                None
            } else {
                Some(num(fields[2], "val_loss", what)?)
            },
            lr: num(fields[3], "lr", what)?,
            grad_norm: num(fields[4], "grad_norm", what)?,
            tokens_per_s: num(fields[5], "tokens_per_s", what)?,
            // Files from before mixed precision have no scale: it was 1.
            loss_scale: match fields.get(6) {
                Some(v) => num(v, "loss_scale", what)?,
                None => 1.0,
            },
            skipped: match fields.get(7) {
                Some(v) => num::<u8>(v, "skipped", what)? != 0,
                None => false,
            },
            peak_bytes: fields
                .get(8)
                .filter(|f| !f.trim().is_empty())
                .map(|f| num(f, "peak_bytes", what))
                .transpose()?,
            activation_bytes: fields
                .get(9)
                .filter(|f| !f.trim().is_empty())
                .map(|f| num(f, "activation_bytes", what))
                .transpose()?,
        })
    }
}

/// Appends rows to a metrics CSV, one line (and one `write`) per row.
#[derive(Debug)]
pub struct MetricsWriter {
    path: PathBuf,
    file: File,
}

impl MetricsWriter {
    /// Starts a new file with just the header, replacing any file at `path`.
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        write_atomic(path, format!("{HEADER}\n").as_bytes())?;
        Self::open_append(path)
    }

    /// Reopens the file of an interrupted run that is resuming after step `last_step`.
    ///
    /// Rows with `step > last_step` were logged after the checkpoint being resumed
    /// from, and the resumed run will log those steps again, so they are removed
    /// (atomically), as is a last line cut short by a crash. Kept lines stay
    /// byte-for-byte as they were, so the finished file equals an uninterrupted run's
    /// (up to `tokens_per_s`). Errors if the file is missing or is not a metrics CSV:
    /// resuming without the earlier rows would silently produce a different file.
    pub fn resume(path: impl AsRef<Path>, last_step: u64) -> Result<Self> {
        let path = path.as_ref();
        let text = read_text(path, "cannot resume")?;
        let mut kept = String::with_capacity(text.len());
        for (i, line) in complete_lines(&text, path)?.enumerate() {
            let what = format_args!("{}: line {}", path.display(), i + 2);
            if Row::parse(line, &what)?.step <= last_step {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        write_atomic(path, format!("{HEADER}\n{kept}").as_bytes())?;
        Self::open_append(path)
    }

    fn open_append(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| Error::io(format!("{}: opening for append", path.display()), e))?;
        Ok(MetricsWriter {
            path: path.to_path_buf(),
            file,
        })
    }

    /// The CSV file being appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one row. The line goes out in a single `write` without buffering, so a
    /// kill leaves at most one partial last line, which [`MetricsWriter::resume`] drops.
    pub fn append(&mut self, row: &Row) -> Result<()> {
        self.file
            .write_all(format!("{row}\n").as_bytes())
            .map_err(|e| {
                Error::io(
                    format!("{}: appending step {}", self.path.display(), row.step),
                    e,
                )
            })
    }
}

fn read_text(path: &Path, doing: &str) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::file(path, format!("{doing}: metrics file not found"))
        }
        _ => Error::io(format!("{}: reading metrics", path.display()), e),
    })?;
    String::from_utf8(bytes).map_err(|_| Error::file(path, "metrics file is not UTF-8 text"))
}

/// The data lines of a metrics CSV after checking the header; a final line without
/// its newline (cut short by a crash) is left out.
fn complete_lines<'a>(text: &'a str, path: &Path) -> Result<impl Iterator<Item = &'a str>> {
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    let mut lines = complete.lines();
    match lines.next() {
        Some(h) if h == HEADER || h == HEADER_V1 => Ok(lines),
        other => Err(Error::Parse(format!(
            "{}: not a brrr metrics file: first line is {:?}, expected {HEADER:?}",
            path.display(),
            other.unwrap_or("")
        ))),
    }
}

/// Every complete row of a metrics CSV.
pub fn read_rows(path: impl AsRef<Path>) -> Result<Vec<Row>> {
    let path = path.as_ref();
    let text = read_text(path, "cannot read")?;
    complete_lines(&text, path)?
        .enumerate()
        .map(|(i, line)| Row::parse(line, &format_args!("{}: line {}", path.display(), i + 2)))
        .collect()
}

/// `(step, training loss)` for every row: what determinism tests compare.
pub fn read_losses(path: impl AsRef<Path>) -> Result<Vec<(u64, f32)>> {
    Ok(read_rows(path)?.iter().map(|r| (r.step, r.loss)).collect())
}

/// `(step, validation loss)` for the rows that evaluated.
pub fn read_val_losses(path: impl AsRef<Path>) -> Result<Vec<(u64, f32)>> {
    Ok(read_rows(path)?
        .iter()
        .filter_map(|r| r.val_loss.map(|v| (r.step, v)))
        .collect())
}

/// Draws training and validation loss against step and writes the SVG atomically.
pub fn plot_loss_svg(rows: &[Row], path: impl AsRef<Path>) -> Result<()> {
    let svg = render_loss_svg(rows, "brrr: loss vs step")?;
    write_atomic(path, svg.as_bytes())
}

/// [`plot_loss_svg`] from a metrics CSV on disk.
pub fn plot_csv_svg(csv: impl AsRef<Path>, svg: impl AsRef<Path>) -> Result<()> {
    plot_loss_svg(&read_rows(csv)?, svg)
}

/// The loss plot as an SVG document: training loss as a line, validation loss as a
/// line with a dot at each evaluation. Non-finite losses (a diverged step) are left
/// out rather than stretching the axis to infinity.
pub fn render_loss_svg(rows: &[Row], title: &str) -> Result<String> {
    use plotters::prelude::*;

    let finite = |v: f32| v.is_finite().then_some(v);
    let train: Vec<(u64, f32)> = rows
        .iter()
        .filter_map(|r| Some((r.step, finite(r.loss)?)))
        .collect();
    let val: Vec<(u64, f32)> = rows
        .iter()
        .filter_map(|r| Some((r.step, finite(r.val_loss?)?)))
        .collect();

    let steps = || train.iter().chain(&val).map(|p| p.0);
    let x0 = steps().min().unwrap_or(0);
    let x1 = steps().max().unwrap_or(1).max(x0 + 1);
    let losses = || train.iter().chain(&val).map(|p| p.1);
    let (lo, hi) = losses().fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let (y0, y1) = if lo <= hi {
        let pad = ((hi - lo) * 0.05).max(1e-3);
        ((lo - pad).max(0.0), hi + pad)
    } else {
        (0.0, 1.0)
    };

    let err = |e: &dyn fmt::Display| Error::invalid("render_loss_svg", e.to_string());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 540)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 24))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("step")
            .axis_desc_style(("sans-serif", 18))
            .label_style(("sans-serif", 14))
            .y_desc("loss (nats per token)")
            .draw()
            .map_err(|e| err(&e))?;

        let blue = RGBColor(31, 119, 180);
        let orange = RGBColor(255, 127, 14);
        chart
            .draw_series(LineSeries::new(train.iter().copied(), blue.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label("train")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], blue.stroke_width(2))
            });
        chart
            .draw_series(LineSeries::new(val.iter().copied(), orange.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label("validation")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], orange.stroke_width(2))
            });
        chart
            .draw_series(val.iter().map(|&p| Circle::new(p, 3, orange.filled())))
            .map_err(|e| err(&e))?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(step: u64) -> Row {
        let s = step as f32;
        Row {
            step,
            loss: 5.5 / (1.0 + 0.1 * s),
            val_loss: step.is_multiple_of(3).then(|| 5.6 / (1.0 + 0.1 * s)),
            lr: 3e-4 * (s / 10.0).min(1.0),
            grad_norm: 1.0 / (1.0 + s),
            tokens_per_s: 1000.0 + f64::from(s),
            loss_scale: 65536.0 / (1 + step % 3) as f32,
            skipped: step % 5 == 4,
            peak_bytes: Some(1 << 20),
            activation_bytes: Some(1 << 19),
        }
    }

    #[test]
    fn formatting_is_fixed() {
        let r = Row {
            step: 7,
            loss: 2.5,
            val_loss: None,
            lr: 3e-7,
            grad_norm: 0.125,
            tokens_per_s: 12345.678,
            loss_scale: 1.0,
            skipped: false,
            peak_bytes: None,
            activation_bytes: None,
        };
        assert_eq!(
            r.to_string(),
            "7,2.500000,,3.000000e-7,0.125000,12345.7,1,0,,"
        );
        let with_memory = Row {
            peak_bytes: Some(4096),
            activation_bytes: Some(1024),
            ..r.clone()
        };
        let line = with_memory.to_string();
        assert_eq!(
            line,
            "7,2.500000,,3.000000e-7,0.125000,12345.7,1,0,4096,1024"
        );
        let back = Row::parse(&line, &"test").unwrap();
        assert_eq!(
            (back.peak_bytes, back.activation_bytes),
            (Some(4096), Some(1024))
        );
        let r = Row {
            val_loss: Some(2.75),
            lr: 1e-3,
            ..r
        };
        assert_eq!(
            r.to_string(),
            "7,2.500000,2.750000,1.000000e-3,0.125000,12345.7,1,0,,"
        );
        let back = Row::parse(&r.to_string(), &"test").unwrap();
        assert_eq!(back.val_loss, Some(2.75));
        assert_eq!(back.lr, 1e-3);
        // An fp16 step skipped for an overflow; and a row from before the AMP columns.
        let skipped = Row {
            loss_scale: 32768.0,
            skipped: true,
            ..r.clone()
        };
        assert!(skipped.to_string().ends_with(",32768,1,,"));
        let back = Row::parse(&skipped.to_string(), &"test").unwrap();
        assert_eq!((back.loss_scale, back.skipped), (32768.0, true));
        let old = Row::parse("7,2.5,,1e-3,0.125,12345.7", &"test").unwrap();
        assert_eq!((old.loss_scale, old.skipped), (1.0, false));
        // A diverged step still writes and reads.
        let nan = Row {
            loss: f32::NAN,
            ..r
        };
        assert!(Row::parse(&nan.to_string(), &"test").unwrap().loss.is_nan());
    }

    #[test]
    fn write_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("metrics.csv");
        let mut w = MetricsWriter::create(&p).unwrap();
        assert_eq!(w.path(), p);
        for s in 1..=6 {
            w.append(&row(s)).unwrap();
        }
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with(&format!("{HEADER}\n1,")));
        assert_eq!(text.lines().count(), 7);
        let rows = read_rows(&p).unwrap();
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[2].step, 3);
        assert!(rows[2].val_loss.is_some() && rows[1].val_loss.is_none());
        let losses = read_losses(&p).unwrap();
        assert_eq!(losses[0], (1, 5.0));
        assert_eq!(read_val_losses(&p).unwrap().len(), 2);
        // `create` starts over.
        MetricsWriter::create(&p).unwrap();
        assert!(read_rows(&p).unwrap().is_empty());
    }

    #[test]
    fn resume_gives_the_uninterrupted_file() {
        let dir = tempfile::tempdir().unwrap();
        let full = dir.path().join("full.csv");
        let mut w = MetricsWriter::create(&full).unwrap();
        for s in 1..=10 {
            w.append(&row(s)).unwrap();
        }

        // Interrupted run: checkpoint after step 5, logged up to 8, then killed in
        // the middle of writing step 9's line.
        let cut = dir.path().join("cut.csv");
        let mut w = MetricsWriter::create(&cut).unwrap();
        for s in 1..=8 {
            w.append(&row(s)).unwrap();
        }
        drop(w);
        let mut f = OpenOptions::new().append(true).open(&cut).unwrap();
        f.write_all(b"9,1.9").unwrap();
        drop(f);

        let mut w = MetricsWriter::resume(&cut, 5).unwrap();
        assert_eq!(read_losses(&cut).unwrap().len(), 5);
        for s in 6..=10 {
            w.append(&row(s)).unwrap();
        }
        assert_eq!(std::fs::read(&cut).unwrap(), std::fs::read(&full).unwrap());

        // Resuming at or past the end keeps everything.
        MetricsWriter::resume(&cut, 10).unwrap();
        assert_eq!(std::fs::read(&cut).unwrap(), std::fs::read(&full).unwrap());
        // Resuming from step 0 keeps only the header.
        MetricsWriter::resume(&cut, 0).unwrap();
        assert_eq!(
            std::fs::read_to_string(&cut).unwrap(),
            format!("{HEADER}\n")
        );
    }

    #[test]
    fn resume_and_read_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone.csv");
        let e = MetricsWriter::resume(&missing, 3).unwrap_err().to_string();
        assert!(e.contains("gone.csv") && e.contains("not found"), "{e}");

        let other = dir.path().join("other.csv");
        std::fs::write(&other, "a,b,c\n1,2,3\n").unwrap();
        let e = MetricsWriter::resume(&other, 3).unwrap_err().to_string();
        assert!(
            e.contains("other.csv") && e.contains("not a brrr metrics file"),
            "{e}"
        );
        // The foreign file was not touched.
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "a,b,c\n1,2,3\n");

        let bad = dir.path().join("bad.csv");
        std::fs::write(
            &bad,
            format!("{HEADER}\n1,2.0,,1e-3,0.5,10.0\n2,oops,,1e-3,0.5,10.0\n"),
        )
        .unwrap();
        let e = read_rows(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.csv: line 3") && e.contains("loss"), "{e}");
        std::fs::write(&bad, format!("{HEADER}\n1,2.0\n")).unwrap();
        let e = read_rows(&bad).unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("10 comma-separated"),
            "{e}"
        );
    }

    #[test]
    fn plot_has_axes_title_and_both_series() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("metrics.csv");
        let mut w = MetricsWriter::create(&csv).unwrap();
        for s in 1..=50 {
            w.append(&row(s)).unwrap();
        }
        w.append(&Row {
            loss: f32::INFINITY,
            ..row(51)
        })
        .unwrap();
        let svg_path = dir.path().join("loss.svg");
        plot_csv_svg(&csv, &svg_path).unwrap();
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        // The SVG backend puts each label's text on a line of its own.
        let lines: Vec<&str> = svg.lines().map(str::trim).collect();
        for label in [
            "brrr: loss vs step",
            "step",
            "loss (nats per token)",
            "train",
            "validation",
        ] {
            assert!(lines.contains(&label), "missing label {label:?}");
        }
        // Both series are drawn in their colours, with dots at the evaluations.
        assert!(svg.contains(r##"<polyline fill="none" opacity="1" stroke="#1F77B4""##));
        assert!(svg.contains(r##"<polyline fill="none" opacity="1" stroke="#FF7F0E""##));
        // Steps 3, 6, ..., 51 evaluated (51 has an infinite training loss, a finite val loss).
        assert_eq!(svg.matches("<circle").count(), 17);
        assert!(!svg.contains("inf"), "infinite loss leaked into the plot");
    }

    #[test]
    fn plot_of_nothing_is_still_a_plot() {
        let svg = render_loss_svg(&[], "empty").unwrap();
        assert!(svg.contains("empty") && svg.contains("</svg>"));
        let one = render_loss_svg(&[row(1)], "one").unwrap();
        assert!(one.contains("</svg>"));
    }
}
