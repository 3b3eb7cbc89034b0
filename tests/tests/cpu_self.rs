//! The harness, tested: the suite on brrr-cpu against itself must pass in every dtype
//! (every case is well-formed and runs), and a deliberately broken backend must fail,
//! case by case, exactly where it is broken (so the suite is proven able to fail).
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::{
    AdamWParams, Backend, BackendInfo, BinaryOp, DType, EmbeddingSpec, GemmSpec, HostData,
    LayerNormSpec, Layout, QuantizedMoments, ReduceOp, Result, ScaleUpdateParams, SoftmaxSpec,
    UnaryOp,
};
use brrr_conformance::{
    CpuBackend, OPS, Outcome, SuiteOptions, assert_all_passed, report, run_suite, summarize,
};
use brrr_cpu::CpuBuffer;
use std::future::Future;

#[test]
fn cpu_against_itself_passes_in_every_dtype() {
    let cpu = CpuBackend::new();
    let results = run_suite(
        &cpu,
        &cpu,
        &SuiteOptions::all(&[DType::F32, DType::F16, DType::BF16, DType::F64]),
    );
    eprintln!("{}", report(&results));
    assert_all_passed("cpu", &results);
    // Every op of the suite has at least one case.
    for op in OPS {
        assert!(
            results.iter().any(|r| r.op == *op && r.passed()),
            "no case for {op}"
        );
    }
}

/// brrr-cpu with one op broken on purpose.
#[derive(Clone, Copy, Debug)]
enum Flaw {
    /// GEMM: the first element of C is off by 1%.
    GemmOffByOnePercent,
    /// Softmax: never writes its output (it stays poisoned).
    SoftmaxWritesNothing,
    /// GELU: every output 0.1% too large (fails f32, within bf16's tolerance).
    GeluSlightlyOff,
    /// Cast: the lowest bit of the first element flipped.
    CastFlipsABit,
    /// LayerNorm: forgets to write `rstd`.
    LayerNormForgetsRstd,
    /// AdamW: an `Err` where it should have worked.
    AdamWErrors,
}

#[derive(Clone, Debug)]
struct Broken {
    cpu: CpuBackend,
    flaw: Flaw,
}

fn nudge(buf: &mut HostData, f: impl Fn(f64) -> f64, first_only: bool) {
    let mut v = buf.to_f64();
    let n = if first_only { v.len().min(1) } else { v.len() };
    for x in &mut v[..n] {
        *x = f(*x);
    }
    *buf = HostData::from_f64(buf.dtype(), &v);
}

impl Backend for Broken {
    type Buffer = CpuBuffer;
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "broken",
            ..self.cpu.info()
        }
    }
    fn supports(&self, dtype: DType) -> bool {
        self.cpu.supports(dtype)
    }
    fn dtype(&self, buf: &CpuBuffer) -> DType {
        buf.dtype()
    }
    fn len(&self, buf: &CpuBuffer) -> usize {
        buf.len()
    }
    fn zeros(&self, dtype: DType, len: usize) -> Result<CpuBuffer> {
        self.cpu.zeros(dtype, len)
    }
    fn upload(&self, data: &HostData) -> Result<CpuBuffer> {
        self.cpu.upload(data)
    }
    fn write(&self, buf: &mut CpuBuffer, data: &HostData) -> Result<()> {
        self.cpu.write(buf, data)
    }
    fn read(&self, buf: &CpuBuffer) -> impl Future<Output = Result<HostData>> {
        self.cpu.read(buf)
    }
    fn synchronize(&self) -> impl Future<Output = Result<()>> {
        self.cpu.synchronize()
    }
    fn fill(&self, buf: &mut CpuBuffer, value: f64) -> Result<()> {
        self.cpu.fill(buf, value)
    }
    fn copy_strided(
        &self,
        s: &CpuBuffer,
        sl: &Layout,
        d: &mut CpuBuffer,
        dl: &Layout,
    ) -> Result<()> {
        self.cpu.copy_strided(s, sl, d, dl)
    }
    fn cast(&self, src: &CpuBuffer, dst: &mut CpuBuffer) -> Result<()> {
        self.cpu.cast(src, dst)?;
        if let Flaw::CastFlipsABit = self.flaw {
            match &mut **dst {
                HostData::F32(v) => v[0] = f32::from_bits(v[0].to_bits() ^ 1),
                HostData::F16(v) => v[0] = half::f16::from_bits(v[0].to_bits() ^ 1),
                HostData::BF16(v) => v[0] = half::bf16::from_bits(v[0].to_bits() ^ 1),
                HostData::F64(v) => v[0] = f64::from_bits(v[0].to_bits() ^ 1),
                HostData::I32(v) => v[0] ^= 1,
                HostData::U32(v) => v[0] ^= 1,
            }
        }
        Ok(())
    }
    fn gemm(&self, spec: &GemmSpec, a: &CpuBuffer, b: &CpuBuffer, c: &mut CpuBuffer) -> Result<()> {
        self.cpu.gemm(spec, a, b, c)?;
        if let Flaw::GemmOffByOnePercent = self.flaw {
            nudge(c, |x| x + 0.01 * (1.0 + x.abs()), true);
        }
        Ok(())
    }
    fn unary(&self, op: UnaryOp, x: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        self.cpu.unary(op, x, out)
    }
    fn binary(
        &self,
        op: BinaryOp,
        a: &CpuBuffer,
        al: &Layout,
        b: &CpuBuffer,
        bl: &Layout,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.binary(op, a, al, b, bl, out)
    }
    fn axpy(&self, alpha: f32, x: &CpuBuffer, y: &mut CpuBuffer, at: Option<usize>) -> Result<()> {
        self.cpu.axpy(alpha, x, y, at)
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
        self.cpu.reduce(op, x, outer, n, inner, out)
    }
    fn softmax(&self, spec: &SoftmaxSpec, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        if let Flaw::SoftmaxWritesNothing = self.flaw {
            return Ok(());
        }
        self.cpu.softmax(spec, x, y)
    }
    fn softmax_segmented(
        &self,
        spec: &SoftmaxSpec,
        mask: &brrr_backend::SegmentMask,
        segments: &CpuBuffer,
        x: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.softmax_segmented(spec, mask, segments, x, y)
    }
    fn softmax_backward(
        &self,
        spec: &SoftmaxSpec,
        y: &CpuBuffer,
        dy: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.softmax_backward(spec, y, dy, dx)
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
        if let Flaw::LayerNormForgetsRstd = self.flaw {
            let mut scratch = rstd.clone();
            return self
                .cpu
                .layernorm(spec, x, gamma, beta, y, mean, &mut scratch);
        }
        self.cpu.layernorm(spec, x, gamma, beta, y, mean, rstd)
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
        self.cpu
            .layernorm_backward(spec, dy, x, gamma, mean, rstd, dx, dgamma, dbeta)
    }
    fn gelu(&self, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        self.cpu.gelu(x, y)?;
        if let Flaw::GeluSlightlyOff = self.flaw {
            nudge(y, |v| v * 1.001, false);
        }
        Ok(())
    }
    fn gelu_backward(&self, x: &CpuBuffer, dy: &CpuBuffer, dx: &mut CpuBuffer) -> Result<()> {
        self.cpu.gelu_backward(x, dy, dx)
    }
    fn embedding(
        &self,
        spec: &EmbeddingSpec,
        ids: &CpuBuffer,
        t: &CpuBuffer,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.embedding(spec, ids, t, out)
    }
    fn scatter_rows(
        &self,
        spec: &EmbeddingSpec,
        ids: &CpuBuffer,
        rows: &CpuBuffer,
        table: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.scatter_rows(spec, ids, rows, table)
    }
    fn embedding_backward(
        &self,
        spec: &EmbeddingSpec,
        ids: &CpuBuffer,
        dout: &CpuBuffer,
        dtable: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.embedding_backward(spec, ids, dout, dtable)
    }
    fn cross_entropy(
        &self,
        l: &CpuBuffer,
        t: &CpuBuffer,
        v: usize,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.cross_entropy(l, t, v, out)
    }
    fn cross_entropy_backward(
        &self,
        l: &CpuBuffer,
        t: &CpuBuffer,
        dl: &CpuBuffer,
        v: usize,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.cross_entropy_backward(l, t, dl, v, out)
    }
    fn adamw(
        &self,
        p: &AdamWParams,
        param: &mut CpuBuffer,
        grad: &CpuBuffer,
        m: &mut CpuBuffer,
        v: &mut CpuBuffer,
        inv_scale: Option<&CpuBuffer>,
        found_inf: Option<&CpuBuffer>,
    ) -> Result<()> {
        if let Flaw::AdamWErrors = self.flaw {
            return Err(brrr_backend::Error::invalid("adamw", "broken on purpose"));
        }
        self.cpu.adamw(p, param, grad, m, v, inv_scale, found_inf)
    }
    fn adamw_master(
        &self,
        p: &AdamWParams,
        master: &mut CpuBuffer,
        copy: &mut CpuBuffer,
        grad: &CpuBuffer,
        m: &mut CpuBuffer,
        v: &mut CpuBuffer,
        inv_scale: Option<&CpuBuffer>,
        found_inf: Option<&CpuBuffer>,
    ) -> Result<()> {
        self.cpu
            .adamw_master(p, master, copy, grad, m, v, inv_scale, found_inf)
    }
    fn adamw_8bit(
        &self,
        p: &AdamWParams,
        param: &mut CpuBuffer,
        grad: &CpuBuffer,
        state: &mut QuantizedMoments<'_, CpuBuffer>,
        inv_scale: Option<&CpuBuffer>,
        found_inf: Option<&CpuBuffer>,
    ) -> Result<()> {
        self.cpu
            .adamw_8bit(p, param, grad, state, inv_scale, found_inf)
    }
    fn clip_coefficient(
        &self,
        sumsq: &CpuBuffer,
        max_norm: f64,
        norm: &mut CpuBuffer,
        coef: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.clip_coefficient(sumsq, max_norm, norm, coef)
    }
    fn unscale_check_finite(
        &self,
        grads: &mut CpuBuffer,
        inv_scale: &CpuBuffer,
        found_inf: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.unscale_check_finite(grads, inv_scale, found_inf)
    }
    fn update_loss_scale(
        &self,
        p: &ScaleUpdateParams,
        scale: &mut CpuBuffer,
        tracker: &mut CpuBuffer,
        found_inf: &CpuBuffer,
    ) -> Result<()> {
        self.cpu.update_loss_scale(p, scale, tracker, found_inf)
    }
}

/// Runs the suite on `flaw` and checks: every case of the ops in `broken` fails, every
/// case of every other op passes (none is skipped).
fn check_flaw(flaw: Flaw, dtype: DType, broken: &[&str]) {
    let cpu = CpuBackend::new();
    let b = Broken {
        cpu: cpu.clone(),
        flaw,
    };
    let results = run_suite(&b, &cpu, &SuiteOptions::all(&[dtype]));
    for r in &results {
        // Integer cases (casts to and from i32/u32) run along with the first dtype.
        let should_fail = broken.contains(&r.op) && (r.dtype == dtype || !r.dtype.is_float());
        match (&r.outcome, should_fail) {
            (Outcome::Fail(_), true) | (Outcome::Pass { .. }, false) => {}
            _ => panic!(
                "{flaw:?}: unexpected outcome for\n{r}\n\n{}",
                report(&results)
            ),
        }
    }
    let s = summarize(&results);
    assert_eq!(s.failed > 0, !broken.is_empty(), "{flaw:?}: {s:?}");
    assert!(s.passed > 0, "{flaw:?}: nothing passed");
}

#[test]
fn a_gemm_off_by_one_percent_fails() {
    check_flaw(
        Flaw::GemmOffByOnePercent,
        DType::F32,
        &["gemm", "attention", "attention_backward"],
    );
}

#[test]
fn an_unwritten_output_fails_through_its_nan_poison() {
    check_flaw(
        Flaw::SoftmaxWritesNothing,
        DType::F32,
        &["softmax", "attention", "attention_backward"],
    );
    check_flaw(Flaw::LayerNormForgetsRstd, DType::BF16, &["layernorm"]);
}

#[test]
fn a_small_error_fails_in_f32_but_not_in_bf16() {
    check_flaw(Flaw::GeluSlightlyOff, DType::F32, &["gelu"]);
    check_flaw(Flaw::GeluSlightlyOff, DType::BF16, &[]);
}

#[test]
fn one_flipped_bit_fails_an_exact_op() {
    check_flaw(Flaw::CastFlipsABit, DType::F16, &["cast"]);
}

#[test]
fn an_error_fails() {
    // The list's AdamW is the one-buffer op on each (the trait's default): it fails too.
    check_flaw(
        Flaw::AdamWErrors,
        DType::F32,
        &["adamw", "multi_tensor_adamw"],
    );
}
