//! The `brrr` command-line tool.

use brrr::bench;
use brrr::recompute;
use brrr::sample::{self, SampleArgs};
use brrr::train::{self, TrainArgs};
use brrr_backend::DType;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod data_cmd;
mod perf_cmd;
mod plan_cmd;

#[derive(Parser)]
#[command(
    name = "brrr",
    version,
    about = "Deep-learning training on GPUs, understood and fast"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a small GPT on the shipped corpus (or --corpus FILE).
    Train(Box<TrainArgs>),
    /// Fine-tune a trained run on new text: every weight, or LoRA adapters beside
    /// frozen weights (--lora-rank).
    Finetune(Box<brrr::finetune::FinetuneArgs>),
    /// Generate text from a trained run.
    Sample(SampleArgs),
    /// Continue several prompts at once with the serving engine (paged KV cache,
    /// continuous batching); prints each text, then what the engine did.
    Generate(brrr::generate::GenerateArgs),
    /// Serve a trained run over HTTP: an OpenAI-compatible /v1/completions (streaming
    /// too), /health and /metrics, until Ctrl-C or SIGTERM.
    Serve(brrr::serve_cmd::ServeArgs),
    /// Benchmarks that print tables.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Place ops on a GPU's roofline: compute-, memory- or overhead-bound.
    Roofline(perf_cmd::RooflineArgs),
    /// Estimate training memory, time, or communication cost.
    Estimate(perf_cmd::EstimateArgs),
    /// Choose the parallel layout for a model and a cluster: every dp × tp × pp with
    /// its options that fits, ranked by predicted step time, and why the rest do not.
    Plan(Box<plan_cmd::PlanArgs>),
    /// Start N ranks of a brrr command on this machine (torchrun's environment).
    Launch(brrr::launch::LaunchArgs),
    /// Mixed-precision numerics: f16/bf16 ranges, the autocast policy, and a run's
    /// gradients against f16's range before and after loss scaling (SVG).
    Numerics(brrr::numerics::NumericsArgs),
    /// Activation recomputation: explore a plan, compare strategies.
    #[command(subcommand)]
    Recompute(RecomputeCommand),
    /// Prepare training data.
    #[command(subcommand)]
    Data(DataCommand),
    /// Pipeline parallelism: plan and draw a schedule, compare schedules measured.
    #[command(subcommand)]
    Pipeline(PipelineCommand),
    /// Checkpoints: consolidate a data-parallel run's shards into one file.
    #[command(subcommand)]
    Ckpt(brrr::ckpt_cmd::CkptCommand),
}

#[derive(Subcommand)]
enum PipelineCommand {
    /// A schedule's order per stage, its simulated timeline (SVG), bubble and memory.
    Plan(brrr::pipeline_cmd::PlanArgs),
    /// Run every schedule on in-process stages: measured idle fraction and
    /// activations in flight beside the simulator and theory.
    Compare(brrr::pipeline_cmd::CompareArgs),
}

#[derive(Subcommand)]
enum RecomputeCommand {
    /// For a model and a strategy or budget: what the forward keeps, the extra compute,
    /// and the memory through forward and backward, predicted and measured (CPU).
    Plan(recompute::PlanArgs),
    /// Train a few steps with each strategy on the default GPT and a deeper one, in
    /// one process: activation peak (measured and predicted) and step time.
    Compare(recompute::CompareArgs),
}

#[derive(Subcommand)]
enum DataCommand {
    /// Tokenize text files or JSON lines into llm.c-format token shards.
    Prepare(data_cmd::PrepareArgs),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// f32 GEMM throughput: against this machine's peak (cpu), per kernel version
    /// (wgpu, cuda).
    Gemm(BenchGemmArgs),
    /// The overhead-bound regime on wgpu: time per dispatch of a tiny element-wise op
    /// versus size, and where it becomes bandwidth-bound.
    Overhead(BenchOverheadArgs),
    /// Reductions with few outputs on wgpu (a bias gradient, a whole gradient's sum): the
    /// one-pass kernels against the split into partial results.
    Reduce(BenchReduceArgs),
    /// Collectives in the manner of nccl-tests: time, algbw, busbw, #wrong per size and
    /// algorithm, alpha-beta fit next to brrr-perf's model.
    Collectives(brrr::bench_collectives::BenchCollectivesArgs),
    /// Step time, tokens/s and memory of one training step in f32, bf16 and fp16
    /// (`brrr train --amp`).
    Amp(brrr::amp_bench::AmpBenchArgs),
    /// Speculative decoding with a draft run, for several k: acceptance rate, tokens per
    /// target forward and speed-up, next to the formulas.
    Speculative(brrr::spec_bench::SpecBenchArgs),
    /// Weight-only quantization of a run (int8, int4, fp8): the weights' bytes and the
    /// validation perplexity of each format against the model as trained.
    Quant(brrr::quant_bench::QuantBenchArgs),
    /// A load generator for brrr serve: Poisson arrivals at several rates; throughput,
    /// TTFT and TPOT p50/p99, goodput, and a latency-against-throughput SVG.
    Serve(brrr::serve_bench::ServeBenchArgs),
    /// The serving engine's decode steps at several batch sizes on any backend: tokens/s
    /// next to the bound memory bandwidth sets.
    Decode(brrr::decode_bench::DecodeBenchArgs),
    /// The CPU ceiling MFU divides by, measured several times: the FMA loop (quick and
    /// stable timing) and the best GEMM, each with its spread.
    Peak(brrr::peak_bench::PeakBenchArgs),
}

#[derive(clap::Args)]
struct BenchOverheadArgs {
    /// Element counts to time.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1 << 8, 1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24])]
    sizes: Vec<usize>,
    /// Dispatches per timing.
    #[arg(long, default_value_t = 64)]
    dispatches: usize,
}

#[derive(clap::Args)]
struct BenchReduceArgs {
    /// Rows of the column sum (default: a GPT-2 small bias gradient, 8 x 1024 tokens).
    #[arg(long, default_value_t = 8192)]
    rows: usize,
    /// Columns of the column sum (GPT-2 small's width).
    #[arg(long, default_value_t = 768)]
    cols: usize,
    /// Elements of the row summed to one value.
    #[arg(long, default_value_t = 1 << 24)]
    row: usize,
}

#[derive(clap::Args)]
struct BenchGemmArgs {
    #[arg(long, value_enum, default_value = "cpu")]
    backend: train::BackendKind,
    /// Square sizes to time.
    #[arg(long, value_delimiter = ',', default_values_t = vec![256, 512, 1024, 2048])]
    sizes: Vec<usize>,
    /// Timed repetitions per size (the median is reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// CPU: go on timing past `--reps` until this many seconds of work per size, so a
    /// short stall of a shared machine falls in a minority of timings.
    #[arg(long, default_value_t = 0.5, value_parser = perf_cmd::non_negative_number)]
    min_seconds: f64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Train(args) => run_train(&args),
        Command::Finetune(args) => brrr::finetune::train_args(&args).and_then(|a| run_train(&a)),
        Command::Sample(args) => sample::run(&args).and_then(|text| {
            perf_cmd::write_stdout(&format!("{text}\n"))
                .map_err(|e| brrr_backend::Error::io("writing the sample to stdout", e))
        }),
        Command::Generate(args) => brrr::generate::run(&args).and_then(|g| {
            let text = g.texts.join("\n\n");
            // A closed stderr loses the summary, not the texts.
            let line = format!("{}\n", g.summary());
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            perf_cmd::write_stdout(&format!("{text}\n"))
                .map_err(|e| brrr_backend::Error::io("writing the texts to stdout", e))
        }),
        Command::Serve(args) => brrr::serve_cmd::run(&args, &mut |url| {
            eprintln!(
                "serving {} at {url}: POST /v1/completions, GET /health, GET /metrics \
                 (Ctrl-C or SIGTERM stops)",
                args.dir.display()
            )
        }),
        Command::Bench(BenchCommand::Gemm(args)) => run_bench_gemm(&args),
        Command::Bench(BenchCommand::Overhead(args)) => run_bench_overhead(&args),
        Command::Bench(BenchCommand::Reduce(args)) => run_bench_reduce(&args),
        Command::Bench(BenchCommand::Amp(args)) => run_bench_amp(&args),
        Command::Bench(BenchCommand::Decode(args)) => run_bench_decode(&args),
        Command::Bench(BenchCommand::Peak(args)) => brrr::peak_bench::measure(&args)
            .and_then(|runs| say(format_args!("{}", brrr::peak_bench::table(&runs)))),
        Command::Bench(BenchCommand::Serve(args)) => {
            let mut progress = |what: &str| eprintln!("{what}");
            brrr::serve_bench::run(&args, &mut progress).and_then(|rows| {
                say(format_args!(
                    "{}",
                    brrr::serve_bench::table(&rows).trim_end()
                ))
            })
        }
        Command::Bench(BenchCommand::Quant(args)) => {
            let mut progress = |what: &str| eprintln!("measuring {what}");
            brrr::quant_bench::run(&args, &mut progress).and_then(|rows| {
                say(format_args!(
                    "{}",
                    brrr::quant_bench::table(&rows).trim_end()
                ))
            })
        }
        Command::Bench(BenchCommand::Speculative(args)) => {
            let mut progress = |what: &str| eprintln!("measuring {what}");
            brrr::spec_bench::run(&args, &mut progress)
                .and_then(|b| say(format_args!("{}", brrr::spec_bench::table(&b).trim_end())))
        }
        Command::Data(DataCommand::Prepare(args)) => data_cmd::run_prepare(&args).and_then(|r| {
            perf_cmd::write_stdout(&r.to_string())
                .map_err(|e| brrr_backend::Error::io("writing the summary to stdout", e))
        }),
        Command::Roofline(args) => perf_cmd::run_roofline(&args).map_err(other),
        Command::Estimate(args) => match &args.command {
            perf_cmd::EstimateCommand::Pipeline(a) => run_estimate_pipeline(a),
            _ => perf_cmd::run_estimate(&args).map_err(other),
        },
        Command::Plan(args) => plan_cmd::run(&args).map_err(other),
        Command::Launch(args) => brrr::launch::run(&args),
        Command::Ckpt(cmd) => brrr::ckpt_cmd::run(&cmd).and_then(|t| say(format_args!("{t}"))),
        Command::Bench(BenchCommand::Collectives(args)) => brrr::bench_collectives::run(&args)
            .and_then(|text| match text.is_empty() {
                true => Ok(()),
                false => say(format_args!("{}", text.trim_end_matches('\n'))),
            }),
        Command::Numerics(args) => brrr::numerics::run(&args).and_then(|text| {
            perf_cmd::write_stdout(&text)
                .map_err(|e| brrr_backend::Error::io("writing the report to stdout", e))
        }),
        Command::Recompute(RecomputeCommand::Plan(args)) => {
            recompute::run_plan(&args).and_then(|text| say(format_args!("{text}")))
        }
        Command::Pipeline(PipelineCommand::Plan(args)) => brrr::pipeline_cmd::run_plan(&args)
            .and_then(|text| say(format_args!("{}", text.trim_end()))),
        Command::Pipeline(PipelineCommand::Compare(args)) => brrr::pipeline_cmd::run_compare(&args)
            .and_then(|rows| {
                say(format_args!(
                    "{}",
                    brrr::pipeline_cmd::compare_table(&rows).trim_end()
                ))
            }),
        Command::Recompute(RecomputeCommand::Compare(args)) => recompute::run_compare(&args)
            .and_then(|rows| say(format_args!("{}", recompute::compare_table(&rows)))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes one line of a report to stdout. A reader that closed the pipe early
/// (`brrr bench gemm | head`) has what it wanted: the command stops there and succeeds,
/// instead of panicking as `println!` does (Rust ignores SIGPIPE).
fn say(line: std::fmt::Arguments<'_>) -> brrr_backend::Result<()> {
    use std::io::Write;
    match writeln!(std::io::stdout().lock(), "{line}") {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other.map_err(|e| brrr_backend::Error::io("writing to stdout", e)),
    }
}

fn run_train(args: &TrainArgs) -> brrr_backend::Result<()> {
    let summary = train::run(args)?;
    // Under a launcher every rank returns a summary; rank 0 speaks for the run.
    let rank = brrr_collectives::env::LaunchEnv::from_env().map_or(0, |env| env.rank);
    if rank == 0 {
        say(format_args!("{}", summary.to_string().trim_end()))?;
    }
    Ok(())
}

fn run_bench_amp(args: &brrr::amp_bench::AmpBenchArgs) -> brrr_backend::Result<()> {
    use brrr::amp_bench::{run_on, table};
    let rows = match args.backend {
        train::BackendKind::Cpu => run_on(&brrr_cpu::CpuBackend::new(), args)?,
        #[cfg(feature = "cuda")]
        train::BackendKind::Cuda => run_on(&brrr_cuda::CudaBackend::new(0)?, args)?,
        #[cfg(feature = "wgpu")]
        train::BackendKind::Wgpu => run_on(&brrr_wgpu::WgpuBackend::new_blocking()?, args)?,
        #[allow(unreachable_patterns)]
        other => return Err(train::not_built(other)),
    };
    say(format_args!("{}", table(&rows)))
}

fn run_bench_decode(args: &brrr::decode_bench::DecodeBenchArgs) -> brrr_backend::Result<()> {
    use brrr::decode_bench::{run_on, table};
    let mut progress = |what: &str| eprintln!("measuring {what}");
    let bench = match args.backend {
        train::BackendKind::Cpu => run_on(&brrr_cpu::CpuBackend::new(), args, &mut progress)?,
        #[cfg(feature = "cuda")]
        train::BackendKind::Cuda => run_on(&brrr_cuda::CudaBackend::new(0)?, args, &mut progress)?,
        #[cfg(feature = "wgpu")]
        train::BackendKind::Wgpu => run_on(
            &brrr_wgpu::WgpuBackend::new_blocking()?,
            args,
            &mut progress,
        )?,
        #[allow(unreachable_patterns)]
        other => return Err(train::not_built(other)),
    };
    say(format_args!("{}", table(&bench).trim_end()))
}

fn run_bench_gemm(args: &BenchGemmArgs) -> brrr_backend::Result<()> {
    match args.backend {
        train::BackendKind::Cpu => bench_gemm_cpu(args),
        #[cfg(feature = "cuda")]
        train::BackendKind::Cuda => bench_gemm_cuda(args),
        #[cfg(feature = "wgpu")]
        train::BackendKind::Wgpu => bench_gemm_wgpu(args),
        #[allow(unreachable_patterns)]
        other => Err(train::not_built(other)),
    }
}

#[cfg(feature = "wgpu")]
fn wgpu_backend() -> brrr_backend::Result<brrr_wgpu::WgpuBackend> {
    let b = brrr_wgpu::WgpuBackend::new_blocking()?;
    say(format_args!(
        "backend: wgpu ({})",
        brrr_backend::Backend::info(&b).device
    ))?;
    if brrr_backend::Backend::info(&b).device.contains("llvmpipe") {
        say(format_args!(
            "note: llvmpipe/lavapipe is Vulkan emulated on the CPU: these are not GPU numbers"
        ))?;
    }
    say(format_args!(""))?;
    Ok(b)
}

/// Each WGSL matmul version (naive, tiled, register-blocked, vec4) at each size.
#[cfg(feature = "wgpu")]
fn bench_gemm_wgpu(args: &BenchGemmArgs) -> brrr_backend::Result<()> {
    let b = wgpu_backend()?;
    let rows = brrr_wgpu::bench::bench_gemm(
        &b,
        &args.sizes,
        &brrr_wgpu::MatmulKernel::ALL,
        0.2 * args.reps as f64,
    )?;
    say(format_args!(
        "{:<22} {:>6} {:>10} {:>9}",
        "kernel", "n", "time (ms)", "GFLOP/s"
    ))?;
    for r in rows {
        say(format_args!(
            "{:<22} {:>6} {:>10.3} {:>9.1}",
            r.kernel,
            r.size,
            r.seconds * 1e3,
            r.rate
        ))?;
    }
    Ok(())
}

#[cfg(feature = "wgpu")]
fn run_bench_overhead(args: &BenchOverheadArgs) -> brrr_backend::Result<()> {
    let b = wgpu_backend()?;
    let rows = brrr_wgpu::bench::bench_overhead(&b, &args.sizes, args.dispatches, 0.2)?;
    say(format_args!(
        "{:<16} {:>10} {:>14} {:>9}",
        "submission", "elements", "µs / dispatch", "GB/s"
    ))?;
    for r in &rows {
        say(format_args!(
            "{:<16} {:>10} {:>14.2} {:>9.2}",
            r.kernel,
            r.size,
            r.seconds * 1e6,
            r.rate
        ))?;
    }
    for k in ["submit_per_op", "one_submission"] {
        match brrr_wgpu::bench::overhead_crossover(&rows, k) {
            Some(n) => say(format_args!(
                "{k}: overhead-bound below ~{n} elements; bandwidth-bound above"
            ))?,
            None => say(format_args!("{k}: overhead-bound at every size measured"))?,
        }
    }
    Ok(())
}

#[cfg(not(feature = "wgpu"))]
fn run_bench_overhead(_: &BenchOverheadArgs) -> brrr_backend::Result<()> {
    Err(train::not_built(train::BackendKind::Wgpu))
}

#[cfg(feature = "wgpu")]
fn run_bench_reduce(args: &BenchReduceArgs) -> brrr_backend::Result<()> {
    let b = wgpu_backend()?;
    let table = brrr_wgpu::bench::bench_reduce(&b, [args.rows, args.cols], args.row, 0.3)?;
    say(format_args!(
        "{:<20} {:>10} {:>12} {:>9} {:>9}",
        "reduction", "elements", "µs", "GB/s", "speed-up"
    ))?;
    for pair in table.chunks(2) {
        for r in pair {
            say(format_args!(
                "{:<20} {:>10} {:>12.1} {:>9.2} {:>8.2}x",
                r.kernel,
                r.size,
                r.seconds * 1e6,
                r.rate,
                pair[0].seconds / r.seconds
            ))?;
        }
    }
    Ok(())
}

#[cfg(not(feature = "wgpu"))]
fn run_bench_reduce(_: &BenchReduceArgs) -> brrr_backend::Result<()> {
    Err(train::not_built(train::BackendKind::Wgpu))
}

fn bench_gemm_cpu(args: &BenchGemmArgs) -> brrr_backend::Result<()> {
    use brrr_cpu::GemmKernel;
    let backend = brrr_cpu::CpuBackend::new();
    let kernel = backend.gemm_kernel();
    // The other kernel, timed beside the default as its baseline.
    let other = match kernel {
        GemmKernel::Own => Some(GemmKernel::GemmCrate),
        GemmKernel::GemmCrate => GemmKernel::own_available().then_some(GemmKernel::Own),
    };
    let baseline = other
        .map(|k| backend.clone().with_gemm_kernel(k))
        .transpose()?;
    // "% peak" against the measured FMA throughput; the nominal clock's peak as fallback.
    let peak = brrr_perf::machine::cpu_fp32_peak_measured();
    say(format_args!(
        "backend: cpu ({}), GEMM kernel: {} (chosen for this CPU)",
        brrr_backend::Backend::info(&backend).device,
        kernel.name()
    ))?;
    if let Some(m) = &peak.measurement {
        say(format_args!("fp32 peak: {m}"))?;
    }
    say(format_args!(
        "nominal peak: {}{}",
        peak.nominal,
        if peak.measured {
            ""
        } else {
            " (used: nothing measured)"
        }
    ))?;
    say(format_args!(""))?;
    let other_name = other.map_or("", GemmKernel::name);
    say(format_args!(
        "{:>6}  {:>10}  {:>9}  {:>7}  {:>12}  {:>6}",
        "n", "time (ms)", "GFLOP/s", "% peak", other_name, "ratio"
    ))?;
    let mut best: Option<bench::GemmRow> = None;
    for &n in &args.sizes {
        let time = |b: &brrr_cpu::CpuBackend| {
            bench::gemm(b, &[n], DType::F32, args.reps, args.min_seconds)
                .map(|mut rows| rows.remove(0))
        };
        let r = time(&backend)?;
        let o = baseline.as_ref().map(time).transpose()?;
        let (o_rate, ratio) = o.map_or((String::new(), String::new()), |o| {
            (
                format!("{:.1}", o.gflops),
                format!("{:.2}", r.gflops / o.gflops),
            )
        });
        say(format_args!(
            "{:>6}  {:>10.3}  {:>9.1}  {:>6.1}%  {o_rate:>12}  {ratio:>6}",
            r.n,
            r.seconds * 1e3,
            r.gflops,
            100.0 * r.gflops * 1e9 / peak.flops
        ))?;
        if best.as_ref().is_none_or(|b| r.gflops > b.gflops) {
            best = Some(r);
        }
    }
    // MFU divides by the larger of the loop and the best GEMM (train::mfu_peak).
    if let Some(best) = best {
        say(format_args!(
            "\nbest GEMM: {:.1} GFLOP/s (n = {}); MFU's ceiling, the larger of it and the FMA peak: {:.1} GFLOP/s",
            best.gflops,
            best.n,
            (best.gflops * 1e9).max(peak.flops) / 1e9
        ))?;
    }
    Ok(())
}

/// cuBLAS and each of brrr's own GEMM versions, per dtype, at each size.
#[cfg(feature = "cuda")]
fn bench_gemm_cuda(args: &BenchGemmArgs) -> brrr_backend::Result<()> {
    let cuda = brrr_cuda::CudaBackend::new(0)?;
    say(format_args!(
        "backend: cuda ({})",
        brrr_backend::Backend::info(&cuda).device
    ))?;
    say(format_args!(""))?;
    say(format_args!(
        "{:<28} {:>6} {:>16} {:>10} {:>12} {:>9}",
        "kernel", "dtype", "size", "time (ms)", "rate", "vs base"
    ))?;
    for &n in &args.sizes {
        let cfg = brrr_cuda::bench::GemmBench {
            n,
            reps: args.reps,
            ..Default::default()
        };
        for r in brrr_cuda::bench::gemm(&cuda, &cfg)? {
            let base = r
                .fraction_of_baseline
                .map(|f| format!("{:.1}%", f * 100.0))
                .unwrap_or_default();
            say(format_args!(
                "{:<28} {:>6} {:>16} {:>10.3} {:>8.1} {:<3} {:>9} {}",
                r.name,
                r.dtype.to_string(),
                r.size,
                r.seconds * 1e3,
                r.rate.value(),
                r.rate.unit(),
                base,
                r.note
            ))?;
        }
    }
    Ok(())
}

fn other(e: Box<dyn std::error::Error>) -> brrr_backend::Error {
    brrr_backend::Error::Parse(e.to_string())
}

/// `brrr estimate pipeline`: brrr-pp's theory and simulator per schedule, with brrr-perf's
/// activation bytes per layer.
fn run_estimate_pipeline(a: &perf_cmd::PipelineEstimateArgs) -> brrr_backend::Result<()> {
    let per_layer = perf_cmd::pipeline_per_layer(a).map_err(other)?;
    let text = brrr::pipeline_cmd::estimate_table(
        a.pp,
        a.micro_batches,
        a.chunks,
        a.stage_time,
        per_layer,
    )?;
    perf_cmd::write_stdout(&text).map_err(|e| brrr_backend::Error::io("writing to stdout", e))
}
