//! ProfiledBackend on brrr-cpu: a training step's ops are all counted with the right
//! costs, errors pass through unchanged, and results are bitwise the plain backend's.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::{Backend, DType, GemmSpec, HostData};
use brrr_cpu::CpuBackend;
use brrr_nn::Module;
use brrr_perf::trace::Tracer;
use brrr_profile::ProfiledBackend;
use brrr_train::{Batcher, Corpus, StepStats, TrainConfig, Trainer, val_batches};
use std::sync::Arc;

fn corpus() -> Corpus {
    let text = "It was the best of times, it was the worst of times. ".repeat(60);
    Corpus::from_text("dickens.txt", text).unwrap()
}

fn config() -> TrainConfig {
    let mut cfg = TrainConfig {
        steps: 3,
        batch_size: 2,
        seq_len: 16,
        seed: 5,
        warmup_steps: 1,
        eval_every: 100,
        eval_batches: 1,
        corpus: "dickens.txt".into(),
        ..TrainConfig::default()
    };
    (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) = (2, 2, 32);
    cfg
}

fn trainer<B: Backend>(backend: &B, cfg: &TrainConfig) -> Trainer<B> {
    let c = corpus();
    let data = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let val = val_batches(c.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches).unwrap();
    Trainer::new(backend, cfg.clone(), Box::new(data), val).unwrap()
}

fn weights<B: Backend>(t: &Trainer<B>) -> Vec<HostData> {
    t.model()
        .params()
        .iter()
        .map(|p| brrr_backend::block_on(p.value.to_host()).unwrap())
        .collect()
}

/// The Chrome trace of `steps` training steps of [`config`] on a profiled CPU backend,
/// with the trainer's phases recorded in the same tracer.
fn traced_steps(steps: usize) -> serde_json::Value {
    let tracer = Arc::new(Tracer::new());
    let backend = ProfiledBackend::with_tracer(CpuBackend::new(), tracer.clone()).unwrap();
    let mut t = trainer(&backend, &config());
    t.set_shared_tracer(tracer.clone());
    for _ in 0..steps {
        t.step_blocking().unwrap();
    }
    tracer.to_chrome_value()
}

/// One step: each layer's ops appear as often as the model's structure says, and the
/// GEMM FLOPs add up to the GPT's matmul count exactly.
#[test]
fn every_op_of_a_training_step_is_counted() {
    let cfg = config();
    let tracer = Arc::new(Tracer::new());
    let backend = ProfiledBackend::with_tracer(CpuBackend::new(), tracer.clone()).unwrap();
    let mut t = trainer(&backend, &cfg);
    t.set_shared_tracer(tracer.clone());
    backend.reset(); // the model's initialisation is not part of the step
    t.step_blocking().unwrap();
    let p = backend.profile();
    let calls = |k: &str| p.get(k).map_or(0, |s| s.calls);
    let l = cfg.model.n_layer as u64;
    // Per block two LayerNorms, plus the final one; forward and backward once each.
    assert_eq!(calls("layernorm"), 2 * l + 1);
    assert_eq!(calls("layernorm_backward"), 2 * l + 1);
    assert_eq!(calls("gelu"), l);
    assert_eq!(calls("gelu_backward"), l);
    assert_eq!(calls("softmax"), l);
    assert_eq!(calls("softmax_backward"), l);
    // Token and position embeddings.
    assert_eq!(calls("embedding"), 2);
    assert_eq!(calls("embedding_backward"), 2);
    assert_eq!(calls("cross_entropy"), 1);
    assert_eq!(calls("cross_entropy_backward"), 1);
    // The optimizer phases take every parameter in one call each (multi-tensor ops:
    // one launch each on brrr-cuda): zeroing, the sum of squares, AdamW; then one clip
    // coefficient and one read back.
    for kind in [
        "multi_tensor_fill",
        "multi_tensor_sum_squares",
        "multi_tensor_adamw",
    ] {
        assert_eq!(calls(kind), 1, "{kind}");
    }
    assert_eq!(calls("adamw"), 0);
    assert_eq!(calls("clip_coefficient"), 1);
    assert!(calls("read") >= 1);

    // GEMM FLOPs: per block forward q/k/v 3C², projection C², MLP 8C² (2·tokens· each),
    // scores and P·V 2·(2·B·T²·C); the tied head 2·tokens·C·V; the backward twice the
    // forward (a gradient for each operand).
    let (b, s) = (cfg.batch_size as u64, cfg.seq_len as u64);
    let (c, v) = (cfg.model.n_embd as u64, cfg.model.vocab_size as u64);
    let tokens = b * s;
    let forward = l * (2 * tokens * 12 * c * c + 4 * b * s * s * c) + 2 * tokens * c * v;
    assert_eq!(p.get("gemm").unwrap().flops, 3 * forward);

    // The trace holds one op span per counted call, nested in the trainer's phases.
    let json: serde_json::Value = tracer.to_chrome_value();
    let events = json["traceEvents"].as_array().unwrap();
    let op_spans = events.iter().filter(|e| e["cat"] == "op").count() as u64;
    assert_eq!(op_spans, p.total_calls() + init_calls(&events[..]));
    assert!(events.iter().any(|e| e["name"] == "forward"));
    let gemm = events.iter().find(|e| e["name"] == "gemm").unwrap();
    assert!(gemm["args"]["flops"].as_u64().unwrap() > 0, "{gemm}");
    // Time spent in ops fits inside the step.
    let step_us: f64 = tracer
        .summary()
        .into_iter()
        .find(|(n, _, _)| n == "step")
        .unwrap()
        .1;
    assert!(p.total_us() <= step_us, "{} > {step_us}", p.total_us());
}

/// Op spans recorded before the step (the model's initialisation), which `reset` took
/// out of the totals but not out of the trace: those before the "step" span starts.
fn init_calls(events: &[serde_json::Value]) -> u64 {
    let step_ts = events
        .iter()
        .find(|e| e["name"] == "step")
        .and_then(|e| e["ts"].as_f64())
        .unwrap();
    events
        .iter()
        .filter(|e| e["cat"] == "op" && e["ts"].as_f64().unwrap() < step_ts)
        .count() as u64
}

#[test]
fn gemm_flops_are_2mnk_and_bytes_each_operand_once() {
    let backend = ProfiledBackend::new(CpuBackend::new());
    let (m, n, k) = (24, 40, 56);
    let a = backend
        .upload(&HostData::from_f32(DType::F32, &vec![0.5; m * k]))
        .unwrap();
    let b = backend
        .upload(&HostData::from_f32(DType::F32, &vec![0.25; k * n]))
        .unwrap();
    let mut c = backend.alloc(DType::F32, m * n).unwrap();
    for _ in 0..3 {
        backend
            .gemm(&GemmSpec::new(m, n, k), &a, &b, &mut c)
            .unwrap();
    }
    let g = backend.profile().get("gemm").cloned().unwrap();
    assert_eq!(g.calls, 3);
    assert_eq!(g.flops, 3 * 2 * (m * n * k) as u64);
    assert_eq!(g.bytes, 3 * 4 * (m * k + k * n + m * n) as u64);
    assert!(g.total_us > 0.0);
}

#[test]
fn a_failing_op_returns_the_same_error_and_is_not_counted() {
    let plain = CpuBackend::new();
    let profiled = ProfiledBackend::new(CpuBackend::new());
    let spec = GemmSpec::new(8, 8, 8);
    let run = |be: &dyn Fn(&GemmSpec) -> brrr_backend::Result<()>| be(&spec).unwrap_err();
    let e1 = run(&|s| {
        let a = plain.zeros(DType::F32, 10)?; // needs 64
        let mut c = plain.zeros(DType::F32, 64)?;
        plain.gemm(s, &a, &a, &mut c)
    });
    let e2 = run(&|s| {
        let a = profiled.zeros(DType::F32, 10)?;
        let mut c = profiled.zeros(DType::F32, 64)?;
        profiled.gemm(s, &a, &a, &mut c)
    });
    assert_eq!(format!("{e1:?}"), format!("{e2:?}"));
    assert_eq!(e1.to_string(), e2.to_string());
    assert!(profiled.profile().get("gemm").is_none());
    assert_eq!(profiled.profile().get("zeros").unwrap().calls, 2);
}

#[test]
fn a_disabled_tracer_is_refused() {
    let e = ProfiledBackend::with_tracer(CpuBackend::new(), Arc::new(Tracer::disabled()));
    assert!(e.unwrap_err().to_string().contains("disabled"));
}

#[test]
fn results_are_bitwise_those_of_the_plain_backend() {
    let p = bitwise_same(config());
    assert!(p.get("multi_tensor_adamw").is_some_and(|s| s.calls > 0));
}

/// Mixed precision goes through AdamW on masters (inside the multi-tensor call), casts
/// and the loss scaler's kernels: those are forwarded unchanged too.
#[test]
fn fp16_results_are_bitwise_those_of_the_plain_backend() {
    let mut cfg = config();
    cfg.amp = brrr_amp::AmpConfig::new(brrr_amp::AmpMode::Fp16);
    let p = bitwise_same(cfg);
    for kind in [
        "multi_tensor_adamw",
        "cast",
        "unscale_check_finite",
        "update_loss_scale",
    ] {
        assert!(p.get(kind).is_some_and(|s| s.calls > 0), "no {kind}");
    }
}

/// Trains `cfg` on the plain and the profiled CPU backend; returns the profile.
fn bitwise_same(cfg: TrainConfig) -> brrr_profile::Profile {
    let mut plain = trainer(&CpuBackend::new(), &cfg);
    let profiled_backend = ProfiledBackend::new(CpuBackend::new());
    let mut profiled = trainer(&profiled_backend, &cfg);
    for _ in 0..cfg.steps {
        let a: StepStats = plain.step_blocking().unwrap();
        let b: StepStats = profiled.step_blocking().unwrap();
        assert_eq!(a.loss.to_bits(), b.loss.to_bits());
        assert_eq!(a.grad_norm.to_bits(), b.grad_norm.to_bits());
    }
    assert_eq!(weights(&plain), weights(&profiled));
    assert!(profiled_backend.profile().total_calls() > 0);
    profiled_backend.profile()
}

/// The table from the trace, restricted to the steps after the first, agrees with the
/// backend's own totals over the same steps.
#[test]
fn the_trace_gives_the_same_totals_inside_the_steps() {
    let cfg = config();
    let tracer = Arc::new(Tracer::new());
    let backend = ProfiledBackend::with_tracer(CpuBackend::new(), tracer.clone()).unwrap();
    let mut t = trainer(&backend, &cfg);
    t.set_shared_tracer(tracer.clone());
    t.step_blocking().unwrap();
    backend.reset();
    t.step_blocking().unwrap();
    t.step_blocking().unwrap();
    let direct = backend.profile();
    let (from_trace, wall_us) =
        brrr_profile::Profile::from_chrome_trace(&tracer.to_chrome_value(), "step", 1);
    assert_eq!(direct.total_calls(), from_trace.total_calls());
    for (kind, s) in direct.iter() {
        let o = from_trace.get(kind).unwrap();
        assert_eq!(
            (s.calls, s.flops, s.bytes),
            (o.calls, o.flops, o.bytes),
            "{kind}"
        );
    }
    assert!(wall_us >= from_trace.total_us() && from_trace.total_us() > 0.0);
    let roof = brrr_perf::roofline::Roofline::new("test", 100e9, 10e9).unwrap();
    let table = from_trace.table(wall_us, "2 steps", Some(&roof));
    assert!(table.contains("gemm") && table.contains("adamw"), "{table}");
}

/// Grouped by shape, the GEMMs split into the model's distinct products, whose calls and
/// FLOPs add up to the per-kind totals.
#[test]
fn by_shape_splits_the_gemms_and_adds_up() {
    let trace = traced_steps(1);
    let (kinds, _) = brrr_profile::Profile::from_chrome_trace(&trace, "step", 0);
    let (shapes, wall) = brrr_profile::Profile::from_chrome_trace_by_shape(&trace, "step", 0);
    let gemms: Vec<_> = shapes
        .iter()
        .filter(|(k, _)| k.starts_with("gemm "))
        .collect();
    assert!(gemms.len() > 3, "{gemms:?}");
    let g = kinds.get("gemm").unwrap();
    assert_eq!(gemms.iter().map(|(_, s)| s.calls).sum::<u64>(), g.calls);
    assert_eq!(gemms.iter().map(|(_, s)| s.flops).sum::<u64>(), g.flops);
    let top = shapes.top_table(3, wall, None, "op");
    assert_eq!(top.lines().count(), 2 + 3, "{top}");
}

/// Per phase: every op of the steps lies in one of the trainer's phases, and the phases'
/// wall time fits in the steps'.
#[test]
fn every_op_of_a_step_falls_in_a_phase() {
    let trace = traced_steps(2);
    let (kinds, wall) = brrr_profile::Profile::from_chrome_trace(&trace, "step", 1);
    let (phases, wall2) = brrr_profile::Profile::phases_from_chrome_trace(&trace, "step", 1);
    assert_eq!(wall, wall2);
    // Every op's FLOPs and bytes are attributed to a phase.
    let sum = |p: &brrr_profile::Profile| {
        p.iter()
            .fold((0, 0), |(f, b), (_, s)| (f + s.flops, b + s.bytes))
    };
    assert_eq!(sum(&phases), sum(&kinds));
    assert_eq!(phases.get("forward").unwrap().calls, 1);
    for phase in [
        "zero_grad",
        "forward",
        "backward",
        "clip",
        "adamw",
        "read back",
    ] {
        assert!(phases.get(phase).is_some(), "no {phase}");
    }
    assert!(phases.get("forward").unwrap().flops > 0);
    assert!(phases.total_us() <= wall, "{} > {wall}", phases.total_us());
}

/// A span of the trace: name, start and end (µs).
type Span = (String, f64, f64);

fn spans_of(trace: &serde_json::Value, cat: &str) -> Vec<Span> {
    let events = trace["traceEvents"].as_array().unwrap();
    events
        .iter()
        .filter(|e| e["cat"] == cat)
        .map(|e| {
            let ts = e["ts"].as_f64().unwrap();
            let name = e["name"].as_str().unwrap().to_string();
            (name, ts, ts + e["dur"].as_f64().unwrap())
        })
        .collect()
}

fn within(inner: &Span, outer: &Span) -> bool {
    outer.1 <= inner.1 && inner.2 <= outer.2
}

/// Layer regions (`Backend::begin_region`, category `layer`): every layer's forward and
/// backward is a span, they nest (`h.0.attn forward` inside `h.0 forward`), and every op
/// of the model's passes lies inside one (all but the trainer's sum of the losses).
#[test]
fn every_op_of_the_passes_falls_in_a_layer_region() {
    let trace = traced_steps(1);
    let layers = spans_of(&trace, "layer");
    let find = |n: &str| {
        layers
            .iter()
            .find(|l| l.0 == n)
            .unwrap_or_else(|| panic!("no region {n}: {layers:?}"))
    };
    for (inner, outer) in [
        ("h.0.ln_1 forward", "h.0 forward"),
        ("h.0.attn forward", "h.0 forward"),
        ("h.1.mlp forward", "h.1 forward"),
        ("h.1.ln_2 backward", "h.1 backward"),
        ("h.0.attn backward", "h.0 backward"),
    ] {
        assert!(within(find(inner), find(outer)), "{inner} not in {outer}");
    }
    for n in [
        "embedding forward",
        "head forward",
        "loss forward",
        "head backward",
    ] {
        find(n);
    }
    find("embedding backward");
    let passes: Vec<Span> = spans_of(&trace, "cpu")
        .into_iter()
        .filter(|p| p.0 == "forward" || p.0 == "backward")
        .collect();
    let ops: Vec<Span> = spans_of(&trace, "op")
        .into_iter()
        .filter(|o| passes.iter().any(|p| within(o, p)))
        .collect();
    assert!(ops.len() > 50, "{} ops in the passes", ops.len());
    let outside: Vec<&Span> = ops
        .iter()
        .filter(|op| !layers.iter().any(|l| within(op, l)))
        .collect();
    // The one exception is the trainer's own: it sums the model's per-position losses
    // (a reduce into a new buffer) after the forward.
    let names: Vec<&str> = outside.iter().map(|o| o.0.as_str()).collect();
    assert_eq!(
        names,
        ["alloc", "reduce"],
        "in no layer's region: {outside:?}"
    );
}

/// The plain backend records no regions, so layers never build a region's name there.
#[test]
fn only_the_profiler_records_regions() {
    assert!(!CpuBackend::new().records_regions());
    assert!(ProfiledBackend::new(CpuBackend::new()).records_regions());
}
