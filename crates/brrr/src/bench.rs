//! `brrr bench`: benchmark programs that print tables.
//!
//! Timings are the median of several repetitions after a warm-up, and each table
//! states its baseline (the machine's peak, measured or computed, in the same run).
//! These are measurements for reading, never assertions: machines are shared and noisy.

use brrr_backend::{Backend, DType, Error, GemmSpec, HostData, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

/// One GEMM measurement.
#[derive(Clone, Debug)]
pub struct GemmRow {
    /// The square GEMM's size: `n × n` times `n × n`.
    pub n: usize,
    /// Seconds per GEMM (the best of the repetitions).
    pub seconds: f64,
    /// `2n³ / seconds`, in GFLOP/s.
    pub gflops: f64,
}

fn random(dtype: DType, len: usize, rng: &mut impl Rng) -> HostData {
    let v: Vec<f64> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
    HostData::from_f64(dtype, &v)
}

/// Checks a GEMM size before allocating: at least 1 (a 0-size GEMM times nothing), and its
/// three matrices plus the f64 staging of one must fit in this machine's memory (else the
/// allocation aborts the process instead of returning an error).
fn check_size(n: usize, dtype: DType) -> Result<()> {
    let elems = n.checked_mul(n).filter(|_| n >= 1);
    let bytes = elems.map(|e| e as f64 * (3.0 * dtype.size_in_bytes() as f64 + 8.0));
    let memory = brrr_perf::machine::total_memory_bytes().map(|b| b as f64);
    match (bytes, memory) {
        (None, _) => Err(Error::invalid(
            "bench gemm",
            format!("size {n} must be at least 1 and its square must fit in usize"),
        )),
        (Some(b), Some(m)) if b > m => Err(Error::invalid(
            "bench gemm",
            format!(
                "size {n} needs {:.1} GiB for its matrices; this machine has {:.1} GiB",
                b / (1u64 << 30) as f64,
                m / (1u64 << 30) as f64
            ),
        )),
        _ => Ok(()),
    }
}

/// The sizes [`cpu_gemm_ceiling`] times: large enough to run at full speed, small
/// enough that both take a quarter of a second together.
pub const CEILING_SIZES: [usize; 2] = [512, 1024];

/// brrr-cpu's best f32 GEMM rate on this machine now: the faster of square products at
/// [`CEILING_SIZES`] through the backend trait on every thread (each the median of at
/// least a tenth of a second of timings). Measured once per process, on the first call;
/// `None` if the backend refused (it does not on any size here).
///
/// It is the second ceiling MFU is judged against on a CPU (see `train::mfu_peak`): a
/// kernel that beats the FMA loop shows that the loop under-measured the machine, and
/// MFU against the loop alone would then flatter the run.
pub fn cpu_gemm_ceiling() -> Option<GemmRow> {
    static CEILING: std::sync::OnceLock<Option<GemmRow>> = std::sync::OnceLock::new();
    CEILING
        .get_or_init(|| measure_cpu_gemm_ceiling(&brrr_cpu::CpuBackend::new()).ok()?)
        .clone()
}

/// [`cpu_gemm_ceiling`]'s measurement, made afresh on `cpu` (`brrr bench peak` repeats
/// it): the faster row of [`CEILING_SIZES`].
pub fn measure_cpu_gemm_ceiling(cpu: &brrr_cpu::CpuBackend) -> Result<Option<GemmRow>> {
    Ok(gemm(cpu, &CEILING_SIZES, DType::F32, 5, 0.1)?
        .into_iter()
        .max_by(|a, b| a.gflops.total_cmp(&b.gflops)))
}

/// Upper bound on timings per size, whatever their length.
const MAX_REPS: usize = 10_000;

/// Times `n × n × n` GEMMs of `dtype` through the backend trait: median over at least
/// `reps` runs and `min_seconds` of them (each ending in a synchronize), after one warm-up.
pub fn gemm<B: Backend>(
    backend: &B,
    sizes: &[usize],
    dtype: DType,
    reps: usize,
    min_seconds: f64,
) -> Result<Vec<GemmRow>> {
    for &n in sizes {
        check_size(n, dtype)?;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let mut rows = Vec::new();
    for &n in sizes {
        let a = backend.upload(&random(dtype, n * n, &mut rng))?;
        let b = backend.upload(&random(dtype, n * n, &mut rng))?;
        let mut c = backend.zeros(dtype, n * n)?;
        let spec = GemmSpec::new(n, n, n);
        backend.gemm(&spec, &a, &b, &mut c)?;
        brrr_backend::block_on(backend.synchronize())?;
        // Each timing covers about 2e8 flops (a millisecond on a laptop CPU), at least
        // one GEMM, so the clock's resolution does not matter at small sizes.
        let flops = spec.flops()? as f64;
        let inner = (2e8 / flops).ceil().clamp(1.0, 64.0) as usize;
        // Keep timing until there are `reps` timings *and* `min_seconds` of work: a
        // stall of a few tens of milliseconds (a shared machine taking one of two cores
        // halves a GEMM) then lands in a minority of timings, which the median ignores.
        let mut times = Vec::with_capacity(reps);
        let mut timed = 0.0;
        while times.len() < reps.max(1) || (timed < min_seconds && times.len() < MAX_REPS) {
            let t0 = Instant::now();
            for _ in 0..inner {
                backend.gemm(&spec, &a, &b, &mut c)?;
            }
            brrr_backend::block_on(backend.synchronize())?;
            let t = t0.elapsed().as_secs_f64();
            timed += t;
            times.push(t / inner as f64);
        }
        times.sort_by(f64::total_cmp);
        let seconds = times[times.len() / 2];
        rows.push(GemmRow {
            n,
            seconds,
            gflops: flops / seconds / 1e9,
        });
    }
    Ok(rows)
}
