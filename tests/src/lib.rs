//! # brrr-conformance
//!
//! Every [`Backend`] op on a backend under test, against a reference backend (brrr-cpu),
//! on fresh random inputs.
//!
//! - **Inputs** come from a ChaCha8 stream seeded per case (op, shape, dtype and the
//!   suite's seed), so each case gets its own data and a failure is reproducible from its
//!   name alone; `BRRR_SUITE_SEED=N` draws a different set of inputs everywhere.
//!   Inputs are never all zeros; ops with restricted domains (log, sqrt, ...) get inputs
//!   inside them.
//! - **Shapes** include 1s, primes and sizes just past tile boundaries (17, 33, 65, 129),
//!   transposes, broadcasts, batches and offsets.
//! - **Outputs are poisoned** with NaN (integers: `0x7EAD_BEEF`) before each run on
//!   both backends; an element the backend forgot to write stays NaN and fails.
//!   Accumulating outputs (`beta` GEMM, `axpy`, gradients that are added to) start from
//!   random data instead, the same on both.
//! - **Comparison**: `|got - want| <= tol * (|want| + max|want|)` per element, with
//!   `tol` from the dtype ([`tolerance`]) times a per-op factor for long reductions.
//!   NaN never passes, not even against NaN; an infinity passes only against the same
//!   infinity. Integers must match exactly.
//! - A dtype the backend does not [`support`](Backend::supports) is reported as
//!   skipped, never as passed; a backend that cannot be created is reported by
//!   [`backend_absent`].
//!
//! ## Adding a backend
//!
//! A test file per backend (see `tests/wgpu.rs`): create the backend, or call
//! [`backend_absent`] and return; run [`run_suite`] against [`CpuBackend`]; then
//! [`assert_all_passed`]. For CUDA:
//!
//! ```ignore
//! let gpu = match brrr_cuda::CudaBackend::new(0) {
//!     Ok(g) => g,
//!     Err(e) => return brrr_conformance::backend_absent("cuda", &e.to_string(), "BRRR_REQUIRE_CUDA"),
//! };
//! let results = brrr_conformance::run_suite(&gpu, &CpuBackend::new(), &SuiteOptions::all(&[DType::F32, DType::F16, DType::BF16]));
//! brrr_conformance::assert_all_passed("cuda", &results);
//! ```

mod cases;
mod compare;
mod hostile;
mod mixed;
mod multi;

pub use brrr_cpu::CpuBackend;
pub use cases::{CORE_OPS, OPS};
pub use compare::{Tol, compare, tolerance};

use brrr_backend::{Backend, DType, HostData};
use std::fmt;

/// What happened to one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every element within tolerance; `worst` is the largest error as a fraction of
    /// what was allowed (so always <= 1).
    Pass {
        worst: f64,
    },
    Fail(String),
    /// Not run, and why (a dtype the backend does not support).
    Skipped(String),
}

/// One case: an op on one shape and dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    pub backend: String,
    pub op: &'static str,
    pub dtype: DType,
    /// Shape and parameters, e.g. `m=17 n=33 k=19 tA`.
    pub case: String,
    pub outcome: Outcome,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        matches!(self.outcome, Outcome::Pass { .. })
    }
    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Fail(_))
    }
}

impl fmt::Display for CaseResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = match &self.outcome {
            Outcome::Pass { worst } => format!("ok   (worst {:.0}% of tolerance)", worst * 100.0),
            Outcome::Fail(m) => format!("FAIL {m}"),
            Outcome::Skipped(m) => format!("skip {m}"),
        };
        write!(
            f,
            "{:<6} {:<24} {:<5} {:<40} {status}",
            self.backend, self.op, self.dtype, self.case
        )
    }
}

/// Which ops and dtypes to run.
#[derive(Clone, Debug)]
pub struct SuiteOptions {
    pub dtypes: Vec<DType>,
    /// `None`: every op in [`OPS`]; otherwise only these names.
    pub ops: Option<Vec<&'static str>>,
    /// Mixed into every case's seed.
    pub seed: u64,
    /// Run the bigger shapes too (off in the browser, where a software adapter is slow).
    pub large: bool,
}

impl SuiteOptions {
    /// Every op, in these dtypes. The seed is fixed (runs are reproducible) unless the
    /// environment sets `BRRR_SUITE_SEED` (a number), which draws every input anew.
    pub fn all(dtypes: &[DType]) -> Self {
        let seed = std::env::var("BRRR_SUITE_SEED")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0x0b77_2024);
        SuiteOptions {
            dtypes: dtypes.to_vec(),
            ops: None,
            seed,
            large: true,
        }
    }
    /// The core: matmul, softmax, layernorm, attention, AdamW (what the browser runs).
    pub fn core(dtypes: &[DType]) -> Self {
        SuiteOptions {
            ops: Some(CORE_OPS.to_vec()),
            large: false,
            ..SuiteOptions::all(dtypes)
        }
    }
    pub fn only(mut self, ops: &[&'static str]) -> Self {
        self.ops = Some(ops.to_vec());
        self
    }
    pub fn wants(&self, op: &str) -> bool {
        self.ops.as_ref().is_none_or(|o| o.contains(&op))
    }
}

/// Runs the suite: every selected case, on `backend` and on `reference`, compared.
pub async fn run_suite_async<B: Backend, R: Backend>(
    backend: &B,
    reference: &R,
    opts: &SuiteOptions,
) -> Vec<CaseResult> {
    let name = backend.info().name.to_string();
    let mut results = Vec::new();
    for &dtype in &opts.dtypes {
        for case in cases::cases(dtype, opts) {
            // `supports` is about float compute dtypes; i32/u32 (ids, targets, casts,
            // copies) are always accepted, so integer cases always run.
            let float = case.dtype.is_float();
            let outcome = if float && !backend.supports(case.dtype) {
                Outcome::Skipped(format!("{name} does not support {}", case.dtype))
            } else if float && !reference.supports(case.dtype) {
                Outcome::Skipped(format!("the reference does not support {}", case.dtype))
            } else {
                cases::run_case(backend, reference, &case).await
            };
            results.push(CaseResult {
                backend: name.clone(),
                op: case.op_name,
                dtype: case.dtype,
                case: case.label.clone(),
                outcome,
            });
        }
        if opts.wants("adamw") {
            if backend.supports(dtype) {
                results.push(hostile::clip_routes_agree(backend, dtype).await);
            } else {
                results.push(CaseResult {
                    backend: name.clone(),
                    op: "adamw",
                    dtype,
                    case: "clip coef as inv_scale ≡ as grad_scale (bitwise)".to_string(),
                    outcome: Outcome::Skipped(format!("{name} does not support {dtype}")),
                });
            }
        }
    }
    // Sizes that overflow: every backend must refuse them (once per suite, in f32).
    if opts.wants(hostile::OP) {
        results.extend(hostile::run(backend));
    }
    results
}

/// [`run_suite_async`], blocking (native).
#[cfg(not(target_arch = "wasm32"))]
pub fn run_suite<B: Backend, R: Backend>(
    backend: &B,
    reference: &R,
    opts: &SuiteOptions,
) -> Vec<CaseResult> {
    brrr_backend::block_on(run_suite_async(backend, reference, opts))
}

/// Counts and a per-op table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

pub fn summarize(results: &[CaseResult]) -> Summary {
    let mut s = Summary::default();
    for r in results {
        match r.outcome {
            Outcome::Pass { .. } => s.passed += 1,
            Outcome::Fail(_) => s.failed += 1,
            Outcome::Skipped(_) => s.skipped += 1,
        }
    }
    s
}

/// One line per (op, dtype): cases passed / failed / skipped, and the worst error of the
/// passing cases as a share of its tolerance.
pub fn report(results: &[CaseResult]) -> String {
    let mut rows: Vec<(&'static str, DType, Summary, f64)> = Vec::new();
    for r in results {
        let i = match rows
            .iter()
            .position(|(o, d, _, _)| *o == r.op && *d == r.dtype)
        {
            Some(i) => i,
            None => {
                rows.push((r.op, r.dtype, Summary::default(), 0.0));
                rows.len() - 1
            }
        };
        let row = &mut rows[i];
        match r.outcome {
            Outcome::Pass { worst } => {
                row.2.passed += 1;
                row.3 = row.3.max(worst);
            }
            Outcome::Fail(_) => row.2.failed += 1,
            Outcome::Skipped(_) => row.2.skipped += 1,
        }
    }
    let mut out = String::new();
    for (op, d, s, worst) in rows {
        let status = if s.failed > 0 {
            "FAIL"
        } else if s.passed == 0 {
            "skip"
        } else {
            "ok"
        };
        out.push_str(&format!(
            "{op:<24} {d:<5} {status:<5} {:>3} passed, {} failed, {} skipped; worst {:>5.1}% of tolerance\n",
            s.passed,
            s.failed,
            s.skipped,
            worst * 100.0
        ));
    }
    let t = summarize(results);
    out.push_str(&format!(
        "total: {} passed, {} failed, {} skipped\n",
        t.passed, t.failed, t.skipped
    ));
    out
}

/// Panics with every failing case listed if any case failed, or if nothing passed.
pub fn assert_all_passed(backend: &str, results: &[CaseResult]) {
    let s = summarize(results);
    let failures: Vec<String> = results
        .iter()
        .filter(|r| r.failed())
        .map(|r| r.to_string())
        .collect();
    if !failures.is_empty() {
        panic!(
            "{backend}: {} of {} conformance cases failed:\n{}\n\n{}",
            s.failed,
            results.len(),
            failures.join("\n"),
            report(results)
        );
    }
    assert!(
        s.passed > 0,
        "{backend}: no conformance case passed (all {} skipped)",
        s.skipped
    );
}

/// For a backend that cannot be created: prints `NAME: SKIPPED (reason)` loudly, or, if
/// the environment variable `require_env` is set to a non-empty value other than `0`,
/// panics (CI sets it where the backend must be present).
#[cfg(not(target_arch = "wasm32"))]
pub fn backend_absent(name: &str, reason: impl fmt::Display, require_env: &str) {
    let required = std::env::var(require_env).is_ok_and(|v| !v.is_empty() && v != "0");
    let msg = format!("{name}: SKIPPED ({reason})");
    if required {
        panic!("{msg}, but {require_env} is set: the {name} backend must be present here");
    }
    eprintln!("\n{}", "=".repeat(msg.len()));
    brrr_backend::skip::report_skipped(name, &reason.to_string());
    eprintln!("{}\n", "=".repeat(msg.len()));
}

/// Host data of `dtype` from f64 values (rounded to nearest even).
pub fn host(dtype: DType, v: &[f64]) -> HostData {
    HostData::from_f64(dtype, v)
}
