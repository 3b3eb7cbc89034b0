//! `brrr bench peak`: how far the CPU ceiling that MFU and "% of peak" divide by moves
//! between measurements on one machine.
//!
//! Each run measures the FMA loop twice, with [`FmaTiming::QUICK`] (the earlier setting)
//! and [`FmaTiming::default`] (the one used), and brrr-cpu's best f32 GEMM
//! ([`crate::bench::cpu_gemm_ceiling`]'s sizes, measured afresh). Between runs the
//! process sleeps, so each run starts on idle cores as a new process does. The table ends
//! in each column's spread, max / min: 1.00× is a figure that does not move.

use crate::bench::{GemmRow, measure_cpu_gemm_ceiling};
use brrr_backend::{Error, Result};
use brrr_perf::machine::{FmaTiming, MeasuredFmaPeak, measure_cpu_fma_peak_timed};
use std::fmt::Write;

/// `brrr bench peak`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct PeakBenchArgs {
    /// Measurements of each figure.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Seconds of idle before each run.
    #[arg(long, default_value_t = 1.0, value_parser = seconds)]
    pub pause: f64,
}

fn seconds(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=60.0).contains(&v) => Ok(v),
        _ => Err(format!("{s} is not a number of seconds from 0 to 60")),
    }
}

/// One run's figures.
#[derive(Clone, Debug)]
pub struct PeakRun {
    /// The FMA loop timed with [`FmaTiming::QUICK`].
    pub quick: Option<MeasuredFmaPeak>,
    /// The FMA loop timed with [`FmaTiming::default`].
    pub stable: Option<MeasuredFmaPeak>,
    /// brrr-cpu's faster GEMM of [`crate::bench::CEILING_SIZES`].
    pub gemm: Option<GemmRow>,
}

impl PeakRun {
    /// The ceiling MFU divides by: the larger of the stable FMA peak and the best GEMM.
    pub fn ceiling(&self) -> Option<f64> {
        let fma = self.stable.as_ref().map(MeasuredFmaPeak::peak_flops);
        let gemm = self.gemm.as_ref().map(|g| g.gflops * 1e9);
        match (fma, gemm) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Measures `args.runs` runs on the CPU backend.
pub fn measure(args: &PeakBenchArgs) -> Result<Vec<PeakRun>> {
    if args.runs == 0 || args.runs > 100 {
        return Err(Error::invalid(
            "bench peak",
            format!("--runs {} must be 1 to 100", args.runs),
        ));
    }
    let cpu = brrr_cpu::CpuBackend::new();
    let mut runs = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        std::thread::sleep(std::time::Duration::from_secs_f64(args.pause));
        let quick = measure_cpu_fma_peak_timed(FmaTiming::QUICK);
        let stable = measure_cpu_fma_peak_timed(FmaTiming::default());
        let gemm = measure_cpu_gemm_ceiling(&cpu)?;
        runs.push(PeakRun {
            quick,
            stable,
            gemm,
        });
    }
    Ok(runs)
}

fn peak(m: &Option<MeasuredFmaPeak>) -> Option<f64> {
    m.as_ref().map(MeasuredFmaPeak::peak_flops)
}

/// `max / min` of the figures present, `None` with fewer than one.
pub fn spread(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = values.into_iter().flatten().collect();
    let max = v.iter().copied().fold(f64::NAN, f64::max);
    let min = v.iter().copied().fold(f64::NAN, f64::min);
    (min > 0.0).then(|| max / min)
}

fn cell(flops: Option<f64>) -> String {
    flops.map_or("n/a".into(), |f| format!("{:.1}", f / 1e9))
}

/// The markdown table: one row per run, then each column's spread.
pub fn table(runs: &[PeakRun]) -> String {
    let quick = FmaTiming::QUICK;
    let stable = FmaTiming::default();
    let mut s = String::new();
    let threads = runs
        .iter()
        .find_map(|r| r.stable.as_ref().map(|m| m.threads))
        .unwrap_or(1);
    let _ = writeln!(
        s,
        "CPU ceiling, GFLOP/s, {} runs in one process ({threads} threads; FMA figures are \
         the larger of all threads at once and {threads} x one thread)\n",
        runs.len()
    );
    let _ = writeln!(
        s,
        "| run | FMA loop, quick ({:.0} ms, best of {}) | FMA loop ({:.0} ms, best of {}, warm-up) | best GEMM (n) | ceiling: max(FMA, GEMM) |",
        quick.min_seconds * 1e3,
        quick.runs,
        stable.min_seconds * 1e3,
        stable.runs
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|");
    for (i, r) in runs.iter().enumerate() {
        let gemm = r
            .gemm
            .as_ref()
            .map_or("n/a".into(), |g| format!("{:.1} ({})", g.gflops, g.n));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {gemm} | {} |",
            i + 1,
            cell(peak(&r.quick)),
            cell(peak(&r.stable)),
            cell(r.ceiling())
        );
    }
    let x = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.2}x"));
    let _ = writeln!(
        s,
        "| spread (max/min) | {} | {} | {} | {} |",
        x(spread(runs.iter().map(|r| peak(&r.quick)))),
        x(spread(runs.iter().map(|r| peak(&r.stable)))),
        x(spread(
            runs.iter().map(|r| r.gemm.as_ref().map(|g| g.gflops))
        )),
        x(spread(runs.iter().map(PeakRun::ceiling)))
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_max_over_min_of_the_figures_present() {
        assert_eq!(
            spread([Some(100.0), None, Some(200.0), Some(150.0)]),
            Some(2.0)
        );
        assert_eq!(spread([None, None]), None);
        assert_eq!(spread([Some(0.0), Some(1.0)]), None);
    }

    #[test]
    fn the_ceiling_is_the_larger_figure() {
        let fma = MeasuredFmaPeak {
            isa: "AVX2+FMA",
            lanes: 8,
            single_thread_flops: 90e9,
            all_threads_flops: 170e9,
            threads: 2,
        };
        let gemm = |gflops| GemmRow {
            n: 1024,
            seconds: 1.0,
            gflops,
        };
        let run = |stable, g| PeakRun {
            quick: None,
            stable,
            gemm: g,
        };
        assert_eq!(
            run(Some(fma.clone()), Some(gemm(150.0))).ceiling(),
            Some(180e9)
        );
        assert_eq!(run(Some(fma), Some(gemm(190.0))).ceiling(), Some(190e9));
        assert_eq!(run(None, Some(gemm(190.0))).ceiling(), Some(190e9));
        assert_eq!(run(None, None).ceiling(), None);
        let t = table(&[run(None, Some(gemm(100.0))), run(None, Some(gemm(120.0)))]);
        assert!(
            t.contains("| spread (max/min) | n/a | n/a | 1.20x | 1.20x |"),
            "{t}"
        );
    }
}
