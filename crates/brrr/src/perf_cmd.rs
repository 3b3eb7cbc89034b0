//! `brrr roofline` and `brrr estimate {memory,time,comms}`: flag parsing over brrr-perf.
//!
//! Everything computed or rendered lives in `brrr_perf::report`; this module only turns
//! flags into its inputs and prints text (default), JSON (`--json`) or an SVG (`--plot FILE`).

use brrr_perf::memory::{
    Optimizer, PipelineSchedule, Precision, Recompute, TrainingSetup, TransformerConfig,
    estimate_memory,
};
use brrr_perf::report::{self, CommsInputs, Report, TimeInputs};
use brrr_perf::roofline::parse_op;
use brrr_perf::specs::{self, DType, Unit};
use brrr_perf::table::{parse_bytes, parse_count};
use clap::{Args, Subcommand};
use std::io::{self, Write};
use std::path::PathBuf;

type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// Flags of `brrr roofline`.
#[derive(Args, Debug, Clone)]
pub struct RooflineArgs {
    /// GPU id or alias (a100, h100, b200, v100, l4, rtx-4090, this-machine, ...; see --list).
    #[arg(long, default_value = "a100")]
    pub gpu: String,
    /// List every GPU in the spec table and exit.
    #[arg(long)]
    pub list: bool,
    /// Compute dtype: fp32, tf32, bf16, fp16, fp8, int8, fp4, fp64.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Force the execution unit (tensor or vector); default: tensor cores for matmuls.
    #[arg(long)]
    pub unit: Option<String>,
    /// An op to place on the roofline (repeatable): gemm:M,N,K | gemm:B,M,N,K |
    /// elementwise:N[,FLOPS_PER_ELEM[,INPUTS[,OUTPUTS]]] | chain:N,OPS[,fused] |
    /// softmax:ROWS,COLS | layernorm:ROWS,COLS | attention:B,H,S,D[,causal][,unfused].
    #[arg(long = "op", value_name = "SPEC")]
    pub ops: Vec<String>,
    /// Measured time in microseconds of the op at the same position (repeatable).
    #[arg(long = "measured-us", value_name = "US", value_parser = positive_number)]
    pub measured_us: Vec<f64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write the roofline with the ops on it as SVG.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// Flags of `brrr estimate`.
#[derive(Args, Debug, Clone)]
pub struct EstimateArgs {
    /// What to estimate.
    #[command(subcommand)]
    pub command: EstimateCommand,
}

/// `brrr estimate` subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum EstimateCommand {
    /// Per-GPU training memory: weights, gradients, optimizer, activations (ZeRO, TP/SP/PP).
    Memory(MemoryArgs),
    /// Training FLOPs, time-to-train at an MFU, and MFU/HFU from a measured step.
    Time(TimeArgs),
    /// Collective costs (alpha-beta, bus bandwidth) and DP/TP/EP compute-vs-comms limits.
    Comms(CommsArgs),
    /// Pipeline schedules: bubble fraction, pipeline time and activations in flight
    /// per stage, for each schedule.
    Pipeline(PipelineEstimateArgs),
    /// Serving: KV-cache bytes per token, the largest batch that fits, and the decode
    /// step's bandwidth and compute bounds per batch size.
    Serve(ServeEstimateArgs),
}

/// `brrr estimate serve`.
#[derive(Args, Debug, Clone)]
pub struct ServeEstimateArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// GPU.
    #[arg(long, default_value = "h100")]
    pub gpu: String,
    /// Weight storage: bf16, fp16, fp32, fp8, int8 or int4.
    #[arg(long, default_value = "bf16")]
    pub weights: String,
    /// KV-cache storage: bf16, fp16, fp32 or fp8.
    #[arg(long, default_value = "bf16")]
    pub kv: String,
    /// Tokens each request holds [default: the model's sequence length].
    #[arg(long)]
    pub context: Option<u64>,
    /// Share of the GPU's memory for weights and cache.
    #[arg(long, default_value_t = 0.9)]
    pub memory_fraction: f64,
    /// Batch sizes to show.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 8, 64, 256])]
    pub batches: Vec<u64>,
    /// JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Bytes per element of a storage name, and whether the format exists for `what`.
fn storage_bytes(name: &str, what: &str, ints: bool) -> Result<f64, Box<dyn std::error::Error>> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "fp32" | "f32" => 4.0,
        "bf16" | "fp16" | "f16" => 2.0,
        "fp8" => 1.0,
        "int8" if ints => 1.0,
        "int4" if ints => 0.5,
        other => {
            return Err(format!(
                "unknown {what} storage {other:?}: bf16, fp16, fp32, fp8{}",
                if ints { ", int8 or int4" } else { "" }
            )
            .into());
        }
    })
}

fn run_serve(a: &ServeEstimateArgs) -> CmdResult {
    let cfg = a
        .model
        .resolve()?
        .ok_or("estimate serve needs a model: --model PRESET or --layers/--hidden/--heads")?;
    let weight_bytes = storage_bytes(&a.weights, "weight", true)?;
    let setup = brrr_perf::serve::ServeSetup {
        weight_bytes,
        kv_bytes: storage_bytes(&a.kv, "KV", false)?,
        context: a.context.unwrap_or(cfg.seq_len),
        memory_fraction: a.memory_fraction,
        compute: if weight_bytes == 4.0 {
            specs::DType::F32
        } else {
            specs::DType::Bf16
        },
    };
    let gpu = specs::gpu(&a.gpu)?;
    let e = brrr_perf::serve::estimate_serve(&cfg, &gpu, &setup, &a.batches)?;
    print(&report::serve_report(&cfg, &gpu, &e, &setup), a.json)
}

/// `brrr estimate pipeline`.
#[derive(Args, Debug, Clone)]
pub struct PipelineEstimateArgs {
    /// The model (optional: gives the activation bytes in flight per stage).
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pipeline stages.
    #[arg(long, default_value_t = 4)]
    pub pp: usize,
    /// Micro-batches per step.
    #[arg(long, default_value_t = 8)]
    pub micro_batches: usize,
    /// Chunks per stage of the interleaved schedule.
    #[arg(long, default_value_t = 2)]
    pub chunks: usize,
    /// Micro-batch size in sequences (for the activation bytes).
    #[arg(long, default_value_t = 1)]
    pub micro_batch: u64,
    /// Seconds of one micro-batch's forward and backward through one stage
    /// (F + B + W, split 1 : 1 : 1) [default: 1, i.e. times in those units].
    #[arg(long, default_value_t = 1.0)]
    pub stage_time: f64,
}

/// A transformer, by preset and/or explicit sizes (explicit sizes override the preset).
#[derive(Args, Debug, Clone, Default)]
pub struct ModelArgs {
    /// Preset: gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt3-125m, gpt3-1.3b, gpt3-6.7b,
    /// gpt3-175b, megatron-1.7b, megatron-7.5b, megatron-145b, mt-nlg-530b, megatron-1t.
    #[arg(long)]
    pub model: Option<String>,
    /// Transformer layers.
    #[arg(long)]
    pub layers: Option<u64>,
    /// Hidden size.
    #[arg(long)]
    pub hidden: Option<u64>,
    /// Attention heads.
    #[arg(long)]
    pub heads: Option<u64>,
    /// Sequence length [default with explicit sizes: 2048].
    #[arg(long)]
    pub seq_len: Option<u64>,
    /// Vocabulary size [default with explicit sizes: 50257].
    #[arg(long)]
    pub vocab: Option<u64>,
    /// MLP hidden size [default: 4 × hidden].
    #[arg(long)]
    pub ffn: Option<u64>,
    /// Untied output projection (adds V·h parameters).
    #[arg(long)]
    pub untied: bool,
}

impl ModelArgs {
    /// The configured model, or `None` if neither a preset nor layers/hidden/heads was given.
    pub fn resolve(&self) -> Result<Option<TransformerConfig>, Box<dyn std::error::Error>> {
        let mut cfg = match (&self.model, self.layers, self.hidden, self.heads) {
            (Some(name), ..) => TransformerConfig::preset(name)?,
            (None, Some(l), Some(h), Some(a)) => TransformerConfig::gpt(l, h, a, 2048, 50257),
            (None, None, None, None) => return Ok(None),
            _ => {
                return Err("give --model PRESET, or all of --layers, --hidden and --heads".into());
            }
        };
        if let Some(l) = self.layers {
            cfg.layers = l;
        }
        if let Some(h) = self.hidden {
            cfg.hidden = h;
            cfg.ffn_hidden = h
                .checked_mul(4)
                .ok_or_else(|| format!("--hidden {h} is too large (its MLP width 4h overflows)"))?;
        }
        if let Some(a) = self.heads {
            cfg.heads = a;
        }
        if let Some(s) = self.seq_len {
            cfg.seq_len = s;
        }
        if let Some(v) = self.vocab {
            cfg.vocab = v;
        }
        if let Some(f) = self.ffn {
            cfg.ffn_hidden = f;
        }
        cfg.tied_embeddings = !self.untied;
        cfg.validate()?;
        Ok(Some(cfg))
    }
}

/// Flags of `brrr estimate memory`.
#[derive(Args, Debug, Clone)]
pub struct MemoryArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Parameters N instead of a model (e.g. 7e9, 7G; 7B also means 7 billion): the
    /// model states only (weights, gradients, master weights, optimizer states), as no
    /// shape gives the activations.
    #[arg(long, value_parser = count)]
    pub params: Option<f64>,
    /// Micro-batch size in sequences.
    #[arg(long, default_value_t = 1)]
    pub micro_batch: u64,
    /// Micro-batches per optimizer step (gradient accumulation; the pipeline's m).
    #[arg(long, default_value_t = 1)]
    pub grad_accum: u64,
    /// Data-parallel degree.
    #[arg(long, default_value_t = 1)]
    pub dp: u64,
    /// Tensor-parallel degree.
    #[arg(long, default_value_t = 1)]
    pub tp: u64,
    /// Pipeline-parallel degree.
    #[arg(long, default_value_t = 1)]
    pub pp: u64,
    /// Sequence parallelism (with tensor parallelism).
    #[arg(long)]
    pub sp: bool,
    /// ZeRO stage 0-3 (sharding over the data-parallel ranks).
    #[arg(long, default_value_t = 0)]
    pub zero: u8,
    /// Activation recomputation: none, selective, full.
    #[arg(long, default_value = "none")]
    pub recompute: String,
    /// Optimizer: adam, sgd-momentum, sgd, adam8bit, galore:RANK.
    #[arg(long, default_value = "adam")]
    pub optimizer: String,
    /// Precision: mixed (16-bit weights/grads + fp32 master) or fp32.
    #[arg(long, default_value = "mixed")]
    pub precision: String,
    /// Pipeline schedule: 1f1b, gpipe, or interleaved:V (V chunks per GPU).
    #[arg(long, default_value = "1f1b")]
    pub schedule: String,
    /// The f32 master weights and optimizer states in host memory (ZeRO-Offload).
    #[arg(long)]
    pub offload: bool,
    /// LoRA fine-tuning at this rank: frozen weights, adapters trained.
    #[arg(long)]
    pub lora_rank: Option<u64>,
    /// Compare against this GPU's memory.
    #[arg(long)]
    pub gpu: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write the breakdown as an SVG bar.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// Flags of `brrr estimate time`.
#[derive(Args, Debug, Clone)]
pub struct TimeArgs {
    /// The model (for the attention term, Megatron's formula and HFU); or give --params.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Parameters N (e.g. 175e9, 175G; 175B also means 175 billion); default: counted from
    /// the model.
    #[arg(long, value_parser = count)]
    pub params: Option<f64>,
    /// Training tokens D (e.g. 300e9, 300G).
    #[arg(long, value_parser = count)]
    pub tokens: f64,
    /// GPU.
    #[arg(long, default_value = "a100")]
    pub gpu: String,
    /// Compute dtype (its matmul peak is the MFU denominator).
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// GPUs in the cluster.
    #[arg(long, default_value_t = 1)]
    pub gpus: u64,
    /// Assumed model FLOPs utilisation for the time-to-train, in (0, 1].
    #[arg(long, default_value_t = 0.4, value_parser = positive_number)]
    pub mfu: f64,
    /// Measured seconds per optimizer step (with --batch-tokens) for measured MFU/HFU.
    #[arg(long, value_parser = positive_number)]
    pub step_time: Option<f64>,
    /// Tokens per optimizer step (global batch × sequence length).
    #[arg(long, value_parser = count)]
    pub batch_tokens: Option<f64>,
    /// Measured cluster throughput in tokens/s (instead of --step-time/--batch-tokens).
    #[arg(long, value_parser = count)]
    pub tokens_per_sec: Option<f64>,
    /// Recomputation in the measured run, for HFU: none, selective, full.
    #[arg(long, default_value = "none")]
    pub recompute: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `brrr estimate comms`.
#[derive(Args, Debug, Clone)]
pub struct CommsArgs {
    /// GPU (its NVLink/PCIe and network bandwidths are used).
    #[arg(long, default_value = "h100")]
    pub gpu: String,
    /// Ranks in the collective (at least 2).
    #[arg(long, default_value_t = 8)]
    pub gpus: u64,
    /// Message size in bytes (e.g. 1e9, 1GB = 1e9 bytes, 256MiB); default: bf16 gradients of
    /// --params.
    #[arg(long, value_parser = size_in_bytes)]
    pub bytes: Option<f64>,
    /// Parameters whose bf16 gradients are the message (2 bytes each).
    #[arg(long, value_parser = count)]
    pub params: Option<f64>,
    /// Compute dtype for the peak C.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Model preset for d_model, d_ff and params.
    #[arg(long)]
    pub model: Option<String>,
    /// Model width D.
    #[arg(long, value_parser = positive_number)]
    pub d_model: Option<f64>,
    /// MLP width F.
    #[arg(long, value_parser = positive_number)]
    pub d_ff: Option<f64>,
    /// Tokens per GPU per step, to judge data parallelism.
    #[arg(long, value_parser = count)]
    pub tokens_per_gpu: Option<f64>,
    /// Mixture of experts: number of experts E (with --top-k).
    #[arg(long)]
    pub experts: Option<u64>,
    /// Mixture of experts: experts per token k.
    #[arg(long)]
    pub top_k: Option<u64>,
    /// Per-message latency α in microseconds, >= 0 (default 2 intra-node, 5 inter-node).
    #[arg(long, value_parser = non_negative_number)]
    pub alpha_us: Option<f64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Flag parser: a count (`175e9`, `175G`, `8k`) that is positive and finite.
fn count(s: &str) -> Result<f64, String> {
    let v = parse_count(s).map_err(|e| e.to_string())?;
    positive(v)
}

/// Flag parser: a size in bytes (`1e9`, `1GB`, `256MiB`) that is positive and finite.
fn size_in_bytes(s: &str) -> Result<f64, String> {
    let v = parse_bytes(s).map_err(|e| e.to_string())?;
    positive(v)
}

/// Flag parser: a plain number, positive and finite (no NaN, no inf).
fn positive_number(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    positive(v)
}

/// Flag parser: a plain number, finite and >= 0.
pub(crate) fn non_negative_number(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("must be finite and >= 0, got {v}"))
    }
}

fn positive(v: f64) -> Result<f64, String> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("must be positive and finite, got {v}"))
    }
}

/// Writes `text` to stdout. A reader that closed the pipe early (`brrr estimate ... | head`)
/// has everything it wanted, so that is not an error: the rest is dropped and the command
/// still succeeds. (Rust ignores SIGPIPE, so `println!` would panic on the closed pipe.)
pub fn write_stdout(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

fn print(report: &Report, json: bool) -> CmdResult {
    let text = if json {
        format!("{}\n", report.to_json_string())
    } else {
        report.to_string()
    };
    Ok(write_stdout(&text)?)
}

fn write_plot(path: &PathBuf, svg: &str, json: bool) -> CmdResult {
    brrr_perf::plot::write_svg(path, svg)?;
    if !json {
        write_stdout(&format!("\nwrote {}\n", path.display()))?;
    }
    Ok(())
}

/// Runs `brrr roofline`.
pub fn run_roofline(args: &RooflineArgs) -> CmdResult {
    if args.list {
        print(&report::gpu_list(&specs::gpus()), args.json)?;
        return Ok(());
    }
    let gpu = specs::gpu(&args.gpu)?;
    let dtype = DType::parse(&args.dtype)?;
    let unit = args.unit.as_deref().map(Unit::parse).transpose()?;
    let ops = args
        .ops
        .iter()
        .map(|s| parse_op(s, dtype))
        .collect::<Result<Vec<_>, _>>()?;
    let measured: Vec<Option<f64>> = args.measured_us.iter().map(|us| Some(us * 1e-6)).collect();
    let analysis = report::roofline_analysis(&gpu, dtype, unit, &ops, &measured)?;
    if ops.is_empty() {
        print(&report::gpu_detail(&gpu), args.json)?;
    } else {
        print(&analysis.report(), args.json)?;
    }
    if let Some(path) = &args.plot {
        write_plot(path, &analysis.svg()?, args.json)?;
    }
    Ok(())
}

/// Runs `brrr estimate memory|time|comms`.
pub fn run_estimate(args: &EstimateArgs) -> CmdResult {
    match &args.command {
        EstimateCommand::Memory(a) => run_memory(a),
        EstimateCommand::Time(a) => run_time(a),
        EstimateCommand::Comms(a) => run_comms(a),
        EstimateCommand::Serve(a) => run_serve(a),
        // It simulates brrr-pp's schedules, which this module does not link: the
        // binary routes it to `brrr::pipeline_cmd::estimate_table` with `pipeline_per_layer`.
        EstimateCommand::Pipeline(_) => Err(
            "estimate pipeline runs in the brrr binary (it simulates brrr-pp's schedules)".into(),
        ),
    }
}

fn parse_schedule(s: &str) -> Result<PipelineSchedule, Box<dyn std::error::Error>> {
    let s = s.trim().to_ascii_lowercase();
    Ok(match s.as_str() {
        "1f1b" => PipelineSchedule::OneFOneB,
        "gpipe" => PipelineSchedule::GPipe,
        _ => match s.strip_prefix("interleaved:").map(str::parse::<u64>) {
            Some(Ok(chunks)) => PipelineSchedule::Interleaved { chunks },
            _ => {
                return Err(format!("unknown schedule '{s}': 1f1b, gpipe or interleaved:V").into());
            }
        },
    })
}

/// For `brrr estimate pipeline`: the bytes of one micro-batch's activations per layer
/// (Korthikanti et al. 2022: 16-bit activations, no recomputation) and the layer count,
/// when a model is given.
// Unused where brrr-perf's `cli_check` example includes this file without brrr-pp.
#[allow(dead_code)]
pub fn pipeline_per_layer(
    a: &PipelineEstimateArgs,
) -> Result<Option<(f64, usize)>, Box<dyn std::error::Error>> {
    Ok(match a.model.resolve()? {
        Some(cfg) => Some((
            brrr_perf::memory::activation_bytes_per_layer(
                &cfg,
                a.micro_batch,
                1,
                false,
                Recompute::None,
                brrr_perf::memory::Precision::Mixed,
            )?,
            cfg.layers as usize,
        )),
        None => None,
    })
}

fn run_memory(a: &MemoryArgs) -> CmdResult {
    let cfg = match (a.model.resolve()?, a.params) {
        (Some(cfg), None) => cfg,
        (Some(_), Some(_)) => return Err("give --params or a model, not both".into()),
        (None, Some(params)) => return run_model_states(a, params),
        (None, None) => {
            return Err("estimate memory needs a model (--model PRESET or \
                        --layers/--hidden/--heads) or --params N"
                .into());
        }
    };
    let setup = TrainingSetup {
        dp: a.dp,
        tp: a.tp,
        pp: a.pp,
        sequence_parallel: a.sp,
        micro_batch: a.micro_batch,
        grad_accum: a.grad_accum,
        precision: Precision::parse(&a.precision)?,
        optimizer: Optimizer::parse(&a.optimizer)?,
        zero_stage: a.zero,
        recompute: Recompute::parse(&a.recompute)?,
        schedule: parse_schedule(&a.schedule)?,
        offload: a.offload,
        lora_rank: a.lora_rank,
    };
    let m = estimate_memory(&cfg, &setup)?;
    let gpu = a.gpu.as_deref().map(specs::gpu).transpose()?;
    print(&report::memory_report(&m, gpu.as_ref()), a.json)?;
    if let Some(path) = &a.plot {
        write_plot(path, &report::memory_svg(&m, gpu.as_ref())?, a.json)?;
    }
    Ok(())
}

/// `estimate memory --params N`: the model states alone. The flags that only shape
/// activations or split layers need the model's shape, and are refused rather than
/// ignored.
fn run_model_states(a: &MemoryArgs, params: f64) -> CmdResult {
    let needs_shape = [
        ("--tp", a.tp != 1),
        ("--pp", a.pp != 1),
        ("--sp", a.sp),
        ("--micro-batch", a.micro_batch != 1),
        ("--grad-accum", a.grad_accum != 1),
        (
            "--recompute",
            Recompute::parse(&a.recompute)? != Recompute::None,
        ),
        ("--schedule", a.schedule != "1f1b"),
        ("--plot", a.plot.is_some()),
        ("--offload", a.offload),
        ("--lora-rank", a.lora_rank.is_some()),
    ];
    let given: Vec<&str> = needs_shape.iter().filter(|f| f.1).map(|f| f.0).collect();
    if !given.is_empty() {
        return Err(format!(
            "{} need the model's shape (--model PRESET or --layers/--hidden/--heads); \
             --params gives the model states only",
            given.join(", ")
        )
        .into());
    }
    let gpu = a.gpu.as_deref().map(specs::gpu).transpose()?;
    let r = report::model_states_report(
        params,
        Precision::parse(&a.precision)?,
        Optimizer::parse(&a.optimizer)?,
        a.zero,
        a.dp,
        gpu.as_ref(),
    )?;
    print(&r, a.json)?;
    Ok(())
}

fn run_time(a: &TimeArgs) -> CmdResult {
    let model = a.model.resolve()?;
    let params = match (a.params, &model) {
        (Some(p), _) => p,
        (None, Some(c)) => c.params(),
        (None, None) => {
            return Err("estimate time needs --params N or a model (--model PRESET)".into());
        }
    };
    let inputs = TimeInputs {
        params,
        tokens: a.tokens,
        model,
        gpu: specs::gpu(&a.gpu)?,
        dtype: DType::parse(&a.dtype)?,
        gpus: a.gpus,
        mfu: a.mfu,
        step_time_s: a.step_time,
        tokens_per_step: a.batch_tokens,
        tokens_per_s: a.tokens_per_sec,
        recompute: Recompute::parse(&a.recompute)?,
    };
    print(&report::time_report(&inputs)?, a.json)?;
    Ok(())
}

fn run_comms(a: &CommsArgs) -> CmdResult {
    let preset = a
        .model
        .as_deref()
        .map(TransformerConfig::preset)
        .transpose()?;
    let params = a.params.or(preset.as_ref().map(TransformerConfig::params));
    let bytes = match (a.bytes, params) {
        (Some(b), _) => b,
        (None, Some(p)) => 2.0 * p,
        (None, None) => 1e9,
    };
    let moe = match (a.experts, a.top_k) {
        (Some(e), Some(k)) => Some((e, k)),
        (None, None) => None,
        _ => return Err("give both --experts and --top-k".into()),
    };
    let inputs = CommsInputs {
        gpu: specs::gpu(&a.gpu)?,
        gpus: a.gpus,
        bytes,
        dtype: DType::parse(&a.dtype)?,
        d_model: a.d_model.or(preset.as_ref().map(|c| c.hidden as f64)),
        d_ff: a.d_ff.or(preset.as_ref().map(|c| c.ffn_hidden as f64)),
        tokens_per_gpu: a.tokens_per_gpu,
        moe,
        alpha_s: a.alpha_us.map(|us| us * 1e-6),
    };
    print(&report::comms_report(&inputs)?, a.json)?;
    Ok(())
}
