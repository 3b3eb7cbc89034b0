//! Text to token shards, as llm.c's `dev/data/fineweb.py` does it.
//!
//! Every document is preceded by the end-of-text token, so the model learns where
//! documents start and a window that crosses a boundary says so; tokens fill shards of
//! `shard_tokens` in order (a document may continue in the next shard), the first shard
//! is the validation split and the rest train; an input smaller than one shard is split
//! instead, its first tenth validation and the rest one training shard, so that it
//! trains. Inputs are plain text files (one document
//! each) or JSON lines (`.jsonl`, one document per line, its text under a field).
//! A `data.json` beside the shards records the tokenizer, its vocabulary size and
//! end-of-text id, which `brrr train --data` reads.

use crate::data_dir::{META_FILE, refuse_existing_dataset, remove_dataset, valid_name};
use crate::shard::{TokenWidth, write_shard};
use brrr_backend::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::data_dir::TokenizerKind;

/// A ready tokenizer.
pub enum Tokenizer {
    /// Each UTF-8 byte is a token.
    Bytes,
    /// GPT-2's BPE, the process-wide `r50k_base` tables (built once, on first use).
    Gpt2(&'static tiktoken_rs::CoreBPE),
}

impl Tokenizer {
    /// The tokenizer of `kind`; the first GPT-2 one builds its tables, later ones share
    /// them.
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
    /// Input files, read in this order: `.jsonl` files are one document per line, any
    /// other file is one document of plain UTF-8 text. At least one.
    pub inputs: Vec<PathBuf>,
    /// Where the shards and `data.json` go (created if missing).
    pub out_dir: PathBuf,
    /// The tokenizer to write with; it also picks the token width of the shards.
    pub tokenizer: TokenizerKind,
    /// Tokens per shard (llm.c: 10⁸), in `2..=2^31 - 1` (the header's count is an `i32`).
    pub shard_tokens: usize,
    /// The JSON field holding a document's text in `.jsonl` inputs.
    pub text_field: String,
    /// File names are `{name}_val_000000.bin`, `{name}_train_000001.bin`, ...
    pub name: String,
    /// Replace a dataset already in `out_dir` (its `data.json` and shards); without it,
    /// such a directory is refused.
    pub replace: bool,
}

/// What `prepare` did.
#[derive(Clone, Debug, PartialEq)]
pub struct PrepareSummary {
    /// Documents written (files, or non-blank JSON lines).
    pub documents: u64,
    /// Tokens written, the end-of-text token before each document included.
    pub tokens: u64,
    /// The shards' final paths in `out_dir`, validation shard first.
    pub shards: Vec<PathBuf>,
    /// Time spent in the tokenizer only.
    pub tokenize_time: Duration,
}

impl PrepareSummary {
    /// Tokenizer throughput: `tokens / tokenize_time`, in tokens per second (file I/O not
    /// counted).
    pub fn tokens_per_s(&self) -> f64 {
        self.tokens as f64 / self.tokenize_time.as_secs_f64().max(1e-9)
    }
}

/// Progress: input bytes done, of the total.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Tokenizes `opts.inputs` into shards in `opts.out_dir` (created if missing).
///
/// Streams: plain text is read in pieces of about [`PIECE_BYTES`] and JSON lines a line
/// at a time, so memory is bounded by one shard and one piece whatever the inputs' size.
/// The shards are written into `out_dir/.partial` and moved in only once all are whole:
/// a failure (or a kill) leaves the directory's previous dataset as it was.
pub fn prepare(opts: &PrepareOptions, progress: Progress<'_>) -> Result<PrepareSummary> {
    let total_bytes = check_inputs(opts)?;
    refuse_existing_dataset(&opts.out_dir, opts.replace)?;
    let staging = opts.out_dir.join(".partial");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| {
            Error::io(
                format!("{}: removing a killed run's files", staging.display()),
                e,
            )
        })?;
    }
    std::fs::create_dir_all(&staging)
        .map_err(|e| Error::io(format!("{}: creating it", staging.display()), e))?;
    let written = tokenize_into(opts, &staging, total_bytes, progress).and_then(|mut summary| {
        write_meta(opts, &staging)?;
        // The new dataset is whole: only now does the old one go.
        remove_dataset(&opts.out_dir)?;
        for shard in &mut summary.shards {
            let dest = opts.out_dir.join(shard.file_name().unwrap_or_default());
            rename(shard, &dest)?;
            *shard = dest;
        }
        rename(&staging.join(META_FILE), &opts.out_dir.join(META_FILE))?;
        Ok(summary)
    });
    let _ = std::fs::remove_dir_all(&staging);
    written
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to)
        .map_err(|e| Error::io(format!("moving {} to {}", from.display(), to.display()), e))
}

/// Checks the options and the inputs; returns the inputs' total size in bytes.
fn check_inputs(opts: &PrepareOptions) -> Result<u64> {
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
    if !valid_name(&opts.name) {
        return Err(Error::invalid(
            "prepare",
            format!("--name {:?} must be a plain file name prefix", opts.name),
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
    Ok(total_bytes)
}

/// Tokenizes every input into shards in `dir`.
fn tokenize_into(
    opts: &PrepareOptions,
    dir: &Path,
    total_bytes: u64,
    progress: Progress<'_>,
) -> Result<PrepareSummary> {
    let mut sink = Sink {
        tok: Tokenizer::new(opts.tokenizer),
        eot: opts.tokenizer.eot(),
        writer: ShardWriter::new(opts, dir),
        summary: PrepareSummary {
            documents: 0,
            tokens: 0,
            shards: Vec::new(),
            tokenize_time: Duration::ZERO,
        },
    };
    let mut done = 0u64;
    for path in &opts.inputs {
        if path.extension().is_some_and(|e| e == "jsonl") {
            for_each_line(path, |line_no, line| {
                done += line.len() as u64 + 1;
                if !line.trim().is_empty() {
                    let doc = json_text(path, line_no, line, &opts.text_field)?;
                    sink.begin_document()?;
                    sink.encode(&doc)?;
                }
                progress(done.min(total_bytes), total_bytes);
                Ok(())
            })?;
        } else {
            sink.begin_document()?;
            for_each_piece(path, |piece| {
                done += piece.len() as u64;
                sink.encode(piece)?;
                progress(done.min(total_bytes), total_bytes);
                Ok(())
            })?;
        }
    }
    let mut summary = sink.summary;
    summary.shards = sink.writer.finish()?;
    Ok(summary)
}

/// Where tokens go: the shard writer, with the counts and the tokenizer's time.
struct Sink<'a> {
    tok: Tokenizer,
    eot: u32,
    writer: ShardWriter<'a>,
    summary: PrepareSummary,
}

impl Sink<'_> {
    /// Every document starts with end-of-text.
    fn begin_document(&mut self) -> Result<()> {
        self.summary.documents += 1;
        self.summary.tokens += 1;
        self.writer.push(self.eot)
    }

    fn encode(&mut self, text: &str) -> Result<()> {
        let t0 = Instant::now();
        let ids = self.tok.encode(text);
        self.summary.tokenize_time += t0.elapsed();
        self.summary.tokens += ids.len() as u64;
        ids.iter().try_for_each(|&t| self.writer.push(t))
    }
}

/// About how many bytes of plain text are tokenized at a time.
pub const PIECE_BYTES: usize = 1 << 20;
/// A piece grows up to this when no safe cut is found in it (text without a space
/// between words for 16 MiB); then it is cut at a character boundary.
const MAX_PIECE_BYTES: usize = 16 << 20;

/// Where a piece of text may end so that tokenizing the pieces gives the tokens of the
/// whole: before a space that follows a letter, digit or ASCII punctuation and precedes
/// a letter (`abc| def`). GPT-2's pre-tokenizer splits there anyway (the space starts
/// the next word's token, ` ?\p{L}+`), and bytes split anywhere. 0 if there is none.
fn safe_cut(buf: &[u8]) -> usize {
    (1..buf.len().saturating_sub(1))
        .rev()
        .find(|&i| {
            buf[i] == b' '
                && (buf[i - 1].is_ascii_alphanumeric() || buf[i - 1].is_ascii_punctuation())
                && buf[i + 1].is_ascii_alphabetic()
        })
        .unwrap_or(0)
}

/// Calls `f` with the text of `path` in pieces that end at [`safe_cut`]s.
fn for_each_piece(path: &Path, mut f: impl FnMut(&str) -> Result<()>) -> Result<()> {
    use std::io::Read;
    let read_err = |e: std::io::Error| Error::io(format!("{}: reading it", path.display()), e);
    let utf8 = |b: &[u8]| -> Result<String> {
        String::from_utf8(b.to_vec()).map_err(|_| Error::file(path, "not UTF-8 text"))
    };
    let mut file = std::fs::File::open(path).map_err(read_err)?;
    let mut buf: Vec<u8> = Vec::with_capacity(2 * PIECE_BYTES);
    loop {
        let n = (&mut file)
            .take(PIECE_BYTES as u64)
            .read_to_end(&mut buf)
            .map_err(read_err)?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(())
            } else {
                f(&utf8(&buf)?)
            };
        }
        let mut cut = safe_cut(&buf);
        if cut == 0 && buf.len() >= MAX_PIECE_BYTES {
            // No word boundary in 16 MiB: cut at the last character boundary.
            cut = (1..buf.len())
                .rev()
                .find(|&i| buf[i] & 0xC0 != 0x80)
                .unwrap_or(0);
        }
        if cut > 0 {
            f(&utf8(&buf[..cut])?)?;
            buf.drain(..cut);
        }
    }
}

/// Calls `f(line_number, line)` for each line of `path`, one line in memory at a time.
fn for_each_line(path: &Path, mut f: impl FnMut(usize, &str) -> Result<()>) -> Result<()> {
    use std::io::BufRead;
    let file = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("{}: reading it", path.display()), e))?;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => Error::file(path, "not UTF-8 text"),
            _ => Error::io(format!("{}: reading it", path.display()), e),
        })?;
        f(i + 1, &line)?;
    }
    Ok(())
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
    dir: &'a Path,
    width: TokenWidth,
    buf: Vec<u32>,
    written: Vec<PathBuf>,
}

impl<'a> ShardWriter<'a> {
    fn new(opts: &'a PrepareOptions, dir: &'a Path) -> Self {
        ShardWriter {
            opts,
            dir,
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
            .dir
            .join(format!("{}_{split}_{i:06}.bin", self.opts.name));
        write_shard(&path, &self.buf, self.width)?;
        self.written.push(path);
        self.buf.clear();
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<PathBuf>> {
        if self.written.is_empty() && self.buf.len() >= 2 {
            // Everything fits in the first shard, which would all be validation and
            // leave nothing to train on: the first tenth validates, the rest trains.
            let rest = self.buf.split_off((self.buf.len() / 10).max(1));
            self.flush()?;
            self.buf = rest;
        }
        if !self.buf.is_empty() {
            self.flush()?;
        }
        Ok(self.written)
    }
}

fn write_meta(opts: &PrepareOptions, dir: &Path) -> Result<()> {
    let meta = serde_json::json!({
        "tokenizer": opts.tokenizer.name(),
        "vocab_size": opts.tokenizer.vocab_size(),
        "eot": opts.tokenizer.eot(),
        "name": opts.name,
    });
    let text = serde_json::to_string_pretty(&meta)
        .map_err(|e| Error::Parse(format!("writing {META_FILE}: {e}")))?;
    crate::atomic::write_atomic(dir.join(META_FILE), text.as_bytes())
}
