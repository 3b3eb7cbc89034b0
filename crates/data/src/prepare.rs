//! Text to token shards, as llm.c's `dev/data/fineweb.py` does it.
//!
//! Every document is preceded by the end-of-text token, so the model learns where
//! documents start and a window that crosses a boundary says so; tokens fill shards of
//! `shard_tokens` in order (a document may continue in the next shard), the first shard
//! is the validation split and the rest train. Inputs are plain text files (one document
//! each) or JSON lines (`.jsonl`, one document per line, its text under a field).
//! A `data.json` beside the shards records the tokenizer, its vocabulary size and
//! end-of-text id, which `brrr train --data` reads.

use crate::shard::{TokenWidth, write_shard};
use brrr_backend::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A tokenizer that `prepare` can write shards with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// UTF-8 bytes (vocabulary 256); end-of-text is the byte 0 (NUL), which text files
    /// practically never contain.
    Bytes,
    /// GPT-2's BPE (`r50k_base`, 50,257 tokens, end-of-text 50256), from `tiktoken-rs`,
    /// which carries the merge tables in the crate.
    Gpt2,
}

impl TokenizerKind {
    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::Bytes => "bytes",
            TokenizerKind::Gpt2 => "gpt2",
        }
    }

    pub fn vocab_size(self) -> usize {
        match self {
            TokenizerKind::Bytes => 256,
            TokenizerKind::Gpt2 => 50257,
        }
    }

    pub fn eot(self) -> u32 {
        match self {
            TokenizerKind::Bytes => 0,
            TokenizerKind::Gpt2 => 50256,
        }
    }

    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "bytes" => Ok(TokenizerKind::Bytes),
            "gpt2" => Ok(TokenizerKind::Gpt2),
            _ => Err(Error::Parse(format!(
                "unknown tokenizer {name:?}: expected `bytes` or `gpt2`"
            ))),
        }
    }
}

/// A ready tokenizer.
pub enum Tokenizer {
    Bytes,
    Gpt2(&'static tiktoken_rs::CoreBPE),
}

impl Tokenizer {
    pub fn new(kind: TokenizerKind) -> Self {
        match kind {
            TokenizerKind::Bytes => Tokenizer::Bytes,
            TokenizerKind::Gpt2 => Tokenizer::Gpt2(tiktoken_rs::r50k_base_singleton()),
        }
    }

    /// Token ids of `text`; special-token strings in the text are encoded as text.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match self {
            Tokenizer::Bytes => text.bytes().map(u32::from).collect(),
            Tokenizer::Gpt2(bpe) => bpe.encode_ordinary(text),
        }
    }
}

/// What to prepare.
#[derive(Clone, Debug)]
pub struct PrepareOptions {
    pub inputs: Vec<PathBuf>,
    pub out_dir: PathBuf,
    pub tokenizer: TokenizerKind,
    /// Tokens per shard (llm.c: 10⁸).
    pub shard_tokens: usize,
    /// The JSON field holding a document's text in `.jsonl` inputs.
    pub text_field: String,
    /// File names are `{name}_val_000000.bin`, `{name}_train_000001.bin`, ...
    pub name: String,
}

/// What `prepare` did.
#[derive(Clone, Debug, PartialEq)]
pub struct PrepareSummary {
    pub documents: u64,
    pub tokens: u64,
    pub shards: Vec<PathBuf>,
    /// Time spent in the tokenizer only.
    pub tokenize_time: Duration,
}

impl PrepareSummary {
    pub fn tokens_per_s(&self) -> f64 {
        self.tokens as f64 / self.tokenize_time.as_secs_f64().max(1e-9)
    }
}

/// Progress: input bytes done, of the total.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Tokenizes `opts.inputs` into shards in `opts.out_dir` (created if missing).
pub fn prepare(opts: &PrepareOptions, progress: Progress<'_>) -> Result<PrepareSummary> {
    if opts.inputs.is_empty() {
        return Err(Error::invalid("prepare", "no input files"));
    }
    if opts.shard_tokens < 2 || opts.shard_tokens > i32::MAX as usize {
        return Err(Error::invalid(
            "prepare",
            format!(
                "shard size {} must be in 2..=2^31-1 tokens",
                opts.shard_tokens
            ),
        ));
    }
    let mut total_bytes = 0u64;
    for p in &opts.inputs {
        let m = std::fs::metadata(p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::file(p, "input not found"),
            _ => Error::io(format!("{}: reading its size", p.display()), e),
        })?;
        if !m.is_file() {
            return Err(Error::file(p, "input is not a regular file"));
        }
        total_bytes += m.len();
    }
    std::fs::create_dir_all(&opts.out_dir)
        .map_err(|e| Error::io(format!("{}: creating it", opts.out_dir.display()), e))?;
    let tok = Tokenizer::new(opts.tokenizer);
    let mut w = ShardWriter::new(opts);
    let mut done = 0u64;
    let mut summary = PrepareSummary {
        documents: 0,
        tokens: 0,
        shards: Vec::new(),
        tokenize_time: Duration::ZERO,
    };
    for path in &opts.inputs {
        let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => Error::file(path, "not UTF-8 text"),
            _ => Error::io(format!("{}: reading it", path.display()), e),
        })?;
        let jsonl = path.extension().is_some_and(|e| e == "jsonl");
        let mut add = |doc: &str, summary: &mut PrepareSummary| -> Result<()> {
            let t0 = Instant::now();
            let ids = tok.encode(doc);
            summary.tokenize_time += t0.elapsed();
            summary.documents += 1;
            summary.tokens += ids.len() as u64 + 1;
            w.push(opts.tokenizer.eot())?;
            ids.iter().try_for_each(|&t| w.push(t))
        };
        if jsonl {
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let doc = json_text(path, i + 1, line, &opts.text_field)?;
                add(&doc, &mut summary)?;
                done += line.len() as u64 + 1;
                progress(done.min(total_bytes), total_bytes);
            }
        } else {
            add(&text, &mut summary)?;
            done += text.len() as u64;
        }
        progress(done.min(total_bytes), total_bytes);
    }
    summary.shards = w.finish()?;
    write_meta(opts)?;
    Ok(summary)
}

fn json_text(path: &Path, line_no: usize, line: &str, field: &str) -> Result<String> {
    let v: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| Error::file(path, format!("line {line_no} is not JSON: {e}")))?;
    match v.get(field) {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(Error::file(
            path,
            format!("line {line_no}: field {field:?} is not a string"),
        )),
        None => Err(Error::file(
            path,
            format!("line {line_no}: no field {field:?} (set it with --text-field)"),
        )),
    }
}

/// Fills shards in order and writes each when full.
struct ShardWriter<'a> {
    opts: &'a PrepareOptions,
    width: TokenWidth,
    buf: Vec<u32>,
    written: Vec<PathBuf>,
}

impl<'a> ShardWriter<'a> {
    fn new(opts: &'a PrepareOptions) -> Self {
        ShardWriter {
            opts,
            width: TokenWidth::for_vocab(opts.tokenizer.vocab_size()),
            buf: Vec::with_capacity(opts.shard_tokens.min(1 << 24)),
            written: Vec::new(),
        }
    }

    fn push(&mut self, t: u32) -> Result<()> {
        self.buf.push(t);
        if self.buf.len() == self.opts.shard_tokens {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let i = self.written.len();
        let split = if i == 0 { "val" } else { "train" };
        let path = self
            .opts
            .out_dir
            .join(format!("{}_{split}_{i:06}.bin", self.opts.name));
        write_shard(&path, &self.buf, self.width)?;
        self.written.push(path);
        self.buf.clear();
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<PathBuf>> {
        if !self.buf.is_empty() {
            self.flush()?;
        }
        Ok(self.written)
    }
}

/// The file beside the shards that says how they were tokenized.
pub const META_FILE: &str = "data.json";

fn write_meta(opts: &PrepareOptions) -> Result<()> {
    let meta = serde_json::json!({
        "tokenizer": opts.tokenizer.name(),
        "vocab_size": opts.tokenizer.vocab_size(),
        "eot": opts.tokenizer.eot(),
        "name": opts.name,
    });
    let text = serde_json::to_string_pretty(&meta)
        .map_err(|e| Error::Parse(format!("writing {META_FILE}: {e}")))?;
    brrr_train::atomic::write_atomic(opts.out_dir.join(META_FILE), text.as_bytes())
}

/// The tokenizer a data directory's `data.json` names.
pub fn read_meta(dir: &Path) -> Result<TokenizerKind> {
    let meta_path = dir.join(META_FILE);
    let text = std::fs::read_to_string(&meta_path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::file(
            &meta_path,
            "not found: is this a directory written by `brrr data prepare`?",
        ),
        _ => Error::io(format!("{}: reading it", meta_path.display()), e),
    })?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::file(&meta_path, format!("not JSON: {e}")))?;
    TokenizerKind::parse(v["tokenizer"].as_str().unwrap_or(""))
}

/// A prepared data directory: its tokenizer and its validation and training shards.
#[derive(Debug)]
pub struct DataDir {
    pub tokenizer: TokenizerKind,
    pub vocab_size: usize,
    pub val: Vec<crate::Shard>,
    pub train: std::sync::Arc<Vec<crate::Shard>>,
}

/// Opens what [`prepare`] (or llm.c, with a `data.json` added) wrote: shards whose
/// names contain `_val_` validate, those with `_train_` train, each in name order.
pub fn open_data_dir(dir: &Path) -> Result<DataDir> {
    let tokenizer = read_meta(dir)?;
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("{}: listing it", dir.display()), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    names.sort();
    let (mut val, mut train) = (Vec::new(), Vec::new());
    for p in names {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        if name.contains("_val_") {
            val.push(crate::Shard::open(&p)?);
        } else if name.contains("_train_") {
            train.push(crate::Shard::open(&p)?);
        }
    }
    if train.is_empty() {
        return Err(Error::file(dir, "no training shards (`*_train_*.bin`)"));
    }
    Ok(DataDir {
        tokenizer,
        vocab_size: tokenizer.vocab_size(),
        val,
        train: std::sync::Arc::new(train),
    })
}
