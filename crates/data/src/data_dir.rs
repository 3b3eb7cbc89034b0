//! A data directory: token shards and the `data.json` that says how they were made.
//!
//! ```text
//! data.json                  {"tokenizer": "gpt2", "vocab_size": 50257, "eot": 50256, "name": "data"}
//! data_val_000000.bin        the first shard validates
//! data_train_000001.bin ...  the rest train, in name order
//! ```
//!
//! `brrr data prepare` writes both. A directory of llm.c's shards (its `dev/data/*.py`
//! write `NAME_val_000000.bin`, `NAME_train_000001.bin`, ... with header 20240520 and
//! GPT-2's tokens) needs no `data.json`: the name and tokenizer are read from the file
//! names and headers, since reading llm.c's shards as they are is the point of the
//! format. Only the shards of the directory's one dataset name are read, so stray files
//! never join a run, and the metadata is checked against what the tokenizer implies.

use crate::shard::{MAGIC_U16, MAGIC_U32, Shard, TokenWidth};
use brrr_backend::{Error, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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
    /// The name in `data.json` and on the command line: `bytes` or `gpt2`.
    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::Bytes => "bytes",
            TokenizerKind::Gpt2 => "gpt2",
        }
    }

    /// Number of token ids: 256 for bytes, 50,257 for GPT-2.
    pub fn vocab_size(self) -> usize {
        match self {
            TokenizerKind::Bytes => 256,
            TokenizerKind::Gpt2 => 50257,
        }
    }

    /// The end-of-text id that precedes every document: 0 for bytes, 50256 for GPT-2.
    pub fn eot(self) -> u32 {
        match self {
            TokenizerKind::Bytes => 0,
            TokenizerKind::Gpt2 => 50256,
        }
    }

    /// The kind named `name` ([`TokenizerKind::name`]'s inverse); any other name is an
    /// [`Error::Parse`].
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

/// The file beside the shards that says how they were tokenized.
pub const META_FILE: &str = "data.json";

/// What a data directory holds: its tokenizer and the name its shards start with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataMeta {
    /// The tokenizer the shards were written with; fixes the vocabulary size and the
    /// end-of-text id.
    pub tokenizer: TokenizerKind,
    /// Shards are `{name}_val_NNNNNN.bin` and `{name}_train_NNNNNN.bin`.
    pub name: String,
    /// `false` when inferred from llm.c's shards (no `data.json`).
    pub from_file: bool,
}

/// A prepared data directory: its tokenizer and its validation and training shards.
#[derive(Debug)]
pub struct DataDir {
    /// The tokenizer the shards were written with.
    pub tokenizer: TokenizerKind,
    /// The tokenizer's vocabulary size: the model's vocabulary must be at least this.
    pub vocab_size: usize,
    /// The `{name}_val_*.bin` shards, in name order (possibly none).
    pub val: Vec<Shard>,
    /// The `{name}_train_*.bin` shards, in name order (at least one), shared so that a
    /// [`ShardLoader`](crate::ShardLoader) per rank can hold them without a copy.
    pub train: std::sync::Arc<Vec<Shard>>,
}

/// Reads `dir/data.json` and checks it: a known tokenizer, and `vocab_size`, `eot` and
/// `name`, where present, consistent with it. Without the file, infers the metadata from
/// llm.c-named shards ([`infer_llmc_meta`]).
pub fn read_meta(dir: &Path) -> Result<DataMeta> {
    let path = dir.join(META_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return infer_llmc_meta(dir),
        Err(e) => return Err(Error::io(format!("{}: reading it", path.display()), e)),
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::file(&path, format!("not JSON: {e}")))?;
    let tokenizer = TokenizerKind::parse(v["tokenizer"].as_str().unwrap_or(""))
        .map_err(|e| Error::file(&path, format!("\"tokenizer\": {e}")))?;
    let expect = [
        ("vocab_size", tokenizer.vocab_size() as u64),
        ("eot", u64::from(tokenizer.eot())),
    ];
    for (field, want) in expect {
        if let Some(got) = v.get(field)
            && got.as_u64() != Some(want)
        {
            return Err(Error::file(
                &path,
                format!(
                    "\"{field}\": {got} does not match the {} tokenizer, whose {field} is {want}",
                    tokenizer.name()
                ),
            ));
        }
    }
    let name = match v.get("name") {
        None => "data".to_string(),
        Some(serde_json::Value::String(s)) if valid_name(s) => s.clone(),
        Some(other) => {
            return Err(Error::file(
                &path,
                format!("\"name\": {other} is not a shard file name prefix"),
            ));
        }
    };
    Ok(DataMeta {
        tokenizer,
        name,
        from_file: true,
    })
}

/// Whether `name` can prefix shard file names.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['/', '\\'])
}

/// The dataset names of the llm.c-named shards in `dir` (`{name}_{val|train}_{digits}.bin`)
/// with their split.
fn shard_names(dir: &Path) -> Result<Vec<(String, bool, PathBuf)>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("{}: listing it", dir.display()), e))?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let Some(file) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = file.strip_suffix(".bin") else {
            continue;
        };
        let Some((rest, digits)) = stem.rsplit_once('_') else {
            continue;
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        for (split, train) in [("_train", true), ("_val", false)] {
            if let Some(name) = rest.strip_suffix(split)
                && valid_name(name)
            {
                out.push((name.to_string(), train, path.clone()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The metadata of a directory of llm.c's shards, which carry none: the one dataset
/// name their file names share, and GPT-2's tokenizer for u16 shards (header 20240520,
/// what llm.c's GPT-2 data scripts write).
pub fn infer_llmc_meta(dir: &Path) -> Result<DataMeta> {
    let shards = shard_names(dir)?;
    let names: BTreeSet<&str> = shards
        .iter()
        .filter(|(_, train, _)| *train)
        .map(|(n, _, _)| n.as_str())
        .collect();
    let name = match names.len() {
        1 => names.into_iter().next().unwrap_or_default().to_string(),
        0 => {
            return Err(Error::file(
                dir,
                format!(
                    "no {META_FILE} and no llm.c shards (`NAME_train_000001.bin`): write \
                     one with `brrr data prepare`"
                ),
            ));
        }
        _ => {
            return Err(Error::file(
                dir,
                format!(
                    "no {META_FILE}, and the shards belong to {} datasets ({}): keep one \
                     per directory, or add a {META_FILE} naming one",
                    names.len(),
                    names.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    };
    let first = shards
        .iter()
        .find(|(n, train, _)| *n == name && *train)
        .map(|(_, _, p)| p.clone())
        .unwrap_or_default();
    let tokenizer = match header_magic(&first)? {
        MAGIC_U16 => TokenizerKind::Gpt2,
        MAGIC_U32 => {
            return Err(Error::file(
                &first,
                format!(
                    "u32 tokens (header {MAGIC_U32}, as llm.c's LLaMA 3 shards): brrr's \
                     tokenizers are bytes and gpt2; add a {META_FILE} if one of them wrote it"
                ),
            ));
        }
        m => {
            return Err(Error::file(
                &first,
                format!("not a token shard: header {m}, expected {MAGIC_U16} or {MAGIC_U32}"),
            ));
        }
    };
    Ok(DataMeta {
        tokenizer,
        name,
        from_file: false,
    })
}

/// The first header word of a shard.
fn header_magic(path: &Path) -> Result<i32> {
    use std::io::Read;
    let mut word = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut word))
        .map_err(|e| Error::io(format!("{}: reading its header", path.display()), e))?;
    Ok(i32::from_le_bytes(word))
}

/// Opens what `brrr data prepare` or llm.c wrote: the shards of the directory's dataset
/// ([`read_meta`]'s name), `_val_` ones validating and `_train_` ones training, each in
/// name order. A shard whose tokens are wider than the tokenizer's vocabulary needs
/// is refused.
pub fn open_data_dir(dir: &Path) -> Result<DataDir> {
    let meta = read_meta(dir)?;
    let (mut val, mut train) = (Vec::new(), Vec::new());
    for (name, is_train, path) in shard_names(dir)? {
        if name != meta.name {
            continue;
        }
        let shard = Shard::open(&path)?;
        let want = TokenWidth::for_vocab(meta.tokenizer.vocab_size());
        if shard.header().width.bytes() > want.bytes() {
            return Err(Error::file(
                &path,
                format!(
                    "{}-byte tokens, but the {} tokenizer's {} ids fit in {}",
                    shard.header().width.bytes(),
                    meta.tokenizer.name(),
                    meta.tokenizer.vocab_size(),
                    want.bytes()
                ),
            ));
        }
        if is_train { &mut train } else { &mut val }.push(shard);
    }
    if train.is_empty() {
        return Err(Error::file(
            dir,
            format!("no training shards (`{}_train_*.bin`)", meta.name),
        ));
    }
    Ok(DataDir {
        tokenizer: meta.tokenizer,
        vocab_size: meta.tokenizer.vocab_size(),
        val,
        train: std::sync::Arc::new(train),
    })
}

/// What a dataset directory holds now: `data.json` and shards named as datasets name
/// them (`{name}_{val|train}_{digits}.bin`, of any dataset name). Other files, another
/// `.bin` among them (a pipeline stage's checkpoint, say), are not the dataset's and
/// are never removed with it.
fn dataset_files(dir: &Path) -> Vec<PathBuf> {
    let meta = dir.join(META_FILE);
    let mut found: Vec<PathBuf> = shard_names(dir)
        .map(|shards| shards.into_iter().map(|(_, _, path)| path).collect())
        .unwrap_or_default();
    if meta.is_file() {
        found.push(meta);
    }
    found.sort();
    found
}

/// Refuses a directory that already holds a dataset unless `replace`; writes nothing.
pub fn refuse_existing_dataset(dir: &Path, replace: bool) -> Result<()> {
    let found = dataset_files(dir);
    if found.is_empty() || replace {
        return Ok(());
    }
    Err(Error::file(
        dir,
        format!(
            "already holds a dataset ({} files: {META_FILE} or shards): pass --force to \
             replace it, or another --out",
            found.len()
        ),
    ))
}

/// Removes the dataset in `dir`: its `data.json` and shards (`{name}_{val|train}_N.bin`),
/// only those, so no old shard trains beside a new dataset and nothing else is lost.
pub fn remove_dataset(dir: &Path) -> Result<()> {
    for path in dataset_files(dir) {
        std::fs::remove_file(&path).map_err(|e| {
            Error::io(
                format!("{}: removing the replaced dataset", path.display()),
                e,
            )
        })?;
    }
    Ok(())
}
