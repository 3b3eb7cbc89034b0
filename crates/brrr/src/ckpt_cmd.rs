//! `brrr ckpt consolidate RUN_DIR`: a data-parallel run's checkpoint shards (`dp/`) as
//! one single-device checkpoint ([`brrr_dp::consolidate`]), by default the run
//! directory's own `checkpoint.safetensors`, so that `brrr sample RUN_DIR` and a
//! one-device `brrr train --resume RUN_DIR` read it.

use crate::train::{CHECKPOINT_FILE, read_config};
use brrr_backend::{Error, Result};
use brrr_cpu::CpuBackend;
use brrr_dp::{consolidate, read_shard_header, shard_path, write_consolidated};
use std::fmt;
use std::path::PathBuf;

/// `brrr ckpt ...`.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum CkptCommand {
    /// One single-device checkpoint from a data-parallel run's shards (`dp/`): the
    /// weights, AdamW moments, step and data position that `brrr sample` and a one-device
    /// `brrr train --resume` read.
    Consolidate(ConsolidateArgs),
}

/// Runs a `brrr ckpt` command; returns what to print.
pub fn run(cmd: &CkptCommand) -> Result<String> {
    match cmd {
        CkptCommand::Consolidate(a) => run_consolidate(a).map(|r| r.to_string()),
    }
}

/// Flags of `brrr ckpt consolidate`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ConsolidateArgs {
    /// A run directory written by `brrr train --dp N` (its `config.toml` and `dp/`).
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
    /// Ranks (shards) read.
    pub world: usize,
    /// The run's ZeRO stage.
    pub zero: u8,
    /// Optimizer steps the checkpoint holds.
    pub step: u64,
    /// Parameters (elements) in the model.
    pub params: usize,
}

impl fmt::Display for ConsolidateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "consolidated {} shards (--dp {} --zero {}, step {}, {} parameters) into {}",
            self.world,
            self.world,
            self.zero,
            self.step,
            self.params,
            self.out.display()
        )
    }
}

/// Runs `brrr ckpt consolidate`.
pub fn run_consolidate(args: &ConsolidateArgs) -> Result<ConsolidateReport> {
    let config = read_config(&args.run_dir)?;
    let dir = args.run_dir.join(crate::train::DP_DIR);
    if !dir.is_dir() {
        return Err(Error::file(
            &dir,
            "not found: RUN_DIR must be a run directory of `brrr train --dp N`",
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
    let state = consolidate(&CpuBackend::new(), &config, &dir, args.dp)?;
    let world = args
        .dp
        .map_or_else(|| brrr_dp::shard_worlds(&dir), |n| Ok(vec![n]))?;
    let world = world
        .first()
        .copied()
        .ok_or_else(|| Error::file(&dir, "holds no data-parallel shards"))?;
    let header = read_shard_header(&shard_path(&dir, 0, world))?;
    write_consolidated(&state, &out, args.force)?;
    Ok(ConsolidateReport {
        out,
        world: header.world,
        zero: header.zero,
        step: state.step,
        params: state.params.iter().map(|p| p.value.len()).sum(),
    })
}
