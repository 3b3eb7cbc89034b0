//! # brrr-cpu
//!
//! The reference backend: every kernel of [`brrr_backend::Backend`] in plain Rust, in
//! f16, bf16, f32 and f64, checked against naive f64 loops in its tests. Other
//! backends are tested against it, and it is what most readers train on, so it is also
//! fast:
//!
//! - GEMM goes through the `gemm` crate with its
//!   AVX-512 kernels enabled (measurements in `src/gemm.rs`); transposes are strides,
//!   never copies.
//! - Row-wise kernels (softmax, LayerNorm, cross-entropy) and element-wise ones run on
//!   rayon's thread pool above a size threshold, with task boundaries that depend only
//!   on the problem size, so results are bit-identical for any thread count.
//! - Inner loops are compiled for the CPU's widest SIMD (AVX-512, AVX2) through
//!   `pulp`'s run-time dispatch, and `exp` is a vectorisable polynomial.
//! - On `wasm32` everything runs on the calling thread (the browser build has no
//!   thread pool) and the same code is used otherwise.
//!
//! f16 and bf16 buffers are stored as such and computed in f32, rounded once per
//! result; f64 is computed in f64 (it is the dtype of gradient checks).
//!
//! Storage is a [`CpuBuffer`]: a [`HostData`] (a `Vec` of its dtype) that counts its
//! bytes against the device that made it ([`Backend::memory_stats`]). `read` returns a
//! future that is already complete, since CPU kernels finish before they return.
//!
//! One process can hold several CPU "devices" ([`CpuBackend::device`]), each with its
//! own thread pool, to stand in for several GPUs.
//!
//! ```
//! use brrr_backend::{Backend, GemmSpec, HostData, block_on};
//! use brrr_cpu::CpuBackend;
//!
//! let cpu = CpuBackend::new();
//! let a = cpu.upload(&HostData::F32(vec![1.0, 2.0, 3.0, 4.0])).unwrap(); // 2×2
//! let b = cpu.upload(&HostData::F32(vec![1.0, 0.0, 0.0, 1.0])).unwrap(); // identity
//! let mut c = cpu.zeros(brrr_backend::DType::F32, 4).unwrap();
//! cpu.gemm(&GemmSpec::new(2, 2, 2), &a, &b, &mut c).unwrap();
//! assert_eq!(block_on(cpu.read(&c)).unwrap(), HostData::F32(vec![1.0, 2.0, 3.0, 4.0]));
//! ```
#![warn(missing_docs)]

mod amp;
mod buffer;
mod cache;
mod check;
mod elementwise;
mod gemm;
mod memory;
mod nn;
mod optim;
mod optim8;
mod par;
mod reduce;
mod scalar;
mod sgemm;
mod strided;

#[cfg(test)]
mod tests;

pub use brrr_backend::HostData;
/// Query rows per task of the fused attention ([`brrr_backend::Backend::attention`]): a
/// block of this many rows of one sequence keeps its scores in a `rows × T` scratch
/// instead of a `[T, T]` matrix per head.
pub const ATTENTION_QUERY_ROWS: usize = nn::attention::ROWS;
pub use buffer::CpuBuffer;
pub use cache::DEFAULT_CACHE_LIMIT;

use brrr_backend::{
    AdamWParams, AttentionSpec, Backend, BackendInfo, BinaryOp, DType, DeviceLocation,
    EmbeddingSpec, Error, GemmSpec, LayerNormSpec, Layout, MemoryCounter, MemoryStats,
    QuantizedMoments, ReduceOp, Result, ScaleUpdateParams, SegmentMask, SoftmaxSpec, UnaryOp,
};
use std::future::Future;
use std::sync::Arc;

/// The CPU backend: a handle on one (possibly simulated) CPU device. Cheap to clone;
/// clones share the device's thread pool and memory counters.
///
/// [`CpuBackend::new`] is device `cpu:0` on rayon's global pool. [`CpuBackend::device`]
/// makes further devices, each with its own pool of threads, so that N CPU "devices"
/// can train side by side in one process (as N GPUs would), each on its own cores.
/// Results are bit-identical whatever the number of threads (see `par.rs`).
#[derive(Clone, Debug)]
pub struct CpuBackend {
    inner: Arc<CpuDevice>,
    gemm: GemmKernel,
}

/// Which kernel computes f32 products (and the f16/bf16 ones, which run in f32).
///
/// Both are bit-identical across thread counts; they differ from each other in the last
/// bits (another order of summation). The default is chosen at run time
/// ([`GemmKernel::for_this_cpu`]): brrr's own kernel on x86-64 CPUs with AVX2 and FMA but
/// not AVX-512, where it measured 1.0–1.6× the `gemm` crate's speed (`src/sgemm.rs`
/// has the table), and the `gemm` crate elsewhere, whose AVX-512 and NEON kernels brrr
/// does not have. [`CpuBackend::with_gemm_kernel`] picks one by hand, to compare them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmKernel {
    /// brrr's own register-tiled kernel (`sgemm.rs`): x86-64 with AVX2 and FMA only.
    Own,
    /// The [`gemm`](https://crates.io/crates/gemm) crate's kernels, on every CPU.
    GemmCrate,
}

impl GemmKernel {
    /// Whether this CPU can run [`GemmKernel::Own`] (x86-64 with AVX2 and FMA).
    pub fn own_available() -> bool {
        sgemm::available()
    }

    /// The kernel's name in tables: `brrr sgemm` or `gemm crate`.
    pub fn name(self) -> &'static str {
        match self {
            GemmKernel::Own => "brrr sgemm",
            GemmKernel::GemmCrate => "gemm crate",
        }
    }

    /// The faster kernel on this CPU: [`GemmKernel::Own`] where AVX2 and FMA are the
    /// widest vectors, [`GemmKernel::GemmCrate`] with AVX-512 (its 16-lane kernels
    /// measured 460 GFLOP/s on two cores where 8 lanes cannot pass half of that) and on
    /// CPUs other than x86-64.
    pub fn for_this_cpu() -> GemmKernel {
        #[cfg(target_arch = "x86_64")]
        if sgemm::available() && !is_x86_feature_detected!("avx512f") {
            return GemmKernel::Own;
        }
        GemmKernel::GemmCrate
    }
}

impl Default for GemmKernel {
    /// [`GemmKernel::for_this_cpu`].
    fn default() -> Self {
        GemmKernel::for_this_cpu()
    }
}

#[derive(Debug)]
struct CpuDevice {
    ordinal: usize,
    /// `None`: rayon's global pool (and no cost beyond it).
    #[cfg(not(target_arch = "wasm32"))]
    pool: Option<rayon::ThreadPool>,
    memory: Arc<MemoryCounter>,
    /// Freed buffers kept for `alloc` (see `cache.rs`).
    cache: Arc<cache::BufferCache>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    /// Device `cpu:0` on rayon's global pool (`RAYON_NUM_THREADS` sets its size).
    pub fn new() -> Self {
        CpuBackend {
            inner: Arc::new(CpuDevice {
                ordinal: 0,
                #[cfg(not(target_arch = "wasm32"))]
                pool: None,
                memory: Arc::new(MemoryCounter::new()),
                cache: Arc::new(cache::BufferCache::new(DEFAULT_CACHE_LIMIT)),
            }),
            gemm: GemmKernel::default(),
        }
    }

    /// Device `cpu:0` with its own pool of `threads` threads (at least 1). On wasm32
    /// every kernel runs on the calling thread whatever `threads` says.
    pub fn with_threads(threads: usize) -> Result<Self> {
        Self::device(0, threads)
    }

    /// Simulated device `cpu:ORDINAL` with its own pool of `threads` threads (at least
    /// 1; one on wasm32). Every kernel of this instance and its clones runs on that pool.
    pub fn device(ordinal: usize, threads: usize) -> Result<Self> {
        #[cfg(not(target_arch = "wasm32"))]
        let pool = {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads.max(1))
                .thread_name(move |i| format!("brrr-cpu{ordinal}-{i}"))
                .build()
                .map_err(|e| {
                    Error::invalid(
                        "CpuBackend::device",
                        format!("cannot start {threads} threads for cpu:{ordinal}: {e}"),
                    )
                })?;
            Some(pool)
        };
        #[cfg(target_arch = "wasm32")]
        let _ = threads;
        Ok(CpuBackend {
            inner: Arc::new(CpuDevice {
                ordinal,
                #[cfg(not(target_arch = "wasm32"))]
                pool,
                memory: Arc::new(MemoryCounter::new()),
                cache: Arc::new(cache::BufferCache::new(DEFAULT_CACHE_LIMIT)),
            }),
            gemm: GemmKernel::default(),
        })
    }

    /// This handle with another GEMM kernel (for comparing them; the default is
    /// [`GemmKernel::for_this_cpu`]). Asking for [`GemmKernel::Own`] on a CPU
    /// without AVX2 and FMA is an error.
    pub fn with_gemm_kernel(mut self, kernel: GemmKernel) -> Result<Self> {
        if kernel == GemmKernel::Own && !sgemm::available() {
            return Err(Error::invalid(
                "CpuBackend::with_gemm_kernel",
                "brrr's own GEMM kernel needs an x86-64 CPU with AVX2 and FMA",
            ));
        }
        self.gemm = kernel;
        Ok(self)
    }

    /// The kernel f32 products run on.
    pub fn gemm_kernel(&self) -> GemmKernel {
        self.gemm
    }

    /// Threads kernels spread over: this device's pool size, rayon's global pool size
    /// for [`CpuBackend::new`] (set `RAYON_NUM_THREADS` to change it), or 1 on wasm32.
    pub fn threads(&self) -> usize {
        self.install(par::threads)
    }

    /// Runs `f` on this device's thread pool (rayon's global one for `new()`), so that
    /// the kernel's parallel loops and GEMM's threads use the device's cores.
    #[inline]
    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(pool) = &self.inner.pool {
            return pool.install(f);
        }
        f()
    }

    /// A buffer holding `data`, counted against this device.
    fn buffer(&self, data: HostData) -> CpuBuffer {
        CpuBuffer::new(data, &self.inner.memory, &self.inner.cache)
    }

    /// Bytes of freed buffers this device keeps for reuse by `alloc` (not counted in
    /// [`Backend::memory_stats`], which counts live buffers only).
    pub fn cached_bytes(&self) -> u64 {
        self.inner.cache.cached_bytes()
    }

    /// Returns every cached buffer to the system allocator and caps the cache at
    /// `limit` bytes from now on (0 turns it off; the default is
    /// [`DEFAULT_CACHE_LIMIT`]). Like PyTorch's `torch.cuda.empty_cache()`.
    pub fn empty_cache(&self, limit: u64) {
        self.inner.cache.reset(limit)
    }
}

/// The CPU's model name where the OS tells it (Linux), else its architecture.
fn cpu_name() -> String {
    #[cfg(target_os = "linux")]
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
        let model = info
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1));
        if let Some(m) = model {
            return m.trim().to_string();
        }
    }
    // In a browser: which of the two builds this is (wasm's 128-bit SIMD or not).
    if cfg!(target_arch = "wasm32") {
        let simd = if cfg!(target_feature = "simd128") {
            "with SIMD (simd128)"
        } else {
            "without SIMD"
        };
        return format!("wasm32 CPU {simd}");
    }
    format!("{} CPU", std::env::consts::ARCH)
}

impl Backend for CpuBackend {
    type Buffer = CpuBuffer;

    fn info(&self) -> BackendInfo {
        let t = self.threads();
        BackendInfo {
            name: "cpu",
            device: format!(
                "{} ({t} thread{})",
                cpu_name(),
                if t == 1 { "" } else { "s" }
            ),
            dtypes: DType::FLOATS.to_vec(),
        }
    }

    fn supports(&self, dtype: DType) -> bool {
        dtype.is_float()
    }

    fn dtype(&self, buf: &CpuBuffer) -> DType {
        buf.dtype()
    }

    fn len(&self, buf: &CpuBuffer) -> usize {
        buf.len()
    }

    fn location(&self) -> DeviceLocation {
        DeviceLocation::new("cpu", self.inner.ordinal)
    }

    /// A plain copy, counted against `dst`.
    fn copy_to_device(
        &self,
        src: &CpuBuffer,
        dst: &Self,
    ) -> impl Future<Output = Result<CpuBuffer>> {
        std::future::ready(Ok(dst.buffer(HostData::clone(src))))
    }

    fn zeros(&self, dtype: DType, len: usize) -> Result<CpuBuffer> {
        Ok(self.buffer(HostData::zeros(dtype, len)))
    }

    /// A buffer freed earlier on this device, of this dtype and length, if one is
    /// cached (its contents are whatever was last written); else a fresh zeroed one.
    fn alloc(&self, dtype: DType, len: usize) -> Result<CpuBuffer> {
        match self.inner.cache.take(dtype, len) {
            Some(data) => Ok(self.buffer(data)),
            None => self.zeros(dtype, len),
        }
    }

    fn upload(&self, data: &HostData) -> Result<CpuBuffer> {
        Ok(self.buffer(data.clone()))
    }

    fn memory_stats(&self) -> MemoryStats {
        self.inner.memory.stats()
    }

    fn reset_peak_memory(&self) {
        self.inner.memory.reset_peak();
    }

    fn write(&self, buf: &mut CpuBuffer, data: &HostData) -> Result<()> {
        const OP: &str = "write";
        Error::check_dtype(OP, buf.dtype(), data.dtype())?;
        if buf.len() != data.len() {
            return Err(Error::shape(
                OP,
                format!("buffer has {} elements, data has {}", buf.len(), data.len()),
            ));
        }
        HostData::clone_from(buf, data);
        Ok(())
    }

    fn read(&self, buf: &CpuBuffer) -> impl Future<Output = Result<HostData>> {
        std::future::ready(Ok(HostData::clone(buf)))
    }

    fn synchronize(&self) -> impl Future<Output = Result<()>> {
        std::future::ready(Ok(()))
    }

    fn fill(&self, buf: &mut CpuBuffer, value: f64) -> Result<()> {
        self.install(|| memory::fill(buf, value))
    }

    fn copy_strided(
        &self,
        src: &CpuBuffer,
        src_layout: &Layout,
        dst: &mut CpuBuffer,
        dst_layout: &Layout,
    ) -> Result<()> {
        self.install(|| memory::copy_strided(src, src_layout, dst, dst_layout))
    }

    fn cast(&self, src: &CpuBuffer, dst: &mut CpuBuffer) -> Result<()> {
        self.install(|| memory::cast(src, dst))
    }

    fn gemm(&self, spec: &GemmSpec, a: &CpuBuffer, b: &CpuBuffer, c: &mut CpuBuffer) -> Result<()> {
        self.install(|| gemm::gemm(spec, a, b, c, self.gemm))
    }

    fn unary(&self, op: UnaryOp, x: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        self.install(|| elementwise::unary(op, x, out))
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: &CpuBuffer,
        a_layout: &Layout,
        b: &CpuBuffer,
        b_layout: &Layout,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| elementwise::binary(op, a, a_layout, b, b_layout, out))
    }

    fn axpy(
        &self,
        alpha: f32,
        x: &CpuBuffer,
        y: &mut CpuBuffer,
        y_offset: Option<usize>,
    ) -> Result<()> {
        self.install(|| elementwise::axpy(alpha, x, y, y_offset))
    }

    fn reduce(
        &self,
        op: ReduceOp,
        x: &CpuBuffer,
        outer: usize,
        n: usize,
        inner: usize,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| reduce::reduce(op, x, outer, n, inner, out))
    }

    fn has_fused_sum_squares(&self) -> bool {
        true
    }

    fn sum_squares(
        &self,
        x: &CpuBuffer,
        offset: usize,
        len: usize,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| reduce::sum_squares(x, offset, len, out))
    }

    fn softmax(&self, spec: &SoftmaxSpec, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        self.install(|| nn::softmax(spec, x, y))
    }

    fn softmax_segmented(
        &self,
        spec: &SoftmaxSpec,
        mask: &SegmentMask,
        segments: &CpuBuffer,
        x: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::softmax_segmented(spec, mask, segments, x, y))
    }

    /// f32 only on the CPU (other dtypes get an error naming the op).
    fn has_fused_attention(&self) -> bool {
        true
    }

    fn attention(
        &self,
        spec: &AttentionSpec,
        qkv: &CpuBuffer,
        y: &mut CpuBuffer,
        lse: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::attention(spec, qkv, y, lse))
    }

    fn attention_backward(
        &self,
        spec: &AttentionSpec,
        qkv: &CpuBuffer,
        y: &CpuBuffer,
        lse: &CpuBuffer,
        dy: &CpuBuffer,
        dqkv: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::attention_backward(spec, qkv, y, lse, dy, dqkv))
    }

    fn softmax_backward(
        &self,
        spec: &SoftmaxSpec,
        y: &CpuBuffer,
        dy: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::softmax_backward(spec, y, dy, dx))
    }

    fn layernorm(
        &self,
        spec: &LayerNormSpec,
        x: &CpuBuffer,
        gamma: &CpuBuffer,
        beta: &CpuBuffer,
        y: &mut CpuBuffer,
        mean: &mut CpuBuffer,
        rstd: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::layernorm(spec, x, gamma, beta, y, mean, rstd))
    }

    fn layernorm_backward(
        &self,
        spec: &LayerNormSpec,
        dy: &CpuBuffer,
        x: &CpuBuffer,
        gamma: &CpuBuffer,
        mean: &CpuBuffer,
        rstd: &CpuBuffer,
        dx: &mut CpuBuffer,
        dgamma: &mut CpuBuffer,
        dbeta: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::layernorm_backward(spec, dy, x, gamma, mean, rstd, dx, dgamma, dbeta))
    }

    fn gelu(&self, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        self.install(|| nn::gelu(x, y))
    }

    fn gelu_backward(&self, x: &CpuBuffer, dy: &CpuBuffer, dx: &mut CpuBuffer) -> Result<()> {
        self.install(|| nn::gelu_backward(x, dy, dx))
    }

    fn embedding(
        &self,
        spec: &EmbeddingSpec,
        ids: &CpuBuffer,
        table: &CpuBuffer,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::embedding(spec, ids, table, out))
    }

    fn scatter_rows(
        &self,
        spec: &EmbeddingSpec,
        ids: &CpuBuffer,
        rows: &CpuBuffer,
        table: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::scatter_rows(spec, ids, rows, table))
    }

    fn embedding_backward(
        &self,
        spec: &EmbeddingSpec,
        ids: &CpuBuffer,
        dout: &CpuBuffer,
        dtable: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::embedding_backward(spec, ids, dout, dtable))
    }

    fn cross_entropy(
        &self,
        logits: &CpuBuffer,
        targets: &CpuBuffer,
        vocab: usize,
        losses: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::cross_entropy(logits, targets, vocab, losses))
    }

    fn cross_entropy_backward(
        &self,
        logits: &CpuBuffer,
        targets: &CpuBuffer,
        dlosses: &CpuBuffer,
        vocab: usize,
        dlogits: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| nn::cross_entropy_backward(logits, targets, dlosses, vocab, dlogits))
    }

    fn adamw(
        &self,
        params: &AdamWParams,
        param: &mut CpuBuffer,
        grad: &CpuBuffer,
        m: &mut CpuBuffer,
        v: &mut CpuBuffer,
        inv_scale: Option<&CpuBuffer>,
        found_inf: Option<&CpuBuffer>,
    ) -> Result<()> {
        self.install(|| {
            optim::adamw(
                params,
                param,
                grad,
                m,
                v,
                inv_scale.map(|b| &**b),
                found_inf.map(|b| &**b),
            )
        })
    }

    fn adamw_8bit(
        &self,
        params: &AdamWParams,
        param: &mut CpuBuffer,
        grad: &CpuBuffer,
        state: &mut QuantizedMoments<'_, CpuBuffer>,
        inv_scale: Option<&CpuBuffer>,
        found_inf: Option<&CpuBuffer>,
    ) -> Result<()> {
        let states = optim8::States {
            codes: state.codes,
            absmax: state.absmax,
            maps: state.maps,
        };
        self.install(|| {
            optim8::adamw_8bit(
                params,
                param,
                grad,
                states,
                inv_scale.map(|b| &**b),
                found_inf.map(|b| &**b),
            )
        })
    }

    fn adamw_master(
        &self,
        params: &AdamWParams,
        master: &mut CpuBuffer,
        param_copy: &mut CpuBuffer,
        grad: &CpuBuffer,
        m: &mut CpuBuffer,
        v: &mut CpuBuffer,
        inv_scale: Option<&CpuBuffer>,
        found_inf: Option<&CpuBuffer>,
    ) -> Result<()> {
        self.install(|| {
            optim::adamw_master(
                params,
                master,
                param_copy,
                grad,
                m,
                v,
                inv_scale.map(|b| &**b),
                found_inf.map(|b| &**b),
            )
        })
    }

    fn clip_coefficient(
        &self,
        sumsq: &CpuBuffer,
        max_norm: f64,
        norm: &mut CpuBuffer,
        coef: &mut CpuBuffer,
    ) -> Result<()> {
        optim::clip_coefficient(sumsq, max_norm, norm, coef)
    }

    fn unscale_check_finite(
        &self,
        grads: &mut CpuBuffer,
        inv_scale: &CpuBuffer,
        found_inf: &mut CpuBuffer,
    ) -> Result<()> {
        self.install(|| amp::unscale_check_finite(grads, inv_scale, found_inf))
    }

    fn update_loss_scale(
        &self,
        params: &ScaleUpdateParams,
        scale: &mut CpuBuffer,
        growth_tracker: &mut CpuBuffer,
        found_inf: &CpuBuffer,
    ) -> Result<()> {
        self.install(|| amp::update_loss_scale(params, scale, growth_tracker, found_inf))
    }
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
