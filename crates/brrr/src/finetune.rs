//! `brrr finetune BASE_RUN`: a new run that starts from a trained run's weights and
//! trains on new text, every weight (full fine-tuning) or, with `--lora-rank R`, LoRA
//! adapters beside frozen weights (`brrr_nn::lora`). The run is an ordinary run
//! directory (`brrr train --resume` continues it, `brrr sample` reads it with its
//! adapters folded in); `brrr ckpt merge-lora` writes the merged weights as a run of
//! their own.

use crate::train::{Summary, TrainArgs, read_config};
use brrr_backend::{Error, Result};
use brrr_nn::LoraConfig;
use brrr_train::Finetune;
use std::path::PathBuf;

/// Steps of a fine-tuning run when `--steps` is not given.
pub const DEFAULT_STEPS: u64 = 200;
/// Warmup steps of a fine-tuning run when `--warmup-steps` is not given.
pub const DEFAULT_WARMUP: u64 = 20;

/// Flags of `brrr finetune`: the base run, LoRA's, and `brrr train`'s (except the
/// model's shape, which is the base run's).
#[derive(Clone, Debug, clap::Args)]
pub struct FinetuneArgs {
    /// The trained run to start from: a run directory with a one-device
    /// checkpoint.safetensors (a --dp or --pp run's after `brrr ckpt consolidate`).
    pub base: PathBuf,
    /// Train LoRA adapters of this rank beside every block's four linear layers and
    /// freeze every other weight (Hu et al. 2021); without it every weight trains.
    #[arg(long)]
    pub lora_rank: Option<usize>,
    /// LoRA's alpha: the adapters' update is scaled by alpha / rank [default: 2 ×
    /// --lora-rank].
    #[arg(long, requires = "lora_rank")]
    pub lora_alpha: Option<f32>,
    /// `brrr train`'s flags; --steps defaults to 200, --warmup-steps to 20 and --out to
    /// runs/finetune.
    #[command(flatten)]
    pub train: TrainArgs,
}

/// Runs `brrr finetune`.
pub fn run(args: &FinetuneArgs) -> Result<Summary> {
    crate::train::run(&train_args(args)?)
}

/// `brrr train`'s flags for the fine-tuning run `args` describes.
pub fn train_args(args: &FinetuneArgs) -> Result<TrainArgs> {
    let t = &args.train;
    let shape_flags = [
        ("--preset", t.preset.is_some()),
        ("--n-layer", t.n_layer.is_some()),
        ("--n-head", t.n_head.is_some()),
        ("--n-embd", t.n_embd.is_some()),
        ("--block-size", t.block_size.is_some()),
    ];
    if let Some((flag, _)) = shape_flags.iter().find(|(_, given)| *given) {
        return Err(Error::invalid(
            "finetune",
            format!("{flag}: the model's shape is the base run's; drop it"),
        ));
    }
    if t.resume.is_some() {
        return Err(Error::invalid(
            "finetune",
            "--resume: a fine-tuning run continues as any run does, with \
             `brrr train --resume RUN_DIR`",
        ));
    }
    if t.corpus.is_none() && t.data.is_none() && !t.synthetic {
        return Err(Error::invalid(
            "finetune",
            "the new text to fine-tune on: give --corpus FILE (or --data DIR)",
        ));
    }
    let base = read_config(&args.base)?;
    let lora = args.lora_rank.map(|rank| LoraConfig {
        rank,
        alpha: args.lora_alpha.unwrap_or(2.0 * rank as f32),
    });
    if let Some(l) = &lora {
        l.validate()?;
    }
    let dir = std::fs::canonicalize(&args.base)
        .map_err(|e| Error::io(format!("{}: the base run", args.base.display()), e))?;
    let mut out = t.clone();
    out.steps = t.steps.or(Some(DEFAULT_STEPS));
    out.warmup_steps = t.warmup_steps.or(Some(DEFAULT_WARMUP));
    out.out = t
        .out
        .clone()
        .or_else(|| Some(PathBuf::from("runs/finetune")));
    out.finetune = Some(crate::train::FinetuneFrom {
        model: base.model,
        tokenizer: base.tokenizer,
        finetune: Finetune {
            base: dir.display().to_string(),
            lora,
        },
    });
    Ok(out)
}
