//! `brrr ckpt consolidate RUN_DIR`: a data-parallel run's checkpoint shards (`dp/`) as
//! one single-device checkpoint ([`brrr_dp::consolidate`]), by default the run
//! directory's own `checkpoint.safetensors`, so that `brrr sample RUN_DIR` and a
//! one-device `brrr train --resume RUN_DIR` read it.
//!
//! `brrr ckpt merge-lora RUN_DIR --out DIR`: a LoRA run's adapters folded into its
//! weights (`W + α/r · B A`, [`brrr_nn::lora::merge_adapters`]), written as a run of
//! plain weights.

use crate::train::{CHECKPOINT_FILE, DP_DIR, PP_DIR, read_config};
use brrr_backend::{Error, Result};
use brrr_cpu::CpuBackend;
use brrr_dp::{consolidate, read_shard_header, shard_path, write_consolidated};
use brrr_train::{EngineKind, TrainConfig, TrainState};
use std::fmt;
use std::path::{Path, PathBuf};

/// `brrr ckpt ...`.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum CkptCommand {
    /// One single-device checkpoint from a data-parallel run's shards (`dp/`) or a
    /// pipeline run's stage files (`pp/`): the weights, AdamW moments, step and data
    /// position that `brrr sample` and `brrr train --resume` in any layout read.
    Consolidate(ConsolidateArgs),
    /// A LoRA run's adapters folded into its weights (`brrr finetune --lora-rank`),
    /// written as a new run directory of plain weights that `brrr sample`, `brrr
    /// serve` and `brrr finetune` read like any trained run.
    MergeLora(MergeLoraArgs),
}

/// Runs a `brrr ckpt` command; returns what to print.
pub fn run(cmd: &CkptCommand) -> Result<String> {
    match cmd {
        CkptCommand::Consolidate(a) => run_consolidate(a).map(|r| r.to_string()),
        CkptCommand::MergeLora(a) => run_merge_lora(a),
    }
}

/// Flags of `brrr ckpt consolidate`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ConsolidateArgs {
    /// A run directory written by `brrr train --dp N` or `--pp N` (its `config.toml`
    /// and `dp/` or `pp/`).
    pub run_dir: PathBuf,
    /// Where to write the checkpoint [default: RUN_DIR/checkpoint.safetensors].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub force: bool,
    /// Consolidate the shards of `--dp N` when `dp/` holds several runs' shards.
    #[arg(long)]
    pub dp: Option<usize>,
}

/// What `brrr ckpt consolidate` did; its `Display` is what it prints.
#[derive(Clone, Debug)]
pub struct ConsolidateReport {
    /// The file written.
    pub out: PathBuf,
    /// Files read: data-parallel shards, or pipeline stage files (× tensor ranks).
    pub world: usize,
    /// The run's ZeRO stage (0 for a pipeline).
    pub zero: u8,
    /// Optimizer steps the checkpoint holds.
    pub step: u64,
    /// Parameters (elements) in the model.
    pub params: usize,
    /// The layout the files came from, as flags.
    pub layout: String,
}

impl fmt::Display for ConsolidateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "consolidated {} files ({}, step {}, {} parameters) into {}",
            self.world,
            self.layout,
            self.step,
            self.params,
            self.out.display()
        )
    }
}

/// Runs `brrr ckpt consolidate`.
pub fn run_consolidate(args: &ConsolidateArgs) -> Result<ConsolidateReport> {
    let config = read_config(&args.run_dir)?;
    if matches!(
        config.layout.engine(),
        EngineKind::OneDevice | EngineKind::TensorParallel
    ) {
        // These layouts save the whole model (a --tp run gathers it from its shards).
        return Err(Error::invalid(
            "ckpt consolidate",
            format!(
                "the run in {} ({}) saved one whole checkpoint already: `brrr sample` and \
                 `--resume` in any layout read it as it is",
                args.run_dir.display(),
                config.layout.flags()
            ),
        ));
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.run_dir.join(CHECKPOINT_FILE));
    // Refuse before reading every shard, not after.
    if out.exists() && !args.force {
        return Err(Error::file(
            &out,
            "already exists: pass --force to replace it, or another --out",
        ));
    }
    let (state, world, zero) = consolidated(&args.run_dir, &config, args.dp)?;
    write_consolidated(&state, &out, args.force)?;
    Ok(ConsolidateReport {
        out,
        world,
        zero,
        step: state.step,
        params: state.params.iter().map(|p| p.value.len()).sum(),
        layout: config.layout.flags(),
    })
}

/// The state of the run in `run_dir` as one device would hold it, put together from
/// its data-parallel shards (`dp/`, of `--dp N` when given) or pipeline stage files
/// (`pp/`); with the number of files read and the ZeRO stage.
pub fn consolidated(
    run_dir: &Path,
    config: &TrainConfig,
    dp: Option<usize>,
) -> Result<(TrainState, usize, u8)> {
    if config.layout.engine() == EngineKind::Pipeline {
        let dir = run_dir.join(PP_DIR);
        // The stage files do not record the data's identity: the run's config does.
        let (source, _) = {
            let opts = config.data_options();
            brrr_data::DataSpec::open(&opts)?.source(&opts, 0)?
        };
        let state = brrr_pp::consolidate(&CpuBackend::new(), config, &dir, source.fingerprint())?;
        let l = &config.layout;
        return Ok((state, l.pp * l.tp, 0));
    }
    let dir = run_dir.join(DP_DIR);
    if !dir.is_dir() {
        return Err(Error::file(
            &dir,
            "not found: RUN_DIR must be a run directory of `brrr train --dp N` or `--pp N`",
        ));
    }
    let state = consolidate(&CpuBackend::new(), config, &dir, dp)?;
    let world = dp.map_or_else(|| brrr_dp::shard_worlds(&dir), |n| Ok(vec![n]))?;
    let world = world
        .first()
        .copied()
        .ok_or_else(|| Error::file(&dir, "holds no data-parallel shards"))?;
    let header = read_shard_header(&shard_path(&dir, 0, world))?;
    Ok((state, header.world, header.zero))
}

/// Flags of `brrr ckpt merge-lora`.
#[derive(clap::Args, Clone, Debug)]
pub struct MergeLoraArgs {
    /// A run directory written by `brrr finetune --lora-rank R`.
    pub run_dir: PathBuf,
    /// The new run directory for the merged weights.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace the run already in the output directory.
    #[arg(long)]
    pub force: bool,
}

/// Runs `brrr ckpt merge-lora`; returns what to print.
pub fn run_merge_lora(args: &MergeLoraArgs) -> Result<String> {
    let config = read_config(&args.run_dir)?;
    let Some(lora) = config.lora() else {
        return Err(Error::invalid(
            "ckpt merge-lora",
            format!(
                "the run in {} trained no LoRA adapters: its weights are plain already",
                args.run_dir.display()
            ),
        ));
    };
    if brrr_train::run_dir::same_dir(&args.run_dir, &args.out) {
        return Err(Error::invalid(
            "ckpt merge-lora",
            "--out is the LoRA run itself: give another directory, so the adapters are kept",
        ));
    }
    brrr_train::RunDir::check_new(&args.out, args.force)?;
    let saved = brrr_train::load_state(&args.run_dir)?;
    let (model, _) = crate::sample::load_model(
        &args.run_dir,
        &mut <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0),
    )?;
    let mut cfg = config.clone();
    if let Some(ft) = &mut cfg.finetune {
        ft.lora = None;
    }
    let mut params = Vec::new();
    for p in brrr_nn::Module::params(&model) {
        params.push(brrr_train::ParamState {
            name: p.name.clone(),
            shape: p.value.dims().to_vec(),
            value: brrr_backend::block_on(p.value.to_host())?,
            moments: None,
            optim: None,
        });
    }
    let n: usize = params.iter().map(|p| p.value.len()).sum();
    let state = TrainState {
        config: cfg.clone(),
        step: saved.step,
        // The adapters' moments do not apply to the merged weights: a run that goes on
        // from here starts its optimizer afresh.
        adamw_step: 0,
        data_position: saved.data_position,
        data_fingerprint: saved.data_fingerprint,
        params,
        loss_scaler: None,
    };
    let dir = brrr_train::RunDir::create(&args.out, &cfg)?;
    brrr_train::save_state(&state, &args.out)?;
    drop(dir);
    Ok(format!(
        "merged the rank-{} adapters (alpha {}) of {} into {n} plain weights: {}",
        lora.rank,
        lora.alpha,
        args.run_dir.display(),
        args.out.join(CHECKPOINT_FILE).display()
    ))
}
