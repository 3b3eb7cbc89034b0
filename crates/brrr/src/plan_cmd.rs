//! `brrr plan`: flags into brrr-perf's layout search (`brrr_perf::plan`), printed as
//! text, JSON or an SVG of the candidates. Everything computed lives in the crate.

use crate::perf_cmd::{ModelArgs, write_stdout};
use brrr_perf::comms::Link;
use brrr_perf::memory::Precision;
use brrr_perf::plan::{self, Cluster, PlanInputs, published};
use brrr_perf::specs;
use brrr_perf::table::parse_count;
use clap::Args;
use std::path::PathBuf;

type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// Flags of `brrr plan`.
#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// The model (a preset, or --layers/--hidden/--heads; --seq-len is the training length).
    #[command(flatten)]
    pub model: ModelArgs,
    /// GPUs in all.
    #[arg(long)]
    pub gpus: Option<u64>,
    /// GPU id or alias (h100, a100, b200, ...; `brrr roofline --list`).
    #[arg(long, default_value = "h100")]
    pub gpu: String,
    /// GPUs per node [default: the GPU's usual node].
    #[arg(long, conflicts_with = "nodes")]
    pub gpus_per_node: Option<u64>,
    /// Nodes the GPUs are spread over (sets the GPUs per node to --gpus / --nodes).
    #[arg(long)]
    pub nodes: Option<u64>,
    /// Bandwidth within a node, GB/s per GPU one way [default: the GPU's NVLink].
    #[arg(long, value_name = "GB/S")]
    pub intra: Option<f64>,
    /// Bandwidth between nodes, GB/s per GPU one way [default: the node's network].
    #[arg(long, value_name = "GB/S")]
    pub inter: Option<f64>,
    /// Tokens per optimizer step over the whole cluster (e.g. 4M, 1.5e6).
    #[arg(long, value_name = "TOKENS")]
    pub global_batch: Option<String>,
    /// Fraction of the matmul peak a large GEMM reaches on your stack, in (0, 1].
    #[arg(long, default_value_t = 0.6)]
    pub efficiency: f64,
    /// Fraction of the GPU's memory a layout may use, in (0, 1].
    #[arg(long, default_value_t = 0.9)]
    pub headroom: f64,
    /// Also try fp32 (default: mixed precision only).
    #[arg(long)]
    pub fp32: bool,
    /// The largest micro-batch (sequences) to try.
    #[arg(long, default_value_t = 16)]
    pub max_micro_batch: u64,
    /// How many of the best layouts to print.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write every candidate (step time against memory) as an SVG.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Instead of a search: Megatron-LM's published layouts (1.7B to 1T on up to 3,072
    /// A100s) against the planner's predictions and best layouts.
    #[arg(long)]
    pub published: bool,
}

/// Runs `brrr plan`.
pub fn run(a: &PlanArgs) -> CmdResult {
    if a.published {
        let (e, rows) = published::megatron_comparison()?;
        return print(&published::comparison_report(e, &rows), a.json);
    }
    let inp = inputs(a)?;
    let p = plan::plan(&inp)?;
    print(&p.report(&inp, a.top), a.json)?;
    if let Some(path) = &a.svg {
        brrr_perf::plot::write_svg(path, &p.svg(&inp, a.top)?)?;
        if !a.json {
            write_stdout(&format!("\nwrote {}\n", path.display()))?;
        }
    }
    Ok(())
}

fn inputs(a: &PlanArgs) -> Result<PlanInputs, Box<dyn std::error::Error>> {
    let model = a
        .model
        .resolve()?
        .ok_or("give the model: --model PRESET, or --layers, --hidden and --heads")?;
    let gpus = a.gpus.ok_or("give the cluster's size: --gpus N")?;
    let tokens = a
        .global_batch
        .as_deref()
        .ok_or("give the batch: --global-batch TOKENS (per optimizer step, e.g. 4M)")?;
    let tokens = parse_count(tokens)?;
    let seqs = tokens / model.seq_len as f64;
    if seqs < 1.0 || seqs.fract() != 0.0 {
        let len = model.seq_len as f64;
        let (lo, hi) = (seqs.floor().max(1.0), seqs.ceil().max(1.0));
        return Err(format!(
            "--global-batch {tokens} tokens is {seqs:.2} sequences of {len} tokens: give a \
             whole number of sequences, e.g. {} ({lo}) or {} ({hi})",
            lo * len,
            hi * len
        )
        .into());
    }
    let mut cluster = Cluster::new(specs::gpu(&a.gpu)?, gpus)?;
    if let Some(n) = a.gpus_per_node {
        cluster.gpus_per_node = n.max(1);
    }
    if let Some(k) = a.nodes {
        if k == 0 || !gpus.is_multiple_of(k) {
            return Err(format!("--nodes {k} does not divide --gpus {gpus}").into());
        }
        cluster.gpus_per_node = gpus / k;
    }
    if let Some(gb) = a.intra {
        cluster.intra = Link::new(cluster.intra.alpha_s, gb * 1e9)?;
    }
    if let Some(gb) = a.inter {
        cluster.inter = Link::new(cluster.inter.alpha_s, gb * 1e9)?;
    }
    let mut inp = PlanInputs::new(model, cluster, seqs as u64);
    inp.efficiency = a.efficiency;
    inp.headroom = a.headroom;
    inp.max_micro_batch = a.max_micro_batch;
    if a.fp32 {
        inp.precisions.push(Precision::Fp32);
    }
    Ok(inp)
}

fn print(r: &brrr_perf::report::Report, json: bool) -> CmdResult {
    let text = match json {
        true => format!("{}\n", r.to_json_string()),
        false => r.to_string(),
    };
    Ok(write_stdout(&text)?)
}
