//! [`ProfiledBackend`]: any [`Backend`], with every op timed and costed.

use crate::cost::{self, OpCall, bytes_of};
use crate::table::{OpStats, Profile};
use brrr_backend::{
    AdamWParams, AdamWTensors, AttentionSpec, Backend, BackendInfo, BinaryOp, DType,
    DeviceLocation, EmbeddingSpec, Error, GemmSpec, HostData, LayerNormSpec, Layout, MemoryStats,
    QuantizedMoments, ReduceOp, Result, ScaleUpdateParams, SegmentMask, SoftmaxSpec, UnaryOp,
};
use brrr_perf::trace::Tracer;
use serde_json::json;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// Locks `m`, going on with the data of a thread that panicked while holding it (the
/// totals and regions stay usable for a report).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What every clone of one [`ProfiledBackend`] shares: the tracer and the running totals.
#[derive(Debug)]
struct Shared {
    tracer: Arc<Tracer>,
    totals: Mutex<BTreeMap<&'static str, OpStats>>,
    /// The regions open now ([`Backend::begin_region`]), innermost last, with their
    /// start times. One stack for every clone: regions assume one thread issues the ops
    /// (as one training step on one device does), else they would interleave.
    regions: Mutex<Vec<(String, f64)>>,
    synchronize_each_op: bool,
}

/// A [`Backend`] that forwards every method to `B` and records each op: a span named
/// after the op kind in a [`Tracer`] (its `args` hold the shape, dtype, FLOPs and bytes),
/// and running totals per kind ([`ProfiledBackend::profile`]).
///
/// Results are those of `B`, bit for bit, and an op's error is `B`'s error unchanged (a
/// failed op is not recorded). Buffers are `B`'s own, so tensors and models built on the
/// wrapper are the same objects with the same memory.
///
/// **Timing.** Backends enqueue work and return (CUDA, wgpu): an op's CPU time would be
/// its launch only. So, natively, the wrapper waits for the device after every op
/// ([`Backend::synchronize`]) before it stops the clock, which is what
/// `CUDA_LAUNCH_BLOCKING=1` does for PyTorch's profiler: each op's time is then its
/// whole execution, but the device can no longer overlap one op with the next launch,
/// so a profiled step is somewhat slower than a plain one. On the CPU backend ops are
/// synchronous and the wait costs nothing. On wasm32 nothing may block, so there the
/// times are launch times (see [`ProfiledBackend::synchronizes_each_op`]). An error that
/// the synchronisation reports (an asynchronous device fault) is returned by the op it
/// followed, which is where it is most useful.
#[derive(Clone, Debug)]
pub struct ProfiledBackend<B: Backend> {
    inner: B,
    shared: Arc<Shared>,
}

impl<B: Backend> ProfiledBackend<B> {
    /// Wraps `inner`, recording into a new tracer timed with `std::time::Instant`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(inner: B) -> Self {
        Self::build(inner, Arc::new(Tracer::new()))
    }

    /// Wraps `inner`, recording spans into `tracer` (shared with whoever records the
    /// phases around the ops, e.g. `brrr_train::Trainer::set_shared_tracer`), and timing
    /// with its clock. An error if the tracer is disabled: its clock does not run.
    pub fn with_tracer(inner: B, tracer: Arc<Tracer>) -> Result<Self> {
        if !tracer.is_enabled() {
            return Err(Error::invalid(
                "ProfiledBackend::with_tracer",
                "the tracer is disabled, so its clock does not run: pass an enabled one",
            ));
        }
        Ok(Self::build(inner, tracer))
    }

    /// Wraps `inner` recording nothing (a disabled tracer: no spans, no times), but
    /// waiting for the device after each op as a recording wrapper does: the other
    /// ranks of a profiled parallel run, which so keep the profiled rank's pace.
    pub fn unrecorded(inner: B) -> Self {
        Self::build(inner, Arc::new(Tracer::disabled()))
    }

    fn build(inner: B, tracer: Arc<Tracer>) -> Self {
        ProfiledBackend {
            inner,
            shared: Arc::new(Shared {
                tracer,
                totals: Mutex::new(BTreeMap::new()),
                regions: Mutex::new(Vec::new()),
                synchronize_each_op: !cfg!(target_arch = "wasm32"),
            }),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The tracer the op spans go to.
    pub fn tracer(&self) -> &Arc<Tracer> {
        &self.shared.tracer
    }

    /// Whether each op waits for the device before its clock stops: natively yes, on
    /// wasm32 no (nothing may block there).
    pub fn synchronizes_each_op(&self) -> bool {
        self.shared.synchronize_each_op
    }

    /// The totals per op kind recorded so far (by this handle and all its clones).
    pub fn profile(&self) -> Profile {
        let totals = self.shared.totals.lock().unwrap_or_else(|e| e.into_inner());
        Profile::from_totals(
            totals
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    /// Forgets the totals recorded so far (spans already in the tracer stay), e.g. after
    /// warm-up steps.
    pub fn reset(&self) {
        self.shared
            .totals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    fn now(&self) -> f64 {
        self.shared.tracer.now_us()
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait(&self) -> Result<()> {
        if self.shared.synchronize_each_op {
            brrr_backend::block_on(self.inner.synchronize())?;
        }
        Ok(())
    }

    #[cfg(target_arch = "wasm32")]
    fn wait(&self) -> Result<()> {
        Ok(())
    }

    /// Ends an op begun at `start_us`: waits for the device, then records `call`.
    fn finish(&self, start_us: f64, call: impl FnOnce() -> OpCall) -> Result<()> {
        self.wait()?;
        let dur = (self.now() - start_us).max(0.0);
        self.record(start_us, dur, call());
        Ok(())
    }

    fn record(&self, start_us: f64, dur_us: f64, call: OpCall) {
        let args = json!({
            "shape": call.shape,
            "dtype": call.dtype.as_str(),
            "flops": call.flops,
            "bytes": call.bytes,
        });
        self.shared
            .tracer
            .record_cpu_span_with_args(call.kind, start_us, dur_us, args);
        let mut totals = self.shared.totals.lock().unwrap_or_else(|e| e.into_inner());
        totals.entry(call.kind).or_default().add(&call, dur_us);
    }

    fn dt(&self, buf: &B::Buffer) -> DType {
        self.inner.dtype(buf)
    }

    fn n(&self, buf: &B::Buffer) -> usize {
        self.inner.len(buf)
    }

    fn bytes(&self, buf: &B::Buffer) -> u64 {
        bytes_of(self.dt(buf), self.n(buf))
    }
}

impl<B: Backend> Backend for ProfiledBackend<B> {
    type Buffer = B::Buffer;

    fn info(&self) -> BackendInfo {
        self.inner.info()
    }

    fn location(&self) -> DeviceLocation {
        self.inner.location()
    }

    fn same_device(&self, other: &Self) -> bool {
        self.inner.same_device(&other.inner)
    }

    async fn copy_to_device(&self, src: &Self::Buffer, dst: &Self) -> Result<Self::Buffer> {
        let t0 = self.now();
        let out = self.inner.copy_to_device(src, &dst.inner).await?;
        let dur = (self.now() - t0).max(0.0);
        let call = OpCall::memory(
            "copy_to_device",
            self.dt(src),
            format!("n={}", self.n(src)),
            self.bytes(src).saturating_mul(2),
        );
        self.record(t0, dur, call);
        Ok(out)
    }

    fn supports(&self, dtype: DType) -> bool {
        self.inner.supports(dtype)
    }

    fn records_regions(&self) -> bool {
        true
    }

    fn begin_region(&self, name: &str) {
        let start = self.now();
        lock(&self.shared.regions).push((name.to_string(), start));
    }

    /// Records the region as a span of category `layer`, after waiting for the device
    /// as an op does. A synchronisation error is left to the next op, which reports it.
    fn end_region(&self) {
        let Some((name, start)) = lock(&self.shared.regions).pop() else {
            return;
        };
        let _ = self.wait();
        let dur = (self.now() - start).max(0.0);
        self.shared
            .tracer
            .record_cpu_span_in("layer", name, start, dur);
    }

    fn dtype(&self, buf: &Self::Buffer) -> DType {
        self.inner.dtype(buf)
    }

    fn len(&self, buf: &Self::Buffer) -> usize {
        self.inner.len(buf)
    }

    fn zeros(&self, dtype: DType, len: usize) -> Result<Self::Buffer> {
        let t0 = self.now();
        let out = self.inner.zeros(dtype, len)?;
        let shape = format!("n={len}");
        self.finish(t0, || {
            OpCall::memory("zeros", dtype, shape, bytes_of(dtype, len))
        })?;
        Ok(out)
    }

    fn alloc(&self, dtype: DType, len: usize) -> Result<Self::Buffer> {
        let t0 = self.now();
        let out = self.inner.alloc(dtype, len)?;
        // An allocation moves no data (a backend without one zeroes: that is `zeros`'s
        // traffic inside `alloc`'s time, and shows as overhead).
        self.finish(t0, || OpCall::memory("alloc", dtype, format!("n={len}"), 0))?;
        Ok(out)
    }

    fn upload(&self, data: &HostData) -> Result<Self::Buffer> {
        let t0 = self.now();
        let out = self.inner.upload(data)?;
        self.finish(t0, || {
            let (dtype, n) = (data.dtype(), data.len());
            OpCall::memory("upload", dtype, format!("n={n}"), bytes_of(dtype, n))
        })?;
        Ok(out)
    }

    fn write(&self, buf: &mut Self::Buffer, data: &HostData) -> Result<()> {
        let t0 = self.now();
        self.inner.write(buf, data)?;
        self.finish(t0, || {
            let (dtype, n) = (data.dtype(), data.len());
            OpCall::memory("write", dtype, format!("n={n}"), bytes_of(dtype, n))
        })
    }

    async fn read(&self, buf: &Self::Buffer) -> Result<HostData> {
        let t0 = self.now();
        let out = self.inner.read(buf).await?;
        let dur = (self.now() - t0).max(0.0);
        let (dtype, n) = (self.dt(buf), self.n(buf));
        let call = OpCall::memory("read", dtype, format!("n={n}"), bytes_of(dtype, n));
        self.record(t0, dur, call);
        Ok(out)
    }

    fn synchronize(&self) -> impl Future<Output = Result<()>> {
        self.inner.synchronize()
    }

    fn memory_stats(&self) -> MemoryStats {
        self.inner.memory_stats()
    }

    fn reset_peak_memory(&self) {
        self.inner.reset_peak_memory()
    }

    fn fill(&self, buf: &mut Self::Buffer, value: f64) -> Result<()> {
        let t0 = self.now();
        self.inner.fill(buf, value)?;
        self.finish(t0, || {
            let (dtype, n) = (self.dt(buf), self.n(buf));
            OpCall::memory("fill", dtype, format!("n={n}"), bytes_of(dtype, n))
        })
    }

    fn copy_strided(
        &self,
        src: &Self::Buffer,
        src_layout: &Layout,
        dst: &mut Self::Buffer,
        dst_layout: &Layout,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.copy_strided(src, src_layout, dst, dst_layout)?;
        self.finish(t0, || {
            let dtype = self.dt(src);
            let n = dst_layout.shape.elem_count();
            let bytes = bytes_of(dtype, cost::distinct_elements(src_layout))
                .saturating_add(bytes_of(dtype, n));
            OpCall::memory(
                "copy_strided",
                dtype,
                format!("{}", dst_layout.shape),
                bytes,
            )
        })
    }

    fn cast(&self, src: &Self::Buffer, dst: &mut Self::Buffer) -> Result<()> {
        let t0 = self.now();
        self.inner.cast(src, dst)?;
        self.finish(t0, || {
            let n = self.n(dst);
            let bytes = bytes_of(self.dt(src), n).saturating_add(bytes_of(self.dt(dst), n));
            OpCall::memory("cast", self.dt(src), format!("n={n}"), bytes)
        })
    }

    fn gemm(
        &self,
        spec: &GemmSpec,
        a: &Self::Buffer,
        b: &Self::Buffer,
        c: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.gemm(spec, a, b, c)?;
        self.finish(t0, || cost::gemm(spec, self.dt(a), self.dt(c)))
    }

    fn unary(&self, op: UnaryOp, x: &Self::Buffer, out: &mut Self::Buffer) -> Result<()> {
        let t0 = self.now();
        self.inner.unary(op, x, out)?;
        // One FLOP per element (a transcendental counts 1; `Affine` is an FMA: 2).
        self.finish(t0, || {
            let n = self.n(out);
            let per = if matches!(op, UnaryOp::Affine { .. }) {
                2
            } else {
                1
            };
            let bytes = bytes_of(self.dt(x), n).saturating_add(bytes_of(self.dt(out), n));
            OpCall::elementwise("unary", self.dt(x), n, per, bytes)
        })
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: &Self::Buffer,
        a_layout: &Layout,
        b: &Self::Buffer,
        b_layout: &Layout,
        out: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.binary(op, a, a_layout, b, b_layout, out)?;
        // One FLOP per output element; each input's distinct elements read once.
        self.finish(t0, || {
            let n = self.n(out);
            let bytes = bytes_of(self.dt(a), cost::distinct_elements(a_layout))
                .saturating_add(bytes_of(self.dt(b), cost::distinct_elements(b_layout)))
                .saturating_add(bytes_of(self.dt(out), n));
            OpCall::elementwise("binary", self.dt(out), n, 1, bytes)
        })
    }

    fn axpy(
        &self,
        alpha: f32,
        x: &Self::Buffer,
        y: &mut Self::Buffer,
        y_offset: Option<usize>,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.axpy(alpha, x, y, y_offset)?;
        // `y += alpha·x`: an FMA (2 FLOPs) per element; reads x, reads and writes y
        // (the part of y that was asked for).
        self.finish(t0, || {
            let n = if y_offset.is_some() {
                self.n(x)
            } else {
                self.n(y)
            };
            let bytes =
                bytes_of(self.dt(x), n).saturating_add(bytes_of(self.dt(y), n).saturating_mul(2));
            OpCall::elementwise("axpy", self.dt(y), n, 2, bytes)
        })
    }

    fn reduce(
        &self,
        op: ReduceOp,
        x: &Self::Buffer,
        outer: usize,
        n: usize,
        inner: usize,
        out: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.reduce(op, x, outer, n, inner, out)?;
        // One FLOP per input element; reads the input, writes `outer × inner`.
        self.finish(t0, || {
            let input = outer.saturating_mul(n).saturating_mul(inner);
            let kept = outer.saturating_mul(inner);
            OpCall {
                kind: "reduce",
                dtype: self.dt(x),
                shape: format!("[{outer}, {n}, {inner}]"),
                flops: input as u64,
                bytes: bytes_of(self.dt(x), input).saturating_add(bytes_of(self.dt(out), kept)),
                matmul: false,
            }
        })
    }

    fn has_fused_sum_squares(&self) -> bool {
        self.inner.has_fused_sum_squares()
    }

    fn sum_squares(
        &self,
        x: &Self::Buffer,
        offset: usize,
        len: usize,
        out: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.sum_squares(x, offset, len, out)?;
        // A multiply and an add per element; reads the range, writes one f32.
        self.finish(t0, || OpCall {
            kind: "sum_squares",
            dtype: self.dt(x),
            shape: format!("n={len}"),
            flops: (len as u64).saturating_mul(2),
            bytes: bytes_of(self.dt(x), len).saturating_add(4),
            matmul: false,
        })
    }

    fn softmax(&self, spec: &SoftmaxSpec, x: &Self::Buffer, y: &mut Self::Buffer) -> Result<()> {
        let t0 = self.now();
        self.inner.softmax(spec, x, y)?;
        self.finish(t0, || {
            cost::softmax("softmax", spec.rows, spec.cols, self.dt(x), self.dt(y))
        })
    }

    fn softmax_segmented(
        &self,
        spec: &SoftmaxSpec,
        mask: &SegmentMask,
        segments: &Self::Buffer,
        x: &Self::Buffer,
        y: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.softmax_segmented(spec, mask, segments, x, y)?;
        // The softmax's cost, plus the segment ids read.
        self.finish(t0, || {
            let mut c = cost::softmax(
                "softmax_segmented",
                spec.rows,
                spec.cols,
                self.dt(x),
                self.dt(y),
            );
            c.bytes = c.bytes.saturating_add(self.bytes(segments));
            c
        })
    }

    fn has_fused_attention(&self) -> bool {
        self.inner.has_fused_attention()
    }

    fn attention(
        &self,
        spec: &AttentionSpec,
        qkv: &Self::Buffer,
        y: &mut Self::Buffer,
        lse: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.attention(spec, qkv, y, lse)?;
        self.finish(t0, || cost::attention(spec, self.dt(qkv), false))
    }

    fn attention_backward(
        &self,
        spec: &AttentionSpec,
        qkv: &Self::Buffer,
        y: &Self::Buffer,
        lse: &Self::Buffer,
        dy: &Self::Buffer,
        dqkv: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.attention_backward(spec, qkv, y, lse, dy, dqkv)?;
        self.finish(t0, || cost::attention(spec, self.dt(qkv), true))
    }

    fn softmax_backward(
        &self,
        spec: &SoftmaxSpec,
        y: &Self::Buffer,
        dy: &Self::Buffer,
        dx: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.softmax_backward(spec, y, dy, dx)?;
        self.finish(t0, || {
            cost::softmax_backward(spec.rows, spec.cols, self.dt(y))
        })
    }

    fn layernorm(
        &self,
        spec: &LayerNormSpec,
        x: &Self::Buffer,
        gamma: &Self::Buffer,
        beta: &Self::Buffer,
        y: &mut Self::Buffer,
        mean: &mut Self::Buffer,
        rstd: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.layernorm(spec, x, gamma, beta, y, mean, rstd)?;
        self.finish(t0, || {
            cost::layernorm(spec.rows, spec.cols, self.dt(x), self.dt(gamma))
        })
    }

    fn layernorm_backward(
        &self,
        spec: &LayerNormSpec,
        dy: &Self::Buffer,
        x: &Self::Buffer,
        gamma: &Self::Buffer,
        mean: &Self::Buffer,
        rstd: &Self::Buffer,
        dx: &mut Self::Buffer,
        dgamma: &mut Self::Buffer,
        dbeta: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner
            .layernorm_backward(spec, dy, x, gamma, mean, rstd, dx, dgamma, dbeta)?;
        self.finish(t0, || {
            cost::layernorm_backward(spec.rows, spec.cols, self.dt(x), self.dt(gamma))
        })
    }

    fn gelu(&self, x: &Self::Buffer, y: &mut Self::Buffer) -> Result<()> {
        let t0 = self.now();
        self.inner.gelu(x, y)?;
        self.finish(t0, || {
            let n = self.n(y);
            let bytes = bytes_of(self.dt(x), n).saturating_add(bytes_of(self.dt(y), n));
            OpCall::elementwise("gelu", self.dt(x), n, cost::GELU_FLOPS, bytes)
        })
    }

    fn gelu_backward(
        &self,
        x: &Self::Buffer,
        dy: &Self::Buffer,
        dx: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.gelu_backward(x, dy, dx)?;
        self.finish(t0, || {
            let n = self.n(dx);
            let bytes = bytes_of(self.dt(x), n)
                .saturating_add(bytes_of(self.dt(dy), n))
                .saturating_add(bytes_of(self.dt(dx), n));
            let flops = cost::GELU_BACKWARD_FLOPS;
            OpCall::elementwise("gelu_backward", self.dt(x), n, flops, bytes)
        })
    }

    fn embedding(
        &self,
        spec: &EmbeddingSpec,
        ids: &Self::Buffer,
        table: &Self::Buffer,
        out: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.embedding(spec, ids, table, out)?;
        let dim = spec.dim;
        // A gather: no FLOPs; reads the ids and one table row per id, writes the rows.
        self.finish(t0, || {
            let rows = self.n(ids);
            let n = rows.saturating_mul(dim);
            let bytes = self
                .bytes(ids)
                .saturating_add(bytes_of(self.dt(table), n))
                .saturating_add(bytes_of(self.dt(out), n));
            let shape = format!("ids={rows} dim={dim}");
            OpCall::memory("embedding", self.dt(table), shape, bytes)
        })
    }

    fn scatter_rows(
        &self,
        spec: &EmbeddingSpec,
        ids: &Self::Buffer,
        rows: &Self::Buffer,
        table: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.scatter_rows(spec, ids, rows, table)?;
        let dim = spec.dim;
        // The embedding's inverse: no FLOPs; reads the ids and the rows, writes one table
        // row per id.
        self.finish(t0, || {
            let n = self.n(ids).saturating_mul(dim);
            let bytes = self
                .bytes(ids)
                .saturating_add(bytes_of(self.dt(rows), n))
                .saturating_add(bytes_of(self.dt(table), n));
            let shape = format!("ids={} dim={dim}", self.n(ids));
            OpCall::memory("scatter_rows", self.dt(rows), shape, bytes)
        })
    }

    fn embedding_backward(
        &self,
        spec: &EmbeddingSpec,
        ids: &Self::Buffer,
        dout: &Self::Buffer,
        dtable: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.embedding_backward(spec, ids, dout, dtable)?;
        let dim = spec.dim;
        // A scatter-add: one add per element of dout; reads ids and dout, reads and writes
        // one table row per id.
        self.finish(t0, || {
            let rows = self.n(ids);
            let n = rows.saturating_mul(dim);
            let bytes = self
                .bytes(ids)
                .saturating_add(bytes_of(self.dt(dout), n))
                .saturating_add(bytes_of(self.dt(dtable), n).saturating_mul(2));
            let mut c = OpCall::elementwise("embedding_backward", self.dt(dout), n, 1, bytes);
            c.shape = format!("ids={rows} dim={dim}");
            c
        })
    }

    fn cross_entropy(
        &self,
        logits: &Self::Buffer,
        targets: &Self::Buffer,
        vocab: usize,
        losses: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.cross_entropy(logits, targets, vocab, losses)?;
        self.finish(t0, || {
            cost::cross_entropy(self.n(losses), vocab, self.dt(logits), self.dt(losses))
        })
    }

    fn cross_entropy_backward(
        &self,
        logits: &Self::Buffer,
        targets: &Self::Buffer,
        dlosses: &Self::Buffer,
        vocab: usize,
        dlogits: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner
            .cross_entropy_backward(logits, targets, dlosses, vocab, dlogits)?;
        self.finish(t0, || {
            let rows = self.n(targets);
            cost::cross_entropy_backward(rows, vocab, self.dt(logits), self.dt(dlosses))
        })
    }

    fn adamw(
        &self,
        params: &AdamWParams,
        param: &mut Self::Buffer,
        grad: &Self::Buffer,
        m: &mut Self::Buffer,
        v: &mut Self::Buffer,
        inv_scale: Option<&Self::Buffer>,
        found_inf: Option<&Self::Buffer>,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner
            .adamw(params, param, grad, m, v, inv_scale, found_inf)?;
        // Reads the gradient; reads and writes the parameter and both f32 moments.
        self.finish(t0, || {
            let n = updated(params, self.n(param));
            let bytes = bytes_of(self.dt(param), n)
                .saturating_mul(2)
                .saturating_add(bytes_of(self.dt(grad), n))
                .saturating_add(bytes_of(DType::F32, n).saturating_mul(4));
            OpCall::elementwise("adamw", self.dt(param), n, cost::ADAMW_FLOPS, bytes)
        })
    }

    fn adamw_8bit(
        &self,
        params: &AdamWParams,
        param: &mut Self::Buffer,
        grad: &Self::Buffer,
        state: &mut QuantizedMoments<'_, Self::Buffer>,
        inv_scale: Option<&Self::Buffer>,
        found_inf: Option<&Self::Buffer>,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner
            .adamw_8bit(params, param, grad, state, inv_scale, found_inf)?;
        // As `adamw`, with each moment one byte read and written instead of four (the
        // absmax per 2048 values and the 2 KiB maps are left out).
        self.finish(t0, || {
            let n = updated(params, self.n(param));
            let bytes = bytes_of(self.dt(param), n)
                .saturating_mul(2)
                .saturating_add(bytes_of(self.dt(grad), n))
                .saturating_add((n as u64).saturating_mul(4));
            OpCall::elementwise("adamw_8bit", self.dt(param), n, cost::ADAMW_FLOPS, bytes)
        })
    }

    fn adamw_master(
        &self,
        params: &AdamWParams,
        master: &mut Self::Buffer,
        param_copy: &mut Self::Buffer,
        grad: &Self::Buffer,
        m: &mut Self::Buffer,
        v: &mut Self::Buffer,
        inv_scale: Option<&Self::Buffer>,
        found_inf: Option<&Self::Buffer>,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner
            .adamw_master(params, master, param_copy, grad, m, v, inv_scale, found_inf)?;
        // As `adamw` on the f32 master, plus the rounded copy written (one more FLOP).
        self.finish(t0, || {
            let n = updated(params, self.n(master));
            let bytes = bytes_of(DType::F32, n)
                .saturating_mul(6)
                .saturating_add(bytes_of(self.dt(grad), n))
                .saturating_add(bytes_of(self.dt(param_copy), n));
            let flops = cost::ADAMW_FLOPS + 1;
            OpCall::elementwise("adamw_master", self.dt(param_copy), n, flops, bytes)
        })
    }

    fn multi_tensor_fill(&self, bufs: &mut [&mut Self::Buffer], value: f64) -> Result<()> {
        let t0 = self.now();
        self.inner.multi_tensor_fill(bufs, value)?;
        self.finish(t0, || {
            let dtype = bufs.first().map_or(DType::F32, |b| self.dt(b));
            let bytes = bufs.iter().map(|b| bytes_of(self.dt(b), self.n(b))).sum();
            let shape = list_shape(bufs.len(), bufs.iter().map(|b| self.n(b)).sum());
            OpCall::memory("multi_tensor_fill", dtype, shape, bytes)
        })
    }

    fn multi_tensor_sum_squares(&self, xs: &[&Self::Buffer], out: &mut Self::Buffer) -> Result<()> {
        let t0 = self.now();
        self.inner.multi_tensor_sum_squares(xs, out)?;
        // As `sum_squares` on each buffer.
        self.finish(t0, || {
            let n: usize = xs.iter().map(|x| self.n(x)).sum();
            let bytes: u64 = xs.iter().map(|x| bytes_of(self.dt(x), self.n(x))).sum();
            OpCall {
                kind: "multi_tensor_sum_squares",
                dtype: xs.first().map_or(DType::F32, |x| self.dt(x)),
                shape: list_shape(xs.len(), n),
                flops: (n as u64).saturating_mul(2),
                bytes: bytes.saturating_add(4),
                matmul: false,
            }
        })
    }

    fn multi_tensor_adamw(
        &self,
        params: &AdamWParams,
        tensors: &mut [AdamWTensors<'_, Self::Buffer>],
        inv_scale: Option<&Self::Buffer>,
        found_inf: Option<&Self::Buffer>,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner
            .multi_tensor_adamw(params, tensors, inv_scale, found_inf)?;
        // As `adamw` or `adamw_master` on each parameter.
        self.finish(t0, || {
            let (mut n, mut bytes) = (0usize, 0u64);
            for t in tensors.iter() {
                let k = self.n(t.param);
                // Moments read and written; with a master, it too, and the copy only
                // written; without, the parameter read and written.
                let (f32_passes, param_passes) = if t.master.is_some() { (6, 1) } else { (4, 2) };
                bytes = bytes
                    .saturating_add(bytes_of(DType::F32, k).saturating_mul(f32_passes))
                    .saturating_add(bytes_of(self.dt(t.param), k).saturating_mul(param_passes))
                    .saturating_add(bytes_of(self.dt(t.grad), k));
                n += k;
            }
            let dtype = tensors.first().map_or(DType::F32, |t| self.dt(t.param));
            OpCall {
                shape: list_shape(tensors.len(), n),
                ..OpCall::elementwise("multi_tensor_adamw", dtype, n, cost::ADAMW_FLOPS, bytes)
            }
        })
    }

    fn clip_coefficient(
        &self,
        sumsq: &Self::Buffer,
        max_norm: f64,
        norm: &mut Self::Buffer,
        coef: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner.clip_coefficient(sumsq, max_norm, norm, coef)?;
        // sqrt, add, divide, min: 4 FLOPs on three scalars.
        self.finish(t0, || {
            OpCall::elementwise("clip_coefficient", self.dt(sumsq), 1, 4, 12)
        })
    }

    fn unscale_check_finite(
        &self,
        grads: &mut Self::Buffer,
        inv_scale: &Self::Buffer,
        found_inf: &mut Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner
            .unscale_check_finite(grads, inv_scale, found_inf)?;
        // A product and a finiteness test per element; reads and writes the gradients.
        self.finish(t0, || {
            let n = self.n(grads);
            let bytes = self.bytes(grads).saturating_mul(2);
            OpCall::elementwise("unscale_check_finite", self.dt(grads), n, 2, bytes)
        })
    }

    fn update_loss_scale(
        &self,
        params: &ScaleUpdateParams,
        scale: &mut Self::Buffer,
        growth_tracker: &mut Self::Buffer,
        found_inf: &Self::Buffer,
    ) -> Result<()> {
        let t0 = self.now();
        self.inner
            .update_loss_scale(params, scale, growth_tracker, found_inf)?;
        self.finish(t0, || {
            let bytes = self
                .bytes(scale)
                .saturating_mul(2)
                .saturating_add(self.bytes(growth_tracker).saturating_mul(2))
                .saturating_add(self.bytes(found_inf));
            OpCall::elementwise("update_loss_scale", DType::F32, 1, 2, bytes)
        })
    }
}

/// The elements an AdamW call updated: its range's, or the whole parameter's.
fn updated(params: &AdamWParams, param_len: usize) -> usize {
    params.range.map_or(param_len, |r| r.len)
}

/// The shape column of a multi-tensor op: how many buffers, how many elements in all.
fn list_shape(buffers: usize, elements: usize) -> String {
    format!("tensors={buffers} n={elements}")
}
