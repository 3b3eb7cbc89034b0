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
//! Storage is [`HostData`] itself: a buffer is a `Vec` of its dtype. `read` returns a
//! future that is already complete, since CPU kernels finish before they return.
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

mod amp;
mod check;
mod elementwise;
mod gemm;
mod memory;
mod nn;
mod optim;
mod par;
mod reduce;
mod scalar;
mod strided;

#[cfg(test)]
mod tests;

pub use brrr_backend::HostData;

use brrr_backend::{
    AdamWParams, Backend, BackendInfo, BinaryOp, DType, Error, GemmSpec, LayerNormSpec, Layout,
    ReduceOp, Result, ScaleUpdateParams, SoftmaxSpec, UnaryOp,
};
use std::future::Future;

/// The CPU backend. It holds no state (rayon's global pool does the threading), so it
/// is free to create and to clone.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl CpuBackend {
    pub fn new() -> Self {
        CpuBackend
    }

    /// Threads kernels spread over: rayon's pool size (set `RAYON_NUM_THREADS` to
    /// change it), or 1 on wasm32.
    pub fn threads(&self) -> usize {
        par::threads()
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
    format!("{} CPU", std::env::consts::ARCH)
}

impl Backend for CpuBackend {
    type Buffer = HostData;

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

    fn dtype(&self, buf: &HostData) -> DType {
        buf.dtype()
    }

    fn len(&self, buf: &HostData) -> usize {
        buf.len()
    }

    fn zeros(&self, dtype: DType, len: usize) -> Result<HostData> {
        Ok(HostData::zeros(dtype, len))
    }

    fn upload(&self, data: &HostData) -> Result<HostData> {
        Ok(data.clone())
    }

    fn write(&self, buf: &mut HostData, data: &HostData) -> Result<()> {
        const OP: &str = "write";
        Error::check_dtype(OP, buf.dtype(), data.dtype())?;
        if buf.len() != data.len() {
            return Err(Error::shape(
                OP,
                format!("buffer has {} elements, data has {}", buf.len(), data.len()),
            ));
        }
        buf.clone_from(data);
        Ok(())
    }

    fn read(&self, buf: &HostData) -> impl Future<Output = Result<HostData>> {
        std::future::ready(Ok(buf.clone()))
    }

    fn synchronize(&self) -> impl Future<Output = Result<()>> {
        std::future::ready(Ok(()))
    }

    fn fill(&self, buf: &mut HostData, value: f64) -> Result<()> {
        memory::fill(buf, value)
    }

    fn copy_strided(
        &self,
        src: &HostData,
        src_layout: &Layout,
        dst: &mut HostData,
        dst_layout: &Layout,
    ) -> Result<()> {
        memory::copy_strided(src, src_layout, dst, dst_layout)
    }

    fn cast(&self, src: &HostData, dst: &mut HostData) -> Result<()> {
        memory::cast(src, dst)
    }

    fn gemm(&self, spec: &GemmSpec, a: &HostData, b: &HostData, c: &mut HostData) -> Result<()> {
        gemm::gemm(spec, a, b, c)
    }

    fn unary(&self, op: UnaryOp, x: &HostData, out: &mut HostData) -> Result<()> {
        elementwise::unary(op, x, out)
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: &HostData,
        a_layout: &Layout,
        b: &HostData,
        b_layout: &Layout,
        out: &mut HostData,
    ) -> Result<()> {
        elementwise::binary(op, a, a_layout, b, b_layout, out)
    }

    fn axpy(&self, alpha: f32, x: &HostData, y: &mut HostData) -> Result<()> {
        elementwise::axpy(alpha, x, y)
    }

    fn reduce(
        &self,
        op: ReduceOp,
        x: &HostData,
        outer: usize,
        n: usize,
        inner: usize,
        out: &mut HostData,
    ) -> Result<()> {
        reduce::reduce(op, x, outer, n, inner, out)
    }

    fn softmax(&self, spec: &SoftmaxSpec, x: &HostData, y: &mut HostData) -> Result<()> {
        nn::softmax(spec, x, y)
    }

    fn softmax_backward(
        &self,
        spec: &SoftmaxSpec,
        y: &HostData,
        dy: &HostData,
        dx: &mut HostData,
    ) -> Result<()> {
        nn::softmax_backward(spec, y, dy, dx)
    }

    fn layernorm(
        &self,
        spec: &LayerNormSpec,
        x: &HostData,
        gamma: &HostData,
        beta: &HostData,
        y: &mut HostData,
        mean: &mut HostData,
        rstd: &mut HostData,
    ) -> Result<()> {
        nn::layernorm(spec, x, gamma, beta, y, mean, rstd)
    }

    fn layernorm_backward(
        &self,
        spec: &LayerNormSpec,
        dy: &HostData,
        x: &HostData,
        gamma: &HostData,
        mean: &HostData,
        rstd: &HostData,
        dx: &mut HostData,
        dgamma: &mut HostData,
        dbeta: &mut HostData,
    ) -> Result<()> {
        nn::layernorm_backward(spec, dy, x, gamma, mean, rstd, dx, dgamma, dbeta)
    }

    fn gelu(&self, x: &HostData, y: &mut HostData) -> Result<()> {
        nn::gelu(x, y)
    }

    fn gelu_backward(&self, x: &HostData, dy: &HostData, dx: &mut HostData) -> Result<()> {
        nn::gelu_backward(x, dy, dx)
    }

    fn embedding(
        &self,
        ids: &HostData,
        table: &HostData,
        dim: usize,
        out: &mut HostData,
    ) -> Result<()> {
        nn::embedding(ids, table, dim, out)
    }

    fn embedding_backward(
        &self,
        ids: &HostData,
        dout: &HostData,
        dim: usize,
        dtable: &mut HostData,
    ) -> Result<()> {
        nn::embedding_backward(ids, dout, dim, dtable)
    }

    fn cross_entropy(
        &self,
        logits: &HostData,
        targets: &HostData,
        vocab: usize,
        losses: &mut HostData,
    ) -> Result<()> {
        nn::cross_entropy(logits, targets, vocab, losses)
    }

    fn cross_entropy_backward(
        &self,
        logits: &HostData,
        targets: &HostData,
        dlosses: &HostData,
        vocab: usize,
        dlogits: &mut HostData,
    ) -> Result<()> {
        nn::cross_entropy_backward(logits, targets, dlosses, vocab, dlogits)
    }

    fn adamw(
        &self,
        params: &AdamWParams,
        param: &mut HostData,
        grad: &HostData,
        m: &mut HostData,
        v: &mut HostData,
        inv_scale: Option<&HostData>,
        found_inf: Option<&HostData>,
    ) -> Result<()> {
        optim::adamw(params, param, grad, m, v, inv_scale, found_inf)
    }

    fn adamw_master(
        &self,
        params: &AdamWParams,
        master: &mut HostData,
        param_copy: &mut HostData,
        grad: &HostData,
        m: &mut HostData,
        v: &mut HostData,
        inv_scale: Option<&HostData>,
        found_inf: Option<&HostData>,
    ) -> Result<()> {
        optim::adamw_master(params, master, param_copy, grad, m, v, inv_scale, found_inf)
    }

    fn clip_coefficient(
        &self,
        sumsq: &HostData,
        max_norm: f64,
        norm: &mut HostData,
        coef: &mut HostData,
    ) -> Result<()> {
        optim::clip_coefficient(sumsq, max_norm, norm, coef)
    }

    fn unscale_check_finite(
        &self,
        grads: &mut HostData,
        inv_scale: &HostData,
        found_inf: &mut HostData,
    ) -> Result<()> {
        amp::unscale_check_finite(grads, inv_scale, found_inf)
    }

    fn update_loss_scale(
        &self,
        params: &ScaleUpdateParams,
        scale: &mut HostData,
        growth_tracker: &mut HostData,
        found_inf: &HostData,
    ) -> Result<()> {
        amp::update_loss_scale(params, scale, growth_tracker, found_inf)
    }
}
