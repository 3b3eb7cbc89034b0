//! "This machine": the CPU's theoretical FP32 peak, its measured FMA throughput
//! ([`measure_cpu_fma_peak`], [`cpu_fp32_peak_measured`]) and a quick memory-bandwidth probe.
//!
//! The peak is the textbook product
//!
//! ```text
//! FLOP/s = cores × f32 SIMD lanes × 2 (an FMA is a multiply and an add) × FMA units per core × clock
//! ```
//!
//! It is a *ceiling*, like a GPU's datasheet number: real GEMMs reach 70–90% of it, and
//! everything else much less. The inputs are detected where the platform lets us and assumed
//! (and labelled as assumed) where it does not.

use serde::Serialize;
use std::fmt;

/// The theoretical FP32 peak of the CPU we run on, with every factor of the formula.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuPeak {
    /// CPU model name (`/proc/cpuinfo` "model name"), or a placeholder where unknown.
    pub model: String,
    /// Hardware threads available to this process (`std::thread::available_parallelism`).
    ///
    /// With SMT (hyper-threading) on, two threads share one core's FMA units, so this
    /// *overstates* the peak by up to 2× on such machines; the OS does not tell us reliably
    /// which threads are siblings inside containers, so we count what we may use.
    pub cores: usize,
    /// f32 lanes per SIMD register: 16 with AVX-512F, 8 with AVX2, 4 otherwise (SSE/NEON/
    /// wasm simd128), 1 on wasm32 without simd128.
    pub simd_f32_lanes: u32,
    /// The instruction set the lane count came from.
    pub simd_isa: &'static str,
    /// Vector FMA instructions issued per core per cycle.
    ///
    /// Assumption: 2 for AVX-512/AVX2 server cores (Intel Skylake-SP Gold/Platinum and later,
    /// AMD Zen 2/3 for 256-bit, Zen 5 for 512-bit), with one exception we can detect: AMD Zen 4
    /// (cpu family 25) executes a 512-bit FMA as two halves on its two 256-bit pipes, so it
    /// counts as 1 unit at 16 lanes. Some Intel Xeon Silver/Bronze parts have a single 512-bit
    /// FMA unit; we cannot tell them apart from `cpuid` flags, so they are overstated 2×.
    pub fma_units_per_core: u32,
    /// Clock in GHz used for the peak.
    pub clock_ghz: f64,
    /// Where the clock came from (sysfs max frequency, `/proc/cpuinfo` "cpu MHz", or assumed).
    pub clock_source: &'static str,
    /// The resulting peak in FLOP/s.
    pub flops: f64,
}

impl CpuPeak {
    /// Builds a peak from its factors, computing `flops = cores × lanes × 2 × fma_units × clock`.
    pub fn from_parts(
        model: impl Into<String>,
        cores: usize,
        simd_f32_lanes: u32,
        simd_isa: &'static str,
        fma_units_per_core: u32,
        clock_ghz: f64,
        clock_source: &'static str,
    ) -> Self {
        let flops = cores as f64
            * f64::from(simd_f32_lanes)
            * 2.0
            * f64::from(fma_units_per_core)
            * clock_ghz
            * 1e9;
        Self {
            model: model.into(),
            cores,
            simd_f32_lanes,
            simd_isa,
            fma_units_per_core,
            clock_ghz,
            clock_source,
            flops,
        }
    }
}

impl fmt::Display for CpuPeak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} cores × {} f32 lanes ({}) × 2 flop/FMA × {} FMA units × {:.2} GHz ({}) = {:.1} GFLOP/s fp32",
            self.model,
            self.cores,
            self.simd_f32_lanes,
            self.simd_isa,
            self.fma_units_per_core,
            self.clock_ghz,
            self.clock_source,
            self.flops / 1e9
        )
    }
}

/// The clock we assume where none can be read (wasm32, sandboxes): a typical 3 GHz.
pub const ASSUMED_CLOCK_GHZ: f64 = 3.0;

/// Detects this CPU's theoretical FP32 peak (see [`CpuPeak`] for each factor's source).
///
/// Formula: `cores × lanes × 2 × fma_units × clock_GHz × 1e9` FLOP/s.
/// Clock: `/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq` (kHz; the maximum boost
/// the kernel knows) if present, otherwise the largest "cpu MHz" over the cores in
/// `/proc/cpuinfo` (the *current* clock, which in VMs is usually the base clock, so the peak
/// is then conservative), otherwise [`ASSUMED_CLOCK_GHZ`].
pub fn cpu_fp32_peak() -> CpuPeak {
    let cores = available_threads();
    let (lanes, isa) = simd_lanes();
    let info = read_cpuinfo();
    let model = info
        .as_deref()
        .and_then(|s| cpuinfo_field(s, "model name").next())
        .map(str::to_string)
        .unwrap_or_else(|| default_model_name().to_string());
    let fma_units = fma_units(lanes, info.as_deref());
    let (clock_ghz, clock_source) = clock_ghz(info.as_deref());
    CpuPeak::from_parts(model, cores, lanes, isa, fma_units, clock_ghz, clock_source)
}

fn available_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn default_model_name() -> &'static str {
    if cfg!(target_arch = "wasm32") {
        "WebAssembly host CPU"
    } else {
        "unknown CPU"
    }
}

/// f32 lanes of the widest SIMD unit we can use.
fn simd_lanes() -> (u32, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return (16, "AVX-512F");
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return (8, "AVX2");
        }
        (4, "SSE")
    }
    #[cfg(target_arch = "aarch64")]
    {
        // NEON is mandatory on AArch64: 128-bit registers. (SVE may be wider, but few
        // compilers auto-vectorise for it and its width is implementation-defined.)
        (4, "NEON")
    }
    #[cfg(target_arch = "wasm32")]
    {
        if cfg!(target_feature = "simd128") {
            (4, "wasm simd128")
        } else {
            (1, "wasm scalar")
        }
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "wasm32"
    )))]
    {
        (4, "assumed 128-bit SIMD")
    }
}

/// FMA issue width per core; see [`CpuPeak::fma_units_per_core`] for the assumption.
fn fma_units(lanes: u32, cpuinfo: Option<&str>) -> u32 {
    let vendor = cpuinfo.and_then(|s| cpuinfo_field(s, "vendor_id").next());
    let family = cpuinfo
        .and_then(|s| cpuinfo_field(s, "cpu family").next())
        .and_then(|f| f.parse::<u32>().ok());
    match (lanes, vendor, family) {
        // AMD Zen 4 (family 0x19 = 25) double-pumps 512-bit ops on two 256-bit FMA pipes.
        (16, Some("AuthenticAMD"), Some(25)) => 1,
        (16 | 8, _, _) => 2,
        // SSE-era x86, NEON cores and unknown platforms: assume two 128-bit FMA pipes
        // (true for e.g. Cortex-A76 and later); scalar wasm: one.
        (4, _, _) => 2,
        _ => 1,
    }
}

fn clock_ghz(cpuinfo: Option<&str>) -> (f64, &'static str) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        if let Ok(s) =
            std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
            && let Ok(khz) = s.trim().parse::<f64>()
            && khz > 0.0
        {
            return (khz / 1e6, "cpufreq max");
        }
    }
    if let Some(mhz) = cpuinfo.and_then(max_cpu_mhz) {
        return (mhz / 1e3, "/proc/cpuinfo cpu MHz");
    }
    (ASSUMED_CLOCK_GHZ, "assumed")
}

fn read_cpuinfo() -> Option<String> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::fs::read_to_string("/proc/cpuinfo").ok()
    }
    #[cfg(target_arch = "wasm32")]
    {
        None
    }
}

/// The values of `key` in each processor block of `/proc/cpuinfo` text.
fn cpuinfo_field<'a>(text: &'a str, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    text.lines().filter_map(move |line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// Largest "cpu MHz" over all processors in `/proc/cpuinfo` text.
fn max_cpu_mhz(text: &str) -> Option<f64> {
    cpuinfo_field(text, "cpu MHz")
        .filter_map(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .reduce(f64::max)
}

/// Total physical memory in bytes (`MemTotal` in `/proc/meminfo`), where readable.
pub fn total_memory_bytes() -> Option<u64> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kib = cpuinfo_field(&text, "MemTotal")
            .next()?
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()?;
        Some(kib * 1024)
    }
    #[cfg(target_arch = "wasm32")]
    {
        None
    }
}

/// Elements per array in the default bandwidth probe: 2^23 f64 = 64 MiB per array, 192 MiB
/// for the three arrays of the triad, far beyond any CPU's last-level cache so we time DRAM.
pub const PROBE_ELEMENTS: usize = 1 << 23;

/// Measures sustainable memory bandwidth in bytes/s with a STREAM-style triad
/// `a[i] = b[i] + s·c[i]` over [`PROBE_ELEMENTS`] f64 per array, split over all available
/// threads, best of 5 repetitions.
///
/// Bytes counted per element: 24 (read b, read c, write a), STREAM's convention (McCalpin,
/// "STREAM: Sustainable Memory Bandwidth in High Performance Computers"); the write-allocate
/// read of `a` that many CPUs also do is not counted, so this is a slight underestimate of
/// raw traffic but comparable with published STREAM numbers.
///
/// On wasm32 there is no clock in `std` (`Instant::now` panics), so this returns `f64::NAN`;
/// use [`measure_cpu_bandwidth_with_clock`] with `performance.now()` there.
pub fn measure_cpu_bandwidth() -> f64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let t0 = std::time::Instant::now();
        measure_cpu_bandwidth_with_clock(PROBE_ELEMENTS, 5, move || t0.elapsed().as_secs_f64())
    }
    #[cfg(target_arch = "wasm32")]
    {
        f64::NAN
    }
}

/// The triad probe of [`measure_cpu_bandwidth`] with a caller-supplied clock (`now()` returns
/// seconds from any fixed origin), `elements` f64 per array and `reps` timed repetitions
/// (best of). Returns bytes/s (`24 × elements / best_seconds`), or NaN if the clock never
/// advanced or `elements`/`reps` is zero.
pub fn measure_cpu_bandwidth_with_clock(
    elements: usize,
    reps: usize,
    mut now: impl FnMut() -> f64,
) -> f64 {
    if elements == 0 || reps == 0 {
        return f64::NAN;
    }
    let threads = available_threads().min(elements);
    let mut a = vec![0.0f64; elements];
    let b = vec![1.0f64; elements];
    let c = vec![2.0f64; elements];
    let scalar = 3.0f64;
    let chunk = elements.div_ceil(threads);
    let mut best = f64::INFINITY;
    // One untimed pass first so every page is faulted in before we time anything.
    for rep in 0..=reps {
        let start = now();
        triad(&mut a, &b, &c, scalar, chunk, threads);
        let elapsed = now() - start;
        if rep > 0 && elapsed > 0.0 {
            best = best.min(elapsed);
        }
    }
    // Keep the result observable so the loop cannot be optimised away.
    std::hint::black_box(&a);
    if best.is_finite() {
        24.0 * elements as f64 / best
    } else {
        f64::NAN
    }
}

fn triad(a: &mut [f64], b: &[f64], c: &[f64], s: f64, chunk: usize, threads: usize) {
    let kernel = |a: &mut [f64], b: &[f64], c: &[f64]| {
        for ((x, y), z) in a.iter_mut().zip(b).zip(c) {
            *x = y + s * z;
        }
    };
    #[cfg(not(target_arch = "wasm32"))]
    if threads > 1 {
        std::thread::scope(|scope| {
            for ((a, b), c) in a
                .chunks_mut(chunk)
                .zip(b.chunks(chunk))
                .zip(c.chunks(chunk))
            {
                scope.spawn(move || kernel(a, b, c));
            }
        });
        return;
    }
    let _ = (chunk, threads);
    kernel(a, b, c);
}

/// The CPU's FP32 FMA throughput, *measured*: a timed loop of independent vector FMA
/// chains on one thread and on every thread at once.
///
/// The nominal peak ([`cpu_fp32_peak`]) multiplies a clock read from the OS, which in a VM is
/// often the base clock and everywhere ignores turbo and the lower clock of wide vector
/// units (AVX-512 "licences"). The measured figure is what the FMA units sustain now,
/// clock effects included, so "% of peak" against it says how close a kernel is to what this
/// machine can actually do. It is only as good as the machine is quiet: other processes on
/// the cores lower it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredFmaPeak {
    /// The instruction set the loop used (`AVX-512F`, `AVX2+FMA`, `NEON`).
    pub isa: &'static str,
    /// f32 lanes per FMA instruction.
    pub lanes: u32,
    /// FLOP/s of the loop on one thread (an FMA counts 2 per lane).
    pub single_thread_flops: f64,
    /// FLOP/s of the loop on all `threads` threads at once.
    pub all_threads_flops: f64,
    /// Threads run for `all_threads_flops` (`std::thread::available_parallelism`).
    pub threads: usize,
}

impl MeasuredFmaPeak {
    /// The peak MFU divides by: the larger of the loop on all threads at once and
    /// `threads` × the loop on one thread.
    ///
    /// Why both: on a machine shared with other processes, the all-thread run competes
    /// for cores and comes out low (152 instead of 202 GFLOP/s on the 2-core development
    /// machine while a compiler ran beside it), which would make every MFU look better
    /// than it is; the one-thread run needs only one free core. Where all cores really do
    /// run slower together (a lower all-core turbo clock, SMT siblings sharing FMA units),
    /// `threads` × one thread overstates the peak, which understates MFU: the choice
    /// errs on the side of a lower MFU.
    pub fn peak_flops(&self) -> f64 {
        let scaled = self.single_thread_flops * self.threads as f64;
        self.all_threads_flops
            .max(if scaled.is_finite() { scaled } else { 0.0 })
    }

    /// The clock the single-thread figure implies with `fma_units` FMA pipes per core:
    /// `flops / (lanes × 2 × fma_units)`. The check that the loop ran as vector FMAs: it
    /// should be near the core's real clock (a scalar or non-fused loop would imply a
    /// fraction of it).
    pub fn implied_clock_ghz(&self, fma_units: u32) -> f64 {
        self.single_thread_flops / (f64::from(self.lanes) * 2.0 * f64::from(fma_units.max(1)) * 1e9)
    }
}

impl fmt::Display for MeasuredFmaPeak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "measured {} loop: {:.1} GFLOP/s on 1 thread, {:.1} GFLOP/s on {} threads",
            self.isa,
            self.single_thread_flops / 1e9,
            self.all_threads_flops / 1e9,
            self.threads
        )
    }
}

/// Independent accumulator chains in the FMA loop. An FMA has a latency of 4 cycles and two
/// pipes issue one each per cycle (Intel Skylake-SP and later, AMD Zen 2–5; Agner Fog,
/// "Instruction tables"), so at least 8 chains must be in flight to keep both pipes busy;
/// 12 leaves headroom and still fits the 16 ymm registers of AVX2 with the two constants.
const FMA_CHAINS: usize = 12;

/// FLOPs of one iteration of the FMA loop: chains × lanes × 2.
fn flops_per_iteration(lanes: u32) -> f64 {
    (FMA_CHAINS as f64) * f64::from(lanes) * 2.0
}

#[cfg(target_arch = "x86_64")]
mod fma_kernels {
    use super::FMA_CHAINS;
    use std::arch::x86_64::*;

    /// `acc = acc · 0.999999 + 1e-7` on `FMA_CHAINS` zmm registers, `iters` times: the values
    /// stay near 1 (no overflow, no denormals, so no slow paths).
    #[target_feature(enable = "avx512f")]
    pub fn avx512(iters: u64) -> f32 {
        let (mul, add) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
        let mut acc = [_mm512_set1_ps(1.0); FMA_CHAINS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm512_fmadd_ps(*a, mul, add);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm512_setzero_ps(), |s, a| _mm512_add_ps(s, *a));
        _mm512_reduce_add_ps(sum)
    }

    /// As [`avx512`] on ymm registers with AVX2's FMA3.
    #[target_feature(enable = "avx2,fma")]
    pub fn avx2(iters: u64) -> f32 {
        let (mul, add) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
        let mut acc = [_mm256_set1_ps(1.0); FMA_CHAINS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, mul, add);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm256_setzero_ps(), |s, a| _mm256_add_ps(s, *a));
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` is 8 f32 = 32 bytes, the size of one unaligned 256-bit store.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
        lanes.iter().sum()
    }
}

/// A timed FMA loop: `iters` iterations of [`FMA_CHAINS`] vector FMAs.
type FmaLoop = fn(u64) -> f32;

// Checked with rustc 1.95 (`--emit asm`) at opt-level 1 (the dev profile) and 3: the
// AVX2 loop's body is 12 `vfmadd213ps` on ymm registers and a counter, no loads or stores,
// and it ran at 3.1–3.2 GHz × 8 lanes × 2 × 2 pipes on an AMD EPYC (2.45 GHz nominal).

/// The FMA loop this CPU can run: `(isa, lanes, loop)`, or `None` where there is no vector
/// FMA kernel for the platform (x86 without AVX2+FMA, wasm32, others).
fn fma_kernel() -> Option<(&'static str, u32, FmaLoop)> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected at run time just above.
            return Some(("AVX-512F", 16, |n| unsafe { fma_kernels::avx512(n) }));
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: AVX2 and FMA were detected at run time just above.
            return Some(("AVX2+FMA", 8, |n| unsafe { fma_kernels::avx2(n) }));
        }
        None
    }
    #[cfg(target_arch = "aarch64")]
    {
        // NEON (with its fused vfmaq_f32) is mandatory on AArch64.
        return Some(("NEON", 4, neon_fma));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        None
    }
}

#[cfg(target_arch = "aarch64")]
fn neon_fma(iters: u64) -> f32 {
    use std::arch::aarch64::*;
    // SAFETY: NEON is part of the AArch64 base ISA, so these intrinsics are always available.
    unsafe {
        let (mul, add) = (vdupq_n_f32(0.999_999), vdupq_n_f32(1e-7));
        let mut acc = [vdupq_n_f32(1.0); FMA_CHAINS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = vfmaq_f32(add, *a, mul);
            }
        }
        acc.iter().map(|a| vaddvq_f32(*a)).sum()
    }
}

/// Measures [`MeasuredFmaPeak`] on this CPU with [`FmaTiming::default`] (about 0.7 s), or
/// `None` where no vector FMA loop exists for the platform (then use the nominal
/// [`cpu_fp32_peak`]) or the clock did not advance.
pub fn measure_cpu_fma_peak() -> Option<MeasuredFmaPeak> {
    measure_cpu_fma_peak_timed(FmaTiming::default())
}

/// [`measure_cpu_fma_peak`] with other timing settings (`brrr bench peak` compares two).
pub fn measure_cpu_fma_peak_timed(timing: FmaTiming) -> Option<MeasuredFmaPeak> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let t0 = std::time::Instant::now();
        measure_cpu_fma_peak_with_clock(timing, move || t0.elapsed().as_secs_f64())
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = timing;
        None
    }
}

/// How the FMA loop is timed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FmaTiming {
    /// The shortest timed run, in seconds.
    pub min_seconds: f64,
    /// Timed runs per figure; each figure is the best of them.
    pub runs: usize,
    /// Whether every thread runs the loop untimed first.
    pub warm_up: bool,
}

impl Default for FmaTiming {
    /// 50 ms runs, the best of 5, after a warm-up. A run is only ever slowed (another
    /// process taking the core, a clock not yet up), never sped up, so the fastest is the
    /// closest to what the units sustain; 50 ms makes a scheduler tick (4 ms at 250 Hz)
    /// taken by another process a small part of a run. [`FmaTiming::QUICK`] left a 2×
    /// spread between processes on a shared 2-core machine (`brrr bench peak` measures
    /// both in one run).
    fn default() -> Self {
        FmaTiming {
            min_seconds: 0.05,
            runs: 5,
            warm_up: true,
        }
    }
}

impl FmaTiming {
    /// The earlier setting, kept to compare against: 20 ms runs, best of 3, no warm-up.
    pub const QUICK: FmaTiming = FmaTiming {
        min_seconds: 0.02,
        runs: 3,
        warm_up: false,
    };
}

/// [`measure_cpu_fma_peak`] with a caller's clock (`now()` in seconds).
///
/// 1. The iteration count doubles until one thread's loop takes `timing.min_seconds`.
/// 2. Warm-up (if asked): every thread runs the loop for about twice that, untimed, so
///    cores that were idle have raised their clocks before anything is timed.
/// 3. One-thread and all-thread runs alternate, `timing.runs` of each, and each figure
///    is the best of its runs: a burst of load from elsewhere then lowers some runs of
///    both kinds instead of every run of one.
pub fn measure_cpu_fma_peak_with_clock(
    timing: FmaTiming,
    now: impl Fn() -> f64 + Sync,
) -> Option<MeasuredFmaPeak> {
    let (isa, lanes, kernel) = fma_kernel()?;
    let time = |iters: u64, threads: usize| {
        let start = now();
        run_fma_threads(kernel, iters, threads);
        now() - start
    };
    let mut iters = 1u64 << 12;
    while time(iters, 1) < timing.min_seconds {
        iters = iters.checked_mul(2)?;
    }
    let threads = available_threads();
    if timing.warm_up {
        run_fma_threads(kernel, iters.checked_mul(2)?, threads);
    }
    let (mut one, mut all) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..timing.runs.max(1) {
        one = one.min(time(iters, 1));
        all = all.min(time(iters, threads));
    }
    if !(one > 0.0 && all > 0.0 && one.is_finite() && all.is_finite()) {
        return None;
    }
    let flops = iters as f64 * flops_per_iteration(lanes);
    Some(MeasuredFmaPeak {
        isa,
        lanes,
        single_thread_flops: flops / one,
        all_threads_flops: flops * threads as f64 / all,
        threads,
    })
}

/// Runs `kernel(iters)` on `threads` threads at once (the calling thread when 1).
fn run_fma_threads(kernel: FmaLoop, iters: u64, threads: usize) {
    #[cfg(not(target_arch = "wasm32"))]
    if threads > 1 {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(move || std::hint::black_box(kernel(std::hint::black_box(iters))));
            }
        });
        return;
    }
    // wasm32 has no threads: one loop stands for all.
    let _ = threads;
    std::hint::black_box(kernel(std::hint::black_box(iters)));
}

/// The FP32 peak "% of peak" and MFU on the CPU divide by: the measured FMA throughput
/// ([`MeasuredFmaPeak::peak_flops`]) where it could be measured, else the nominal
/// [`cpu_fp32_peak`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuPeakChoice {
    /// FLOP/s.
    pub flops: f64,
    /// Whether `flops` was measured (else it is the nominal figure, the fallback).
    pub measured: bool,
    /// The nominal peak, always computed, for comparison.
    pub nominal: CpuPeak,
    /// The measurement, where one was made.
    pub measurement: Option<MeasuredFmaPeak>,
}

impl CpuPeakChoice {
    /// What the figure is, for a reader: "measured ..." or "nominal ... (fallback)".
    pub fn describe(&self) -> String {
        match &self.measurement {
            Some(m) if self.measured => format!(
                "fp32 peak of this CPU measured by a vector FMA loop ({}): the larger of {} threads at once and {} x one thread (brrr_perf::machine)",
                m.isa, m.threads, m.threads
            ),
            _ => "fp32 peak of this CPU at its nominal clock, the fallback: no FMA loop could be timed (brrr_perf::machine)".into(),
        }
    }
}

/// Measures the CPU's FMA throughput and picks it over the nominal peak (see
/// [`CpuPeakChoice`]). Measured once per process (about 0.7 s, on the
/// first call), so that every figure of a run divides by the same peak.
pub fn cpu_fp32_peak_measured() -> CpuPeakChoice {
    static PEAK: std::sync::OnceLock<CpuPeakChoice> = std::sync::OnceLock::new();
    PEAK.get_or_init(measure_peak_choice).clone()
}

fn measure_peak_choice() -> CpuPeakChoice {
    let nominal = cpu_fp32_peak();
    let measurement = measure_cpu_fma_peak();
    match measurement {
        Some(m) if m.all_threads_flops.is_finite() && m.all_threads_flops > 0.0 => CpuPeakChoice {
            flops: m.peak_flops(),
            measured: true,
            nominal,
            measurement: Some(m),
        },
        other => CpuPeakChoice {
            flops: nominal.flops,
            measured: false,
            nominal,
            measurement: other,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_the_larger_of_all_threads_and_scaled_one_thread() {
        let m = |one: f64, all: f64| MeasuredFmaPeak {
            isa: "AVX2+FMA",
            lanes: 8,
            single_thread_flops: one,
            all_threads_flops: all,
            threads: 2,
        };
        // A busy machine: the all-thread run lost a core's worth to another process.
        assert_eq!(m(100e9, 152e9).peak_flops(), 200e9);
        // A machine whose cores run faster together than one alone predicts.
        assert_eq!(m(90e9, 185e9).peak_flops(), 185e9);
        assert_eq!(m(f64::INFINITY, 185e9).peak_flops(), 185e9);
    }

    #[test]
    fn formula_multiplies_all_factors() {
        // 2 cores × 16 lanes × 2 × 2 FMA units × 2.5 GHz = 320 GFLOP/s.
        let p = CpuPeak::from_parts("x", 2, 16, "AVX-512F", 2, 2.5, "test");
        assert!((p.flops - 320e9).abs() < 1.0);
        let s = p.to_string();
        assert!(s.contains("2 cores × 16 f32 lanes"), "{s}");
        assert!(s.contains("320.0 GFLOP/s"), "{s}");
    }

    #[test]
    fn detects_something_sensible() {
        let p = cpu_fp32_peak();
        assert!(p.cores >= 1);
        assert!([1, 4, 8, 16].contains(&p.simd_f32_lanes));
        assert!(p.clock_ghz > 0.1 && p.clock_ghz < 10.0, "{p}");
        assert!(p.flops > 0.0);
    }

    /// The measured FMA throughput is positive and within a sane factor of the nominal peak
    /// (a loop compiled to scalar or non-fused code would fall far below; a shared, busy
    /// machine lowers it too, hence the wide margin).
    #[test]
    fn measured_fma_peak_is_near_the_nominal_one() {
        let Some(m) = measure_cpu_fma_peak() else {
            eprintln!("SKIPPED measured_fma_peak_is_near_the_nominal_one: no FMA loop here");
            return;
        };
        let nominal = cpu_fp32_peak();
        let per_core_nominal = nominal.flops / nominal.cores as f64;
        let ratio = m.single_thread_flops / per_core_nominal;
        assert!(
            m.single_thread_flops > 0.0 && m.all_threads_flops > 0.0,
            "{m}"
        );
        assert!(
            (0.1..4.0).contains(&ratio),
            "{m} vs {nominal}: ratio {ratio}"
        );
        let clock = m.implied_clock_ghz(nominal.fma_units_per_core);
        assert!(clock > 0.2 && clock < 8.0, "{m}: implied {clock} GHz");
        eprintln!("{m}; implied clock {clock:.2} GHz; nominal: {nominal}");
        let choice = cpu_fp32_peak_measured();
        assert!(choice.flops > 0.0 && choice.describe().contains("measured"));
    }

    #[test]
    fn parses_cpuinfo() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\ncpu MHz\t\t: 2000.5\n\nprocessor\t: 1\ncpu MHz\t\t: 3100.0\n";
        assert_eq!(max_cpu_mhz(text), Some(3100.0));
        // Zen 4 double-pumps AVX-512.
        assert_eq!(fma_units(16, Some(text)), 1);
        assert_eq!(fma_units(8, Some(text)), 2);
        assert_eq!(fma_units(16, None), 2);
    }

    #[test]
    fn bandwidth_probe_runs_small() {
        let t0 = std::time::Instant::now();
        let bw = measure_cpu_bandwidth_with_clock(1 << 16, 2, move || t0.elapsed().as_secs_f64());
        assert!(bw.is_nan() || bw > 1e8, "{bw}");
        assert!(measure_cpu_bandwidth_with_clock(0, 2, || 0.0).is_nan());
        // A clock that never advances gives NaN, not infinity.
        assert!(measure_cpu_bandwidth_with_clock(16, 2, || 1.0).is_nan());
    }
}
