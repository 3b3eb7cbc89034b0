//! Totals per op kind and the table of them, in the manner of PyTorch's
//! `prof.key_averages().table()`: calls, time, share of the wall time, achieved rates, and
//! the regime each kind runs in against a roofline.

use crate::cost::OpCall;
use brrr_perf::roofline::{OpCost, Regime, Roofline};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Running totals of one op kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpStats {
    /// Calls recorded.
    pub calls: u64,
    /// Their summed time, microseconds.
    pub total_us: f64,
    /// Their summed FLOPs.
    pub flops: u64,
    /// Their summed minimum bytes.
    pub bytes: u64,
    /// Whether the kind is a matrix product.
    pub matmul: bool,
}

impl OpStats {
    /// Adds one call that took `dur_us`.
    pub fn add(&mut self, call: &OpCall, dur_us: f64) {
        self.calls += 1;
        self.total_us += dur_us;
        self.flops = self.flops.saturating_add(call.flops);
        self.bytes = self.bytes.saturating_add(call.bytes);
        self.matmul |= call.matmul;
    }
}

/// The totals per op kind of a profiled run ([`crate::ProfiledBackend::profile`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    totals: BTreeMap<String, OpStats>,
}

/// One row of the table: an op kind judged against a roofline.
#[derive(Clone, Debug, PartialEq)]
pub struct OpRow {
    /// The op kind.
    pub kind: String,
    /// Its totals.
    pub stats: OpStats,
    /// Its share of the wall time the table is relative to (0..1).
    pub share: f64,
    /// Achieved FLOP/s: total FLOPs over total time.
    pub flops_per_s: f64,
    /// Achieved bytes/s (minimum bytes, so a lower bound on real traffic).
    pub bytes_per_s: f64,
    /// The regime by brrr-perf's classifier (`Roofline::classify`), or `None` where the
    /// kind moved no bytes or took no measurable time.
    pub regime: Option<Regime>,
}

impl Profile {
    /// A profile from totals per kind.
    pub fn from_totals(totals: BTreeMap<String, OpStats>) -> Self {
        Profile { totals }
    }

    /// The op spans of a Chrome trace written by [`crate::ProfiledBackend`] (category `op`,
    /// `args` with `flops` and `bytes`) that lie inside the spans named `window` (e.g. the
    /// trainer's `step`), skipping the first `skip` windows (warm-up: the first step
    /// allocates and faults in its memory). Returns the totals per op kind and the
    /// windows' summed duration in microseconds, what the shares are relative to. `gemm`
    /// counts as a matrix product.
    pub fn from_chrome_trace(trace: &serde_json::Value, window: &str, skip: usize) -> (Self, f64) {
        Self::from_trace_grouped(trace, window, skip, |kind, _| kind.to_string())
    }

    /// [`Profile::from_chrome_trace`] with one entry per op kind *and shape* (`gemm
    /// 1x2048x384x128 nn`), as PyTorch's `key_averages(group_by_input_shape=True)`: which
    /// GEMM of the model is the slow one.
    pub fn from_chrome_trace_by_shape(
        trace: &serde_json::Value,
        window: &str,
        skip: usize,
    ) -> (Self, f64) {
        Self::from_trace_grouped(trace, window, skip, |kind, args| {
            let shape = args["shape"].as_str().unwrap_or("?");
            let dtype = args["dtype"].as_str().unwrap_or("?");
            format!("{kind} {shape} {dtype}")
        })
    }

    /// The phases of the windows (the host spans inside each `window` span after the
    /// first `skip`, e.g. the trainer's `forward`, `backward`, `clip`, `adamw`), as
    /// PyTorch's table shows `record_function` ranges: per phase name, its occurrences as
    /// `calls`, their summed wall time as `total_us`, and the FLOPs and bytes of the op
    /// spans inside them. Returns them and the windows' summed duration.
    pub fn phases_from_chrome_trace(
        trace: &serde_json::Value,
        window: &str,
        skip: usize,
    ) -> (Self, f64) {
        Self::ranges_from_chrome_trace(trace, window, skip, "cpu", str::to_string)
    }

    /// The layers' regions of the windows (category `layer`, recorded by
    /// [`crate::ProfiledBackend`] around each layer's forward and backward), grouped by
    /// layer with the block index left out (`h.3.attn forward` counts as
    /// `h.*.attn forward`), in the manner of [`Profile::phases_from_chrome_trace`]. Regions
    /// nest, so a block's time and work include its parts'. Returns them and the windows' summed duration.
    pub fn layers_from_chrome_trace(
        trace: &serde_json::Value,
        window: &str,
        skip: usize,
    ) -> (Self, f64) {
        Self::ranges_from_chrome_trace(trace, window, skip, "layer", layer_kind)
    }

    /// Host spans of category `cat` inside the windows, grouped by `key(name)`, with each
    /// op span's FLOPs and bytes given to every span around it (time and work both
    /// inclusive, so a nested span's rate is that of everything inside it).
    fn ranges_from_chrome_trace(
        trace: &serde_json::Value,
        window: &str,
        skip: usize,
        cat: &str,
        key: impl Fn(&str) -> String,
    ) -> (Self, f64) {
        let events = trace["traceEvents"].as_array().map_or(&[][..], |v| &v[..]);
        let windows = windows_of(events, window, skip);
        let inside = |ts: f64| innermost(&windows, ts).is_some();
        let mut ranges: Vec<(f64, f64, String)> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == cat && e["name"] != window)
            .filter_map(|e| Some((e["ts"].as_f64()?, e["dur"].as_f64()?, e["name"].as_str()?)))
            .filter(|(ts, _, _)| inside(*ts))
            .map(|(ts, dur, name)| (ts, dur, key(name)))
            .collect();
        ranges.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut totals: BTreeMap<String, OpStats> = BTreeMap::new();
        for (_, dur, name) in &ranges {
            let s = totals.entry(name.clone()).or_default();
            s.calls += 1;
            s.total_us += dur;
        }
        let nested = Nested::new(ranges.iter().map(|(t, d, _)| (*t, *d)).collect());
        for e in events.iter().filter(|e| e["ph"] == "X" && e["cat"] == "op") {
            let Some(ts) = e["ts"].as_f64() else { continue };
            for i in nested.around(ts) {
                let s = totals.entry(ranges[i].2.clone()).or_default();
                s.flops = s
                    .flops
                    .saturating_add(e["args"]["flops"].as_u64().unwrap_or(0));
                s.bytes = s
                    .bytes
                    .saturating_add(e["args"]["bytes"].as_u64().unwrap_or(0));
            }
        }
        let wall = windows.iter().map(|(_, d)| d).sum();
        (Profile { totals }, wall)
    }

    fn from_trace_grouped(
        trace: &serde_json::Value,
        window: &str,
        skip: usize,
        key: impl Fn(&str, &serde_json::Value) -> String,
    ) -> (Self, f64) {
        let events = trace["traceEvents"].as_array().map_or(&[][..], |v| &v[..]);
        let span = |e: &serde_json::Value| Some((e["ts"].as_f64()?, e["dur"].as_f64()?));
        let windows = windows_of(events, window, skip);
        let inside = |ts: f64| innermost(&windows, ts).is_some();
        let mut totals: BTreeMap<String, OpStats> = BTreeMap::new();
        for e in events.iter().filter(|e| e["ph"] == "X" && e["cat"] == "op") {
            let (Some((ts, dur)), Some(kind)) = (span(e), e["name"].as_str()) else {
                continue;
            };
            if !inside(ts) {
                continue;
            }
            let args = &e["args"];
            let s = totals.entry(key(kind, args)).or_default();
            s.calls += 1;
            s.total_us += dur;
            s.flops = s.flops.saturating_add(args["flops"].as_u64().unwrap_or(0));
            s.bytes = s.bytes.saturating_add(args["bytes"].as_u64().unwrap_or(0));
            s.matmul |= kind == "gemm";
        }
        let wall = windows.iter().map(|(_, d)| d).sum();
        (Profile { totals }, wall)
    }

    /// The totals of one kind, if it was called.
    pub fn get(&self, kind: &str) -> Option<&OpStats> {
        self.totals.get(kind)
    }

    /// Every kind with its totals, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &OpStats)> {
        self.totals.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Calls over all kinds.
    pub fn total_calls(&self) -> u64 {
        self.totals.values().map(|s| s.calls).sum()
    }

    /// Time over all kinds, microseconds.
    pub fn total_us(&self) -> f64 {
        self.totals.values().map(|s| s.total_us).sum()
    }

    /// The rows of the table, longest total time first. `wall_us` is what the shares are
    /// relative to (the steps' wall time); `roofline` the ceilings the regimes are judged
    /// against.
    pub fn rows(&self, wall_us: f64, roofline: Option<&Roofline>) -> Vec<OpRow> {
        let mut rows: Vec<OpRow> = self
            .iter()
            .map(|(kind, s)| {
                let secs = s.total_us * 1e-6;
                let rate = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
                let regime = roofline.and_then(|r| {
                    let op = OpCost::new(kind, s.flops as f64, s.bytes as f64, s.matmul).ok()?;
                    r.classify(&op, secs).ok().map(|c| c.regime)
                });
                OpRow {
                    kind: kind.to_string(),
                    stats: s.clone(),
                    share: if wall_us > 0.0 {
                        s.total_us / wall_us
                    } else {
                        0.0
                    },
                    flops_per_s: rate(s.flops),
                    bytes_per_s: rate(s.bytes),
                    regime,
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            b.stats
                .total_us
                .total_cmp(&a.stats.total_us)
                .then(a.kind.cmp(&b.kind))
        });
        rows
    }

    /// The table as text: one row per kind, then the ops' sum, the time outside ops and
    /// the wall time. `wall_us` and `roofline` as in [`Profile::rows`]; `wall_label` names
    /// what the wall time covers (e.g. `"10 steps"`).
    pub fn table(&self, wall_us: f64, wall_label: &str, roofline: Option<&Roofline>) -> String {
        let rows = self.rows(wall_us, roofline);
        let width = name_width(&rows);
        let mut out = header(width, "op");
        for r in &rows {
            write_row(&mut out, r, width);
        }
        let ops = self.total_us();
        let pct = |us: f64| {
            if wall_us > 0.0 {
                100.0 * us / wall_us
            } else {
                0.0
            }
        };
        let _ = writeln!(out, "{}", "-".repeat(width + 76));
        let _ = writeln!(
            out,
            "{:<width$} {:>8} {:>11.3} {:>10} {:>6.1}%",
            "ops",
            self.total_calls(),
            ops / 1e3,
            "",
            pct(ops)
        );
        let outside = (wall_us - ops).max(0.0);
        let _ = writeln!(
            out,
            "{:<width$} {:>8} {:>11.3} {:>10} {:>6.1}%",
            "outside ops",
            "",
            outside / 1e3,
            "",
            pct(outside)
        );
        let _ = writeln!(
            out,
            "{:<width$} {:>8} {:>11.3}",
            format!("wall ({wall_label})"),
            "",
            wall_us / 1e3
        );
        if let Some(r) = roofline {
            let _ = writeln!(
                out,
                "regimes against {}: {:.1} GFLOP/s, {:.1} GB/s (ridge {:.1} FLOP/byte)",
                r.label,
                r.peak_flops / 1e9,
                r.bandwidth / 1e9,
                r.ridge()
            );
        }
        out
    }

    /// The `n` entries with the longest total time, as the rows of [`Profile::table`]
    /// without its sums (for a profile by shape, whose entries are many, or by phase),
    /// under a first column named `what` (`op`, `phase`).
    pub fn top_table(
        &self,
        n: usize,
        wall_us: f64,
        roofline: Option<&Roofline>,
        what: &str,
    ) -> String {
        let mut rows = self.rows(wall_us, roofline);
        rows.truncate(n);
        let width = name_width(&rows);
        let mut out = header(width, what);
        for r in &rows {
            write_row(&mut out, r, width);
        }
        out
    }
}

/// The `(ts, dur)` of the complete events named `window`, in time order, without the
/// first `skip`.
fn windows_of(events: &[serde_json::Value], window: &str, skip: usize) -> Vec<(f64, f64)> {
    let mut windows: Vec<(f64, f64)> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == window)
        .filter_map(|e| Some((e["ts"].as_f64()?, e["dur"].as_f64()?)))
        .collect();
    windows.sort_by(|a, b| a.0.total_cmp(&b.0));
    windows.split_off(skip.min(windows.len()))
}

/// The index of the innermost span of `spans` (sorted by start, not overlapping:
/// windows and phases run one after another) that contains `ts`.
fn innermost(spans: &[(f64, f64)], ts: f64) -> Option<usize> {
    let i = spans.partition_point(|(s, _)| *s <= ts);
    (i > 0 && ts <= spans[i - 1].0 + spans[i - 1].1).then(|| i - 1)
}

/// Spans `(start, duration)` sorted by start that may nest (a block's region holds its
/// layers') but do not cross, with each one's parent: the latest-starting span that
/// contains it.
struct Nested {
    spans: Vec<(f64, f64)>,
    parent: Vec<Option<usize>>,
}

impl Nested {
    fn new(spans: Vec<(f64, f64)>) -> Self {
        let end = |(s, d): (f64, f64)| s + d;
        let mut parent = Vec::with_capacity(spans.len());
        let mut open: Vec<usize> = Vec::new();
        for (j, &span) in spans.iter().enumerate() {
            while open.last().is_some_and(|&k| end(spans[k]) < span.0) {
                open.pop();
            }
            parent.push(open.last().copied());
            open.push(j);
        }
        Nested { spans, parent }
    }

    /// The spans that contain `ts`, innermost first. Any span around `ts` holds the
    /// last one starting at or before it (spans do not cross), so the walk goes up
    /// from there: as long as the nesting is deep, not as long as the trace.
    fn around(&self, ts: f64) -> impl Iterator<Item = usize> + '_ {
        let i = self.spans.partition_point(|(s, _)| *s <= ts);
        let mut next = i.checked_sub(1);
        std::iter::from_fn(move || {
            while let Some(j) = next {
                next = self.parent[j];
                if ts <= self.spans[j].0 + self.spans[j].1 {
                    return Some(j);
                }
            }
            None
        })
    }
}

/// The name column's width: the longest name, at least 24.
fn name_width(rows: &[OpRow]) -> usize {
    rows.iter()
        .map(|r| r.kind.chars().count())
        .max()
        .unwrap_or(0)
        .max(24)
}

fn header(width: usize, what: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{what:<width$} {:>8} {:>11} {:>10} {:>7} {:>10} {:>9}  regime",
        "calls", "total ms", "avg us", "% wall", "GFLOP/s", "GB/s"
    );
    let _ = writeln!(out, "{}", "-".repeat(width + 76));
    out
}

fn write_row(out: &mut String, r: &OpRow, width: usize) {
    let avg = r.stats.total_us / r.stats.calls.max(1) as f64;
    let rate = |count: u64, per_s: f64| match count {
        0 => "-".to_string(),
        _ => format!("{:.2}", per_s / 1e9),
    };
    let regime = r.regime.map_or("-".to_string(), |g| g.to_string());
    let _ = writeln!(
        out,
        "{:<width$} {:>8} {:>11.3} {:>10.2} {:>6.1}% {:>10} {:>9}  {}",
        r.kind,
        r.stats.calls,
        r.stats.total_us / 1e3,
        avg,
        r.share * 100.0,
        rate(r.stats.flops, r.flops_per_s),
        rate(r.stats.bytes, r.bytes_per_s),
        regime
    );
}

/// A layer region's name with its block index replaced by `*` (`h.3.attn forward` ->
/// `h.*.attn forward`), so that one row sums a layer over all blocks.
fn layer_kind(name: &str) -> String {
    let Some(rest) = name.strip_prefix("h.") else {
        return name.to_string();
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return name.to_string();
    }
    format!("h.*{}", &rest[digits..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use brrr_backend::DType;

    #[test]
    fn around_walks_up_past_a_sibling_that_ended() {
        // Block [0, 100] holding layers [1, 10] and [11, 50], the second holding
        // [12, 20]; another block [200, 300].
        let n = Nested::new(vec![
            (0.0, 100.0),
            (1.0, 9.0),
            (11.0, 39.0),
            (12.0, 8.0),
            (200.0, 100.0),
        ]);
        let around = |ts: f64| n.around(ts).collect::<Vec<_>>();
        assert_eq!(around(5.0), [1, 0]);
        assert_eq!(around(15.0), [3, 2, 0]);
        assert_eq!(around(30.0), [2, 0]);
        assert_eq!(around(60.0), [0]);
        assert_eq!(around(150.0), [] as [usize; 0]);
        assert_eq!(around(250.0), [4]);
        assert_eq!(around(-1.0), [] as [usize; 0]);
    }

    #[test]
    fn layer_kinds_leave_out_the_block_index() {
        assert_eq!(layer_kind("h.12.attn forward"), "h.*.attn forward");
        assert_eq!(layer_kind("h.0 backward"), "h.* backward");
        assert_eq!(layer_kind("head forward"), "head forward");
        assert_eq!(layer_kind("h.x forward"), "h.x forward");
    }

    fn call(kind: &'static str, flops: u64, bytes: u64) -> OpCall {
        OpCall {
            kind,
            dtype: DType::F32,
            shape: String::new(),
            flops,
            bytes,
            matmul: kind == "gemm",
        }
    }

    #[test]
    fn rows_rate_share_and_regime() {
        let mut totals = BTreeMap::new();
        let mut g = OpStats::default();
        // 1 GFLOP in 10 ms = 100 GFLOP/s against a 100 GFLOP/s peak: compute-bound.
        g.add(&call("gemm", 1_000_000_000, 1000), 10_000.0);
        totals.insert("gemm".to_string(), g);
        let mut a = OpStats::default();
        // 1 MB in 1 ms = 1 GB/s against 10 GB/s: overhead-bound.
        a.add(&call("binary", 1000, 1_000_000), 1_000.0);
        totals.insert("binary".to_string(), a);
        let p = Profile::from_totals(totals);
        let roof = Roofline::new("test", 100e9, 10e9).unwrap();
        let rows = p.rows(20_000.0, Some(&roof));
        assert_eq!(rows[0].kind, "gemm");
        assert!((rows[0].flops_per_s - 100e9).abs() < 1.0);
        assert!((rows[0].share - 0.5).abs() < 1e-12);
        assert_eq!(rows[0].regime, Some(Regime::Compute));
        assert_eq!(rows[1].regime, Some(Regime::Overhead));
        let t = p.table(20_000.0, "1 step", Some(&roof));
        assert!(t.contains("outside ops"), "{t}");
        assert!(t.contains("compute-bound"), "{t}");
        assert_eq!(p.total_calls(), 2);
    }
}
