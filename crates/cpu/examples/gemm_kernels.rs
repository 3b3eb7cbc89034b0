//! brrr's own f32 GEMM kernel against the `gemm` crate's, in the same run, on square
//! sizes and on the products a training step of the default and the 10.8M-parameter
//! configurations makes (`m × n × k`, `nt` = B transposed, `tn` = A transposed).
//!
//! `cargo run --release -p brrr-cpu --example gemm_kernels [-- THREADS...]`
//! (default: 1 and the machine's thread count). The two kernels alternate round by
//! round, so load from other processes hits both alike; the table is the median and
//! the fastest of the rounds. With one thread the time is the process's CPU time
//! (`CLOCK_PROCESS_CPUTIME_ID`), which leaves out the time other processes hold the core.
//! (Benchmarks print tables; they never assert timings.)

use brrr_backend::{Backend, DType, GemmSpec, HostData};
use brrr_cpu::{CpuBackend, CpuBuffer, GemmKernel};

fn buf(cpu: &CpuBackend, n: usize) -> CpuBuffer {
    let v: Vec<f64> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f64 / 1000.0 - 0.5)
        .collect();
    cpu.upload(&HostData::from_f64(DType::F32, &v)).unwrap()
}

/// Seconds: the process's CPU time with one thread, else wall time.
fn now(threads: usize) -> f64 {
    if threads == 1 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        if rc == 0 {
            return ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
        }
    }
    let epoch = std::time::UNIX_EPOCH.elapsed().unwrap_or_default();
    epoch.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Timed rounds per shape (after one untimed), alternating the kernels.
const ROUNDS: usize = 10;

/// Seconds per product of each kernel in every round: rounds alternate the kernels, each
/// round at least ~50 ms.
fn compare(threads: usize, spec: &GemmSpec) -> [Vec<f64>; 2] {
    let cpu = CpuBackend::with_threads(threads).unwrap();
    let own = cpu.clone().with_gemm_kernel(GemmKernel::Own).unwrap();
    let krate = cpu.with_gemm_kernel(GemmKernel::GemmCrate).unwrap();
    let (m, n, k) = (spec.m, spec.n, spec.k);
    let (a, b, mut c) = (buf(&own, m * k), buf(&own, k * n), buf(&own, m * n));
    let flops = spec.flops().unwrap() as f64;
    let reps = ((5e7 / flops).ceil() as usize).max(1);
    let mut times = [Vec::new(), Vec::new()];
    for round in 0..=ROUNDS {
        for (which, cpu) in [&own, &krate].into_iter().enumerate() {
            let start = now(threads);
            for _ in 0..reps {
                cpu.gemm(spec, &a, &b, &mut c).unwrap();
            }
            if round > 0 {
                times[which].push((now(threads) - start) / reps as f64);
            }
        }
    }
    times
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let thread_counts = if args.is_empty() { vec![1, all] } else { args };
    if !GemmKernel::own_available() {
        println!("SKIPPED: brrr's own GEMM kernel needs x86-64 with AVX2 and FMA");
        return;
    }
    let mut shapes: Vec<(String, GemmSpec)> = [256, 512, 1024, 2048]
        .into_iter()
        .map(|n| (format!("{n}³"), GemmSpec::new(n, n, n)))
        .collect();
    // (label, m, n, k, trans_a, trans_b): forward x·Wᵀ, input gradient dy·W, weight
    // gradient dyᵀ·x, for B·T = 2048 tokens.
    for (c, f) in [(128usize, 3usize), (128, 4), (384, 3), (384, 4)] {
        let (bt, w) = (2048, c * f);
        shapes.push((
            format!("{bt}×{w}×{c} nt"),
            GemmSpec::new(bt, w, c).trans_b(true),
        ));
        shapes.push((format!("{bt}×{c}×{w} nn"), GemmSpec::new(bt, c, w)));
        shapes.push((
            format!("{w}×{c}×{bt} tn"),
            GemmSpec::new(w, c, bt).trans_a(true),
        ));
    }
    println!(
        "f32 GEMM, GFLOP/s: the median and the fastest of {ROUNDS} alternating rounds (a shared \
         machine only ever slows a round down)\n"
    );
    println!(
        "| shape | threads | brrr sgemm | gemm crate | ratio | fastest: brrr sgemm | gemm crate | ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for threads in thread_counts {
        for (label, spec) in &shapes {
            let flops = spec.flops().unwrap() as f64 / 1e9;
            let [own, krate] = compare(threads, spec);
            let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
            let (m_own, m_crate) = (flops / median(own.clone()), flops / median(krate.clone()));
            let (f_own, f_crate) = (flops / fastest(&own), flops / fastest(&krate));
            println!(
                "| {label} | {threads} | {m_own:.1} | {m_crate:.1} | {:.2} | {f_own:.1} | {f_crate:.1} | {:.2} |",
                m_own / m_crate,
                f_own / f_crate
            );
        }
    }
}
