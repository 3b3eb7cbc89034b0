//! The profile page: where a training step's time goes, read from a Chrome trace that
//! brrr-profile's `ProfiledBackend` (every op, every layer's region) and brrr-train's
//! `Trainer` (the phases of each step) recorded together: a few steps run in the tab, or
//! a file written by `brrr train --profile --trace FILE`. The tables are brrr-profile's
//! own (`Profile::from_chrome_trace`, `layers_from_chrome_trace`), the same numbers the
//! command prints; the timeline is the last step's spans, one lane per kind of span.

use brrr_profile::{OpRow, Profile};
use serde_json::Value;

/// What the page shows of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileView {
    /// Steps the tables cover (the first is left out when there are several: it
    /// allocates and faults in memory, as PyTorch's profiler schedule warms up).
    pub steps: usize,
    /// Those steps' wall time, milliseconds.
    pub wall_ms: f64,
    /// Time in ops over the wall time (the rest is the host between ops).
    pub in_ops: f64,
    /// Per op kind, longest first (no regime: the page does not know the machine).
    pub ops: Vec<OpRow>,
    /// Per layer region, blocks summed (`h.*.attn forward`), longest first.
    pub layers: Vec<OpRow>,
    /// The last step.
    pub timeline: Timeline,
}

/// One span on the timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Index into [`Timeline::lanes`].
    pub lane: usize,
    /// From the step's start, milliseconds.
    pub start_ms: f64,
    pub dur_ms: f64,
    /// The span's name (`forward`, `h.0.attn backward`, `gemm`).
    pub name: String,
}

/// The spans of one step, laid out in lanes: the trainer's phases, the layers' regions
/// by nesting depth (a block, then its parts), and the ops.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub lanes: Vec<String>,
    pub bars: Vec<Bar>,
    /// The step's duration, milliseconds.
    pub dur_ms: f64,
}

/// The spans of a trace as (category, name, start µs, duration µs).
fn spans(trace: &Value) -> Vec<(&str, &str, f64, f64)> {
    let events = trace["traceEvents"].as_array().map_or(&[][..], |v| &v[..]);
    events
        .iter()
        .filter(|e| e["ph"] == "X")
        .filter_map(|e| {
            Some((
                e["cat"].as_str().unwrap_or(""),
                e["name"].as_str()?,
                e["ts"].as_f64()?,
                e["dur"].as_f64()?,
            ))
        })
        .collect()
}

/// The page's view of a trace, or why there is none (no `step` span, no op inside one:
/// not a trace of a profiled training run).
pub fn view(trace: &Value) -> Result<ProfileView, String> {
    let all = spans(trace);
    let steps: Vec<(f64, f64)> = all
        .iter()
        .filter(|s| s.0 == "cpu" && s.1 == "step")
        .map(|s| (s.2, s.3))
        .collect();
    let Some(&last) = steps.last() else {
        return Err(
            "the trace has no `step` span: record it with `brrr train --profile \
                    --trace FILE`, or profile a run in this page"
                .into(),
        );
    };
    let skip = usize::from(steps.len() > 1);
    let (ops, wall_us) = Profile::from_chrome_trace(trace, "step", skip);
    if ops.total_calls() == 0 {
        return Err("the steps hold no op spans: the run was not profiled \
                    (`brrr train --profile`)"
            .into());
    }
    let (layers, _) = Profile::layers_from_chrome_trace(trace, "step", skip);
    Ok(ProfileView {
        steps: steps.len() - skip,
        wall_ms: wall_us / 1e3,
        in_ops: if wall_us > 0.0 {
            ops.total_us() / wall_us
        } else {
            0.0
        },
        ops: ops.rows(wall_us, None),
        layers: layers.rows(wall_us, None),
        timeline: timeline(&all, last),
    })
}

/// The spans inside `step` (start, duration in µs) in lanes. Layer regions nest, so each
/// goes to the lane of its depth: the number of regions around it.
fn timeline(all: &[(&str, &str, f64, f64)], step: (f64, f64)) -> Timeline {
    let (t0, t1) = (step.0, step.0 + step.1);
    let inside = |s: &&(&str, &str, f64, f64)| s.2 >= t0 && s.2 + s.3 <= t1 + 1e-3;
    let mut lanes = vec!["phase".to_string()];
    let mut bars = Vec::new();
    let bar = |lane: usize, s: &(&str, &str, f64, f64)| Bar {
        lane,
        start_ms: (s.2 - t0) / 1e3,
        dur_ms: s.3 / 1e3,
        name: s.1.to_string(),
    };
    for s in all.iter().filter(inside) {
        if s.0 == "cpu" && s.1 != "step" {
            bars.push(bar(0, s));
        }
    }
    // Depth by a stack of the regions still open: sorted by start (the longer first
    // where two start together), a region is inside every open one that has not ended
    // by its start. Identical bounds (a coarse clock) nest in recording order.
    let mut regions: Vec<&(&str, &str, f64, f64)> = all
        .iter()
        .filter(inside)
        .filter(|s| s.0 == "layer")
        .collect();
    regions.sort_by(|a, b| a.2.total_cmp(&b.2).then(b.3.total_cmp(&a.3)));
    let mut open: Vec<f64> = Vec::new();
    for r in regions {
        while open
            .last()
            .is_some_and(|&end| end <= r.2 && r.3 > 0.0 || end < r.2)
        {
            open.pop();
        }
        let depth = open.len();
        open.push(r.2 + r.3);
        while lanes.len() <= depth + 1 {
            lanes.push(format!("layer (depth {})", lanes.len() - 1));
        }
        bars.push(bar(depth + 1, r));
    }
    if lanes.len() == 2 {
        lanes[1] = "layer".into();
    }
    let op_lane = lanes.len();
    lanes.push("op".into());
    for s in all.iter().filter(inside).filter(|s| s.0 == "op") {
        bars.push(bar(op_lane, s));
    }
    Timeline {
        lanes,
        bars,
        dur_ms: step.1 / 1e3,
    }
}

/// A colour per op kind or span name, stable across runs: GEMMs blue, attention
/// purple, the optimizer green, memory traffic grey, everything else from a hash.
pub fn colour(name: &str) -> String {
    let fixed = [
        ("gemm", "#2563eb"),
        ("attention", "#7c3aed"),
        ("adamw", "#059669"),
        ("multi_tensor", "#059669"),
        ("upload", "#9ca3af"),
        ("read", "#9ca3af"),
        ("alloc", "#d1d5db"),
    ];
    if let Some((_, c)) = fixed.iter().find(|(k, _)| name.starts_with(k)) {
        return (*c).to_string();
    }
    // FNV-1a over the name: a hue that does not change between runs.
    let h = name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("hsl({}, 60%, 55%)", h % 360)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use brrr_cpu::CpuBackend;
    use brrr_perf::trace::Tracer;
    use brrr_profile::ProfiledBackend;
    use brrr_train::{Batcher, Corpus, TrainConfig, Trainer, val_batches};
    use std::sync::Arc;

    /// Three steps of a tiny GPT on a profiled CPU backend, as the page runs them.
    fn profiled_trace() -> Value {
        let tracer = Arc::new(Tracer::new());
        let cpu = ProfiledBackend::with_tracer(CpuBackend::new(), tracer.clone()).unwrap();
        let text: String = "the quick brown fox jumps over the lazy dog. ".repeat(200);
        let corpus = Corpus::from_text("fox.txt", text).unwrap();
        let mut cfg = TrainConfig {
            steps: 3,
            batch_size: 2,
            seq_len: 16,
            eval_batches: 1,
            ..TrainConfig::default()
        };
        (cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head) = (2, 32, 2);
        cfg.model.block_size = 16;
        let data = Batcher::for_corpus(&corpus, 2, 16, 1).unwrap();
        let val = val_batches(corpus.val(), 2, 16, 1).unwrap();
        let mut t = Trainer::new(&cpu, cfg, Box::new(data), val).unwrap();
        t.set_shared_tracer(tracer.clone());
        for _ in 0..3 {
            t.step_blocking().unwrap();
        }
        tracer.to_chrome_value()
    }

    #[test]
    fn a_profiled_run_gives_tables_and_a_timeline_of_its_last_step() {
        let v = view(&profiled_trace()).unwrap();
        assert_eq!(v.steps, 2, "three steps, the first left out");
        assert!(
            v.wall_ms > 0.0 && v.in_ops > 0.0 && v.in_ops <= 1.0,
            "{v:?}"
        );
        // Times depend on the machine's load; the work does not: GEMMs do the most.
        let most_work = v
            .ops
            .iter()
            .max_by_key(|r| r.stats.flops)
            .map(|r| r.kind.as_str());
        assert_eq!(most_work, Some("gemm"), "{:?}", v.ops);
        assert!(
            v.ops
                .windows(2)
                .all(|w| w[0].stats.total_us >= w[1].stats.total_us)
        );
        let share: f64 = v.ops.iter().map(|r| r.share).sum();
        assert!((share - v.in_ops).abs() < 1e-9);
        assert!(
            v.layers.iter().any(|r| r.kind == "h.*.attn forward"),
            "{:?}",
            v.layers
        );
        let t = &v.timeline;
        assert_eq!(t.lanes.first().map(String::as_str), Some("phase"));
        assert_eq!(t.lanes.last().map(String::as_str), Some("op"));
        for b in &t.bars {
            assert!(
                b.start_ms >= 0.0 && b.start_ms + b.dur_ms <= t.dur_ms + 1e-6,
                "{b:?}"
            );
        }
        let names = |lane: usize| {
            t.bars
                .iter()
                .filter(move |b| b.lane == lane)
                .map(|b| b.name.as_str())
        };
        assert!(names(0).any(|n| n == "forward") && names(0).any(|n| n == "adamw"));
        // Blocks on the first layer lane, their parts on the next.
        assert!(names(1).any(|n| n == "h.1 forward"));
        assert!(names(2).any(|n| n == "h.1.mlp forward"));
        assert!(names(t.lanes.len() - 1).any(|n| n == "gemm"));
    }

    #[test]
    fn a_trace_without_steps_or_ops_is_an_error_that_says_so() {
        let none = serde_json::json!({ "traceEvents": [] });
        assert!(view(&none).unwrap_err().contains("step"));
        let unprofiled = serde_json::json!({ "traceEvents": [
            { "ph": "X", "cat": "cpu", "name": "step", "ts": 0.0, "dur": 10.0 }
        ]});
        assert!(view(&unprofiled).unwrap_err().contains("--profile"));
        // Regions nest by time, touching ones are siblings: a block [0, 100) with parts
        // [0, 50) and [50, 100), then the next block [100, 150).
        let x = |cat: &str, name: &str, ts: f64, dur: f64| serde_json::json!({ "ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur });
        let nested = serde_json::json!({ "traceEvents": [
            x("cpu", "step", 0.0, 200.0),
            x("layer", "h.0 forward", 0.0, 100.0),
            x("layer", "h.0.attn forward", 0.0, 50.0),
            x("layer", "h.0.mlp forward", 50.0, 50.0),
            x("layer", "h.1 forward", 100.0, 50.0),
            x("op", "gemm", 10.0, 30.0),
        ]});
        let t = timeline(&spans(&nested), (0.0, 200.0));
        let lane = |name: &str| t.bars.iter().find(|b| b.name == name).map(|b| b.lane);
        assert_eq!(
            t.lanes,
            ["phase", "layer (depth 0)", "layer (depth 1)", "op"]
        );
        assert_eq!(lane("h.0 forward"), Some(1));
        assert_eq!(lane("h.0.attn forward"), Some(2));
        assert_eq!(lane("h.0.mlp forward"), Some(2));
        assert_eq!(lane("h.1 forward"), Some(1));
        assert_eq!(lane("gemm"), Some(3));
        assert_eq!(colour("gemm"), "#2563eb");
        assert_eq!(colour("layernorm"), colour("layernorm"));
    }
}
