//! Spans recorded from code, written as Chrome trace event JSON (opens in Perfetto,
//! <https://ui.perfetto.dev>, and `chrome://tracing`).
//!
//! Format: Google, "Trace Event Format" (the JSON Object Format: `{"traceEvents": [...]}`),
//! using complete events (`"ph": "X"`, `ts` and `dur` in microseconds), instant events
//! (`"ph": "i"`), counters (`"ph": "C"`) and metadata events (`"ph": "M"`) to name processes
//! and threads.
//!
//! CPU spans land in process 1 ("host"), one track per OS thread; device spans (timed by a
//! backend with its own events, e.g. CUDA events) land in process 2 ("device"), one track per
//! stream or queue the caller names.
//!
//! ```
//! # #[cfg(not(target_arch = "wasm32"))] {
//! let tracer = brrr_perf::trace::Tracer::new();
//! {
//!     let _step = tracer.span("step");
//!     let _fwd = tracer.span("forward"); // nested: drawn inside "step"
//! }
//! tracer.record_device_span("gemm", 10.0, 25.0, "stream 0");
//! let json = tracer.to_chrome_json();
//! assert!(json.contains("\"traceEvents\""));
//! # }
//! ```

use crate::error::{PerfError, Result};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::thread::ThreadId;

/// A clock returning microseconds since an arbitrary fixed origin.
pub type Clock = Box<dyn Fn() -> f64 + Send + Sync>;

const HOST_PID: u32 = 1;
const DEVICE_PID: u32 = 2;

#[derive(Debug, Clone)]
enum Event {
    Complete {
        name: Cow<'static, str>,
        cat: &'static str,
        pid: u32,
        tid: u32,
        ts: f64,
        dur: f64,
        /// Chrome's `args`: shown in Perfetto's details pane when the span is selected.
        args: Option<Value>,
    },
    Instant {
        name: Cow<'static, str>,
        pid: u32,
        tid: u32,
        ts: f64,
    },
    Counter {
        name: Cow<'static, str>,
        ts: f64,
        /// `(series, value)`: one line per series on the counter's track.
        values: Vec<(String, f64)>,
    },
}

#[derive(Default)]
struct State {
    events: Vec<Event>,
    host_threads: HashMap<ThreadId, u32>,
    host_thread_names: Vec<(u32, String)>,
    device_tracks: Vec<String>,
}

/// Records spans and writes them as a Chrome trace. Thread-safe: share it by reference or in
/// an `Arc`. A disabled tracer ([`Tracer::disabled`]) records nothing and costs one branch.
pub struct Tracer {
    clock: Clock,
    enabled: bool,
    state: Mutex<State>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("enabled", &self.enabled)
            .field("events", &self.len())
            .finish()
    }
}

/// Records a CPU span from its creation to its drop ([`Tracer::span`]).
#[must_use = "a span ends when its guard is dropped; bind it with `let _span = ...`"]
pub struct SpanGuard<'a> {
    tracer: &'a Tracer,
    name: Option<Cow<'static, str>>,
    start_us: f64,
}

impl Drop for SpanGuard<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let end = (self.tracer.clock)();
            self.tracer
                .push_host(name, "cpu", self.start_us, (end - self.start_us).max(0.0));
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Default for Tracer {
    fn default() -> Self {
        Self::new()
    }
}

impl Tracer {
    /// A tracer timing with `std::time::Instant` from its creation. Not on wasm32, where
    /// `Instant::now` panics: use [`Tracer::with_clock`] with `performance.now() * 1000.0`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new() -> Self {
        let origin = std::time::Instant::now();
        Self::with_clock(Box::new(move || origin.elapsed().as_secs_f64() * 1e6))
    }

    /// A tracer using `clock` (microseconds from any fixed origin).
    pub fn with_clock(clock: Clock) -> Self {
        Self {
            clock,
            enabled: true,
            state: Mutex::new(State::default()),
        }
    }

    /// A tracer that records nothing, for code that always calls [`Tracer::span`].
    pub fn disabled() -> Self {
        Self {
            clock: Box::new(|| 0.0),
            enabled: false,
            state: Mutex::new(State::default()),
        }
    }

    /// Whether this tracer records.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Current time on the tracer's clock, microseconds. Use it to align device timestamps.
    pub fn now_us(&self) -> f64 {
        (self.clock)()
    }

    /// Starts a CPU span on the calling thread's track; it ends when the guard drops.
    /// Spans nest by time, so inner guards draw inside outer ones.
    pub fn span(&self, name: impl Into<Cow<'static, str>>) -> SpanGuard<'_> {
        if !self.enabled {
            return SpanGuard {
                tracer: self,
                name: None,
                start_us: 0.0,
            };
        }
        SpanGuard {
            tracer: self,
            name: Some(name.into()),
            start_us: (self.clock)(),
        }
    }

    /// Runs `f` inside a span named `name` and returns its result.
    pub fn in_span<R>(&self, name: impl Into<Cow<'static, str>>, f: impl FnOnce() -> R) -> R {
        let _span = self.span(name);
        f()
    }

    /// Records a CPU span with explicit start and duration (microseconds on this tracer's
    /// clock) on the calling thread's track.
    pub fn record_cpu_span(&self, name: impl Into<Cow<'static, str>>, start_us: f64, dur_us: f64) {
        if self.enabled {
            self.push_host(name.into(), "cpu", start_us, dur_us.max(0.0));
        }
    }

    /// [`Tracer::record_cpu_span`] in category `cat` (e.g. `layer`), which Perfetto can
    /// filter by.
    pub fn record_cpu_span_in(
        &self,
        cat: &'static str,
        name: impl Into<Cow<'static, str>>,
        start_us: f64,
        dur_us: f64,
    ) {
        if self.enabled {
            self.push_host(name.into(), cat, start_us, dur_us.max(0.0));
        }
    }

    /// [`Tracer::record_cpu_span`] with Chrome's `args` (an object of details, e.g. an op's
    /// shape and FLOPs), which Perfetto shows when the span is selected. Category `op`.
    pub fn record_cpu_span_with_args(
        &self,
        name: impl Into<Cow<'static, str>>,
        start_us: f64,
        dur_us: f64,
        args: Value,
    ) {
        if self.enabled {
            self.push_host_with_args(name.into(), "op", start_us, dur_us.max(0.0), Some(args));
        }
    }

    /// Records a span timed on a device (e.g. between two CUDA events, or a WebGPU timestamp
    /// query) on the device track `track` (a stream or queue name). `start_us` must be on this
    /// tracer's clock: convert with an offset taken from [`Tracer::now_us`] at a sync point.
    pub fn record_device_span(
        &self,
        name: impl Into<Cow<'static, str>>,
        start_us: f64,
        dur_us: f64,
        track: &str,
    ) {
        if !self.enabled {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let tid = match st.device_tracks.iter().position(|t| t == track) {
            Some(i) => i as u32 + 1,
            None => {
                st.device_tracks.push(track.to_string());
                st.device_tracks.len() as u32
            }
        };
        st.events.push(Event::Complete {
            name: name.into(),
            cat: "device",
            pid: DEVICE_PID,
            tid,
            ts: start_us,
            dur: dur_us.max(0.0),
            args: None,
        });
    }

    /// Records an instant event (a vertical marker) on the calling thread's track.
    pub fn instant(&self, name: impl Into<Cow<'static, str>>) {
        if !self.enabled {
            return;
        }
        let ts = (self.clock)();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let tid = host_tid(&mut st);
        st.events.push(Event::Instant {
            name: name.into(),
            pid: HOST_PID,
            tid,
            ts,
        });
    }

    /// Records a counter sample (drawn as a graph track), e.g. loss or memory in use.
    /// The track holds the series `value`.
    pub fn counter(&self, name: impl Into<Cow<'static, str>>, value: f64) {
        self.counters(name, &[("value", value)]);
    }

    /// Records a sample of several series on one counter track (`"ph": "C"` with one
    /// `args` entry per series, which Perfetto stacks on one graph), e.g. a memory track
    /// with the bytes in use and the peak:
    ///
    /// ```
    /// let tracer = brrr_perf::trace::Tracer::new();
    /// tracer.counters("memory (bytes)", &[("in use", 1.5e6), ("peak", 2.0e6)]);
    /// assert!(tracer.to_chrome_json().contains("\"ph\":\"C\""));
    /// ```
    pub fn counters(&self, name: impl Into<Cow<'static, str>>, series: &[(&str, f64)]) {
        if !self.enabled {
            return;
        }
        let ts = (self.clock)();
        let values = series.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.events.push(Event::Counter {
            name: name.into(),
            ts,
            values,
        });
    }

    /// Number of events recorded.
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .events
            .len()
    }

    /// Whether nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total duration and count per span name (CPU and device), sorted by total time,
    /// descending: `(name, total_us, count)`.
    pub fn summary(&self) -> Vec<(String, f64, u64)> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut totals: HashMap<&str, (f64, u64)> = HashMap::new();
        for e in &st.events {
            if let Event::Complete { name, dur, .. } = e {
                let t = totals.entry(name.as_ref()).or_default();
                t.0 += dur;
                t.1 += 1;
            }
        }
        let mut v: Vec<_> = totals
            .into_iter()
            .map(|(k, (t, c))| (k.to_string(), t, c))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// The trace as a Chrome trace event JSON value.
    pub fn to_chrome_value(&self) -> Value {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(st.events.len() + 8);
        let meta = |pid: u32, tid: Option<u32>, kind: &str, name: &str| {
            let mut v = json!({"ph": "M", "pid": pid, "name": kind, "args": {"name": name}});
            if let Some(tid) = tid {
                v["tid"] = json!(tid);
            }
            v
        };
        out.push(meta(HOST_PID, None, "process_name", "host"));
        for (tid, name) in &st.host_thread_names {
            out.push(meta(HOST_PID, Some(*tid), "thread_name", name));
        }
        if !st.device_tracks.is_empty() {
            out.push(meta(DEVICE_PID, None, "process_name", "device"));
            for (i, name) in st.device_tracks.iter().enumerate() {
                out.push(meta(DEVICE_PID, Some(i as u32 + 1), "thread_name", name));
            }
        }
        for e in &st.events {
            out.push(match e {
                Event::Complete { name, cat, pid, tid, ts, dur, args } => {
                    let mut v = json!({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur});
                    if let Some(args) = args {
                        v["args"] = args.clone();
                    }
                    v
                }
                Event::Instant { name, pid, tid, ts } => {
                    json!({"name": name, "ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": ts})
                }
                Event::Counter { name, ts, values } => {
                    let args: serde_json::Map<String, Value> =
                        values.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                    json!({"name": name, "ph": "C", "pid": HOST_PID, "ts": ts, "args": args})
                }
            });
        }
        json!({"traceEvents": out, "displayTimeUnit": "ms"})
    }

    /// The trace as Chrome trace event JSON text.
    pub fn to_chrome_json(&self) -> String {
        self.to_chrome_value().to_string()
    }

    /// Writes the trace to `path` atomically: to a temporary file in the same directory, then
    /// renamed over `path`, so a reader never sees a half-written trace.
    pub fn write_chrome_trace(&self, path: impl AsRef<Path>) -> Result<()> {
        write_atomic(path.as_ref(), self.to_chrome_json().as_bytes())
    }

    fn push_host(&self, name: Cow<'static, str>, cat: &'static str, ts: f64, dur: f64) {
        self.push_host_with_args(name, cat, ts, dur, None);
    }

    fn push_host_with_args(
        &self,
        name: Cow<'static, str>,
        cat: &'static str,
        ts: f64,
        dur: f64,
        args: Option<Value>,
    ) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let tid = host_tid(&mut st);
        st.events.push(Event::Complete {
            name,
            cat,
            pid: HOST_PID,
            tid,
            ts,
            dur,
            args,
        });
    }
}

/// Small stable track id for the calling thread, naming the track on first sight.
fn host_tid(st: &mut State) -> u32 {
    let current = std::thread::current();
    if let Some(&tid) = st.host_threads.get(&current.id()) {
        return tid;
    }
    let tid = st.host_threads.len() as u32 + 1;
    st.host_threads.insert(current.id(), tid);
    let name = current
        .name()
        .map(str::to_string)
        .unwrap_or_else(|| format!("thread {tid}"));
    st.host_thread_names.push((tid, name));
    tid
}

/// Writes `bytes` to `path` via a temporary file in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |e: std::io::Error| PerfError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let file_name = path.file_name().ok_or_else(|| PerfError::Io {
        path: path.display().to_string(),
        message: "not a file path".into(),
    })?;
    // No files (and no process ids: `process::id` panics there) on wasm32-unknown-unknown.
    if cfg!(all(target_arch = "wasm32", target_os = "unknown")) {
        return Err(io(std::io::Error::from(std::io::ErrorKind::Unsupported)));
    }
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    let pid = std::process::id();
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    let pid = 0;
    let tmp = dir.join(format!(".{}.tmp{pid}", file_name.to_string_lossy()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn fake_clock() -> (Arc<AtomicU64>, Clock) {
        let t = Arc::new(AtomicU64::new(0));
        let t2 = t.clone();
        (t, Box::new(move || t2.load(Ordering::SeqCst) as f64))
    }

    #[test]
    fn nested_spans_and_device_tracks() {
        let (t, clock) = fake_clock();
        let tracer = Tracer::with_clock(clock);
        {
            let _outer = tracer.span("step");
            t.store(10, Ordering::SeqCst);
            {
                let _inner = tracer.span("forward");
                t.store(30, Ordering::SeqCst);
            }
            t.store(50, Ordering::SeqCst);
        }
        tracer.record_device_span("gemm", 12.0, 5.0, "stream 0");
        tracer.record_device_span("gemm", 20.0, 5.0, "stream 0");
        tracer.record_device_span("copy", 20.0, 1.0, "copy queue");
        tracer.counter("loss", 3.5);
        tracer.instant("checkpoint");
        let v = tracer.to_chrome_value();
        let events = v["traceEvents"].as_array().unwrap();
        let x: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x.len(), 5);
        let fwd = x.iter().find(|e| e["name"] == "forward").unwrap();
        assert_eq!(
            (fwd["ts"].as_f64(), fwd["dur"].as_f64()),
            (Some(10.0), Some(20.0))
        );
        let step = x.iter().find(|e| e["name"] == "step").unwrap();
        assert_eq!(
            (step["ts"].as_f64(), step["dur"].as_f64()),
            (Some(0.0), Some(50.0))
        );
        let copy = x.iter().find(|e| e["name"] == "copy").unwrap();
        assert_eq!(
            (copy["pid"].as_u64(), copy["tid"].as_u64()),
            (Some(2), Some(2))
        );
        assert!(
            events
                .iter()
                .any(|e| e["ph"] == "M" && e["args"]["name"] == "copy queue")
        );
        assert_eq!(tracer.summary()[0], ("step".to_string(), 50.0, 1));
        assert_eq!(tracer.summary()[2], ("gemm".to_string(), 10.0, 2));
    }

    #[test]
    fn spans_carry_args() {
        let (_t, clock) = fake_clock();
        let tracer = Tracer::with_clock(clock);
        tracer.record_cpu_span_with_args("gemm", 1.0, 2.0, json!({"flops": 16}));
        tracer.record_cpu_span("plain", 3.0, 1.0);
        let v = tracer.to_chrome_value();
        let x: Vec<_> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .cloned()
            .collect();
        assert_eq!(x[0]["args"]["flops"], 16);
        assert_eq!(x[0]["cat"], "op");
        assert!(x[1].get("args").is_none());
    }

    #[test]
    fn counters_are_chrome_counter_events() {
        let (t, clock) = fake_clock();
        let tracer = Tracer::with_clock(clock);
        tracer.counter("loss", 3.5);
        t.store(7, Ordering::SeqCst);
        tracer.counters("memory (bytes)", &[("in use", 1024.0), ("peak", 4096.0)]);
        let v = tracer.to_chrome_value();
        let c: Vec<_> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "C")
            .cloned()
            .collect();
        assert_eq!(
            c,
            vec![
                json!({"name": "loss", "ph": "C", "pid": 1, "ts": 0.0, "args": {"value": 3.5}}),
                json!({"name": "memory (bytes)", "ph": "C", "pid": 1, "ts": 7.0,
                       "args": {"in use": 1024.0, "peak": 4096.0}}),
            ]
        );
    }

    #[test]
    fn threads_get_their_own_tracks() {
        let tracer = Tracer::new();
        std::thread::scope(|s| {
            for i in 0..3 {
                let tracer = &tracer;
                std::thread::Builder::new()
                    .name(format!("worker {i}"))
                    .spawn_scoped(s, move || tracer.in_span("work", || ()))
                    .unwrap();
            }
        });
        let v = tracer.to_chrome_value();
        let tids: std::collections::HashSet<_> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| e["tid"].as_u64().unwrap())
            .collect();
        assert_eq!(tids.len(), 3);
    }

    #[test]
    fn disabled_records_nothing() {
        let tracer = Tracer::disabled();
        {
            let _s = tracer.span("x");
        }
        tracer.record_device_span("y", 0.0, 1.0, "s");
        assert!(tracer.is_empty());
    }

    #[test]
    fn writes_atomically() {
        let dir = std::env::temp_dir().join(format!("brrr-perf-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.json");
        let tracer = Tracer::new();
        tracer.in_span("a", || ());
        tracer.write_chrome_trace(&path).unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(v["traceEvents"].as_array().unwrap().len() >= 2);
        // No temporary file left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let bad = tracer.write_chrome_trace(dir.join("missing-dir").join("t.json"));
        assert!(matches!(bad, Err(PerfError::Io { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
