//! `brrr train --profile`: the run on a [`ProfiledBackend`] (each rank's, in a parallel
//! layout), then a table of where one rank's steps' time went, op kind by op kind,
//! judged against this machine's roofline.
//!
//! The trainer's phase spans and the backend's op spans go into one tracer, so the
//! table is computed from the op spans that lie inside the `step` spans (evaluation,
//! checkpoints and the model's initialisation are left out), and `--trace` shows the ops
//! nested inside `forward`, `backward` and `adamw`.

use crate::train::{self, BackendKind, Summary, TrainArgs, layout_from_args};
use brrr_amp::AmpMode;
use brrr_backend::{Backend, BackendInfo, Error, Result};
use brrr_cpu::CpuBackend;
use brrr_perf::roofline::Roofline;
use brrr_perf::trace::Tracer;
use brrr_profile::{Profile, ProfiledBackend};
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;

/// Runs `brrr train --profile` on `args.backend` and prints the table.
pub fn run(args: &TrainArgs) -> Result<Summary> {
    match args.backend {
        BackendKind::Cpu => run_on(&|_| Ok(CpuBackend::new()), args),
        // The local rank's GPU, as an unprofiled run's ranks take them.
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => run_on(
            &|r| brrr_cuda::CudaBackend::new(r.device % brrr_cuda::device_count()?.max(1)),
            args,
        ),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => run_on(&|_| brrr_wgpu::WgpuBackend::new_blocking(), args),
        #[allow(unreachable_patterns)]
        other => Err(train::not_built(other)),
    }
}

/// Trains with every rank's backend (from `make`) wrapped in a [`ProfiledBackend`],
/// then prints [`report`] of the observed rank (world rank 0 in-process; this
/// process's rank under a launcher). The other ranks' wrappers record nothing.
pub fn run_on<B: Backend>(
    make: &(dyn Fn(brrr_launch::Rank) -> Result<B> + Sync),
    args: &TrainArgs,
) -> Result<Summary> {
    let tracer = Arc::new(Tracer::new());
    let observed = std::sync::Mutex::new(None);
    let profiled = |rank: brrr_launch::Rank| {
        let p = match rank.observed {
            true => ProfiledBackend::with_tracer(make(rank)?, tracer.clone())?,
            false => ProfiledBackend::unrecorded(make(rank)?),
        };
        if rank.observed
            && let Ok(mut o) = observed.lock()
        {
            *o = Some((p.info(), p.synchronizes_each_op()));
        }
        Ok(p)
    };
    let summary = train::run_on(&profiled, args, Some(tracer.clone()))?;
    let (info, synchronized) = observed
        .lock()
        .ok()
        .and_then(|mut o| o.take())
        .ok_or_else(|| Error::invalid("train --profile", "no rank was profiled"))?;
    let mut text = report(&tracer.to_chrome_value(), &info, synchronized, summary.amp);
    let world = layout_from_args(args).world();
    if world > 1 {
        let flags = layout_from_args(args).flags();
        text = format!(
            "one rank of {world} ({flags}): world rank 0 in-process, this process's rank \
             under a launcher; collectives run between its ops\n{text}"
        );
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| Error::io("writing the profile to stdout", e))?;
    Ok(summary)
}

/// The profile table of a trace written by a profiled run: the op spans inside the
/// `step` spans, after the first step when there are several (it allocates and faults
/// in memory: warm-up, as in PyTorch's profiler schedule), against [`roofline_for`] for
/// the run's precision `amp`.
pub fn report(
    trace: &serde_json::Value,
    info: &BackendInfo,
    synchronized: bool,
    amp: AmpMode,
) -> String {
    let steps = trace["traceEvents"].as_array().map_or(0, |events| {
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["name"] == "step")
            .count()
    });
    let skip = usize::from(steps > 1);
    let (profile, wall_us) = Profile::from_chrome_trace(trace, "step", skip);
    let (roofline, peak_line) = roofline_for(info, amp);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nop profile: {} step(s){} on {}",
        steps - skip,
        if skip > 0 {
            " after the first (warm-up)"
        } else {
            ""
        },
        info.device
    );
    let _ = writeln!(
        out,
        "{}",
        if synchronized {
            "each op timed to its end: the device is synchronised after every op \
             (like CUDA_LAUNCH_BLOCKING=1), which serialises the steps a little"
        } else {
            "op times are launch times (no synchronisation on this platform)"
        }
    );
    if let Some(line) = peak_line {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out);
    let label = format!("{} step(s)", steps - skip);
    out.push_str(&profile.table(wall_us, &label, roofline.as_ref()));
    // As PyTorch's `group_by_input_shape`: which of the model's products is the slow one.
    let (by_shape, _) = Profile::from_chrome_trace_by_shape(trace, "step", skip);
    let _ = writeln!(out, "\nthe {TOP_SHAPES} longest by op and shape:\n");
    out.push_str(&by_shape.top_table(TOP_SHAPES, wall_us, roofline.as_ref(), "op"));
    // As `record_function` ranges: each phase's wall time, the ops inside it and their
    // rates (no regime: a phase mixes ops of every kind).
    let (phases, _) = Profile::phases_from_chrome_trace(trace, "step", skip);
    let _ = writeln!(
        out,
        "\nby phase of the step (rates: of the ops inside it):\n"
    );
    out.push_str(&phases.top_table(usize::MAX, wall_us, None, "phase"));
    // As PyTorch's module-level view: each layer's regions over all blocks. They nest,
    // so a block's time and work hold its parts' and the shares add up to more than 100%.
    let (layers, _) = Profile::layers_from_chrome_trace(trace, "step", skip);
    if layers.total_calls() > 0 {
        let _ = writeln!(
            out,
            "\nby layer, all blocks together (regions nest: a block's time and rates \
             include its layers'):\n"
        );
        out.push_str(&layers.top_table(usize::MAX, wall_us, None, "layer"));
    }
    out
}

/// Rows of the by-shape table.
const TOP_SHAPES: usize = 10;

/// The roofline the regimes are judged against, and a line describing the CPU's peak:
/// on the CPU its measured FMA peak (nominal as the fallback) and STREAM-triad
/// bandwidth; on a GPU brrr-perf's peak for the run's precision (as [`train::mfu_peak`]:
/// the f32 vector peak, or under `--amp` the 16-bit tensor-core peak that the GEMMs run
/// at) and bandwidth, if known. One roofline judges every op: under `--amp` the
/// element-wise ops, which run on the vector units, are memory-bound against either.
pub fn roofline_for(info: &BackendInfo, amp: AmpMode) -> (Option<Roofline>, Option<String>) {
    if info.name == "cpu" {
        let peak = brrr_perf::machine::cpu_fp32_peak_measured();
        let bandwidth = brrr_perf::machine::measure_cpu_bandwidth();
        let mut line = match &peak.measurement {
            Some(m) => format!(
                "fp32 peak: {m}\n            (one thread's rate implies {:.2} GHz with {} FMA units per core)",
                m.implied_clock_ghz(peak.nominal.fma_units_per_core),
                peak.nominal.fma_units_per_core
            ),
            None => "fp32 peak: no FMA loop could be timed here".to_string(),
        };
        let _ = write!(
            line,
            "\n            nominal {:.1} GFLOP/s ({} cores × {} lanes × 2 × {} FMA units × {:.2} GHz, {}){}",
            peak.nominal.flops / 1e9,
            peak.nominal.cores,
            peak.nominal.simd_f32_lanes,
            peak.nominal.fma_units_per_core,
            peak.nominal.clock_ghz,
            peak.nominal.clock_source,
            if peak.measured {
                ""
            } else {
                ", used as the fallback"
            }
        );
        let label = if peak.measured {
            "this CPU (measured FMA peak, STREAM triad)"
        } else {
            "this CPU (nominal peak, STREAM triad)"
        };
        return (Roofline::new(label, peak.flops, bandwidth).ok(), Some(line));
    }
    let name = info.device.split(" (").next().unwrap_or_default();
    let (dtype, unit, _) = train::gpu_peak_kind(amp);
    let roofline = brrr_perf::specs::gpu_for_device(name)
        .and_then(|gpu| Roofline::for_gpu(&gpu, dtype, unit).ok());
    (roofline, None)
}
