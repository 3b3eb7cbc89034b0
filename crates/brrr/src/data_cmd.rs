//! `brrr data prepare`: text files and JSON lines to llm.c-format token shards
//! ([`brrr_data::prepare`]), with a progress bar and a summary.

use brrr_backend::Result;
use brrr_data::prepare::{PrepareOptions, PrepareSummary, TokenizerKind, prepare};
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt;
use std::path::PathBuf;

/// Flags of `brrr data prepare`.
#[derive(clap::Args, Debug)]
pub struct PrepareArgs {
    /// Input files: plain text (one document per file) or `.jsonl` (one document per
    /// line, its text under --text-field).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Directory for the shards and `data.json` (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// `bytes` (vocabulary 256, end-of-text = byte 0) or `gpt2` (GPT-2's BPE, 50,257).
    #[arg(long, default_value = "bytes")]
    pub tokenizer: String,
    /// Tokens per shard (llm.c writes 10^8). The first shard validates, the rest train;
    /// an input smaller than one shard is split 1:9 instead.
    #[arg(long, default_value_t = 100_000_000)]
    pub shard_tokens: usize,
    /// The JSON field that holds a document's text in `.jsonl` inputs.
    #[arg(long, default_value = "text")]
    pub text_field: String,
    /// Shard file name prefix: `NAME_val_000000.bin`, `NAME_train_000001.bin`, ...
    #[arg(long, default_value = "data")]
    pub name: String,
    /// Replace the dataset already in --out (its data.json and shards); without it,
    /// a directory holding one is refused.
    #[arg(long)]
    pub force: bool,
    /// Print no progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// What `brrr data prepare` prints at the end.
pub struct Report {
    pub summary: PrepareSummary,
    pub out: PathBuf,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.summary;
        writeln!(f, "documents:   {}", s.documents)?;
        writeln!(f, "tokens:      {} (end-of-text included)", s.tokens)?;
        writeln!(
            f,
            "shards:      {} in {} (the first is validation)",
            s.shards.len(),
            self.out.display()
        )?;
        writeln!(
            f,
            "tokenizing:  {:.0} tokens/s ({:.2} s)",
            s.tokens_per_s(),
            s.tokenize_time.as_secs_f64()
        )
    }
}

/// Runs `brrr data prepare`.
pub fn run_prepare(args: &PrepareArgs) -> Result<Report> {
    let opts = PrepareOptions {
        inputs: args.inputs.clone(),
        out_dir: args.out.clone(),
        tokenizer: TokenizerKind::parse(&args.tokenizer)?,
        shard_tokens: args.shard_tokens,
        text_field: args.text_field.clone(),
        name: args.name.clone(),
        replace: args.force,
    };
    let pb = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}")
    {
        pb.set_style(style);
    }
    let mut progress = |done: u64, total: u64| {
        pb.set_length(total);
        pb.set_position(done);
    };
    let summary = prepare(&opts, &mut progress)?;
    pb.finish_and_clear();
    Ok(Report {
        summary,
        out: args.out.clone(),
    })
}
