//! [`DataSpec`]: what a run trains on, opened once per process from its
//! [`DataOptions`] (a text corpus, generated text, or a directory of token shards;
//! brrr-train's `TrainConfig::data_options` gives a run's), and the batch source each
//! rank draws from.
//!
//! Every rank of every layout draws the same *global* batches from the same seed; an
//! engine keeps its own rows of each (a data-parallel replica its `1/dp`, a pipeline
//! stage the ids or the targets). So a parallel run sees exactly the batches one device
//! sees, which is what lets its losses be checked against one device's.

use crate::corpus::{Batch, Batcher, Corpus, SYNTHETIC, synthetic_corpus, val_batches};
use crate::data_dir::{DataDir, open_data_dir};
use crate::prefetch::{Prefetcher, SendSource};
use brrr_backend::{Error, Result};
use std::path::Path;

/// The most batches a prefetch thread may hold ahead: each is a whole global batch in
/// host memory, and a queue longer than this buys nothing.
pub const MAX_PREFETCH: usize = 1024;

/// What [`DataSpec`] needs of a run's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataOptions {
    /// A directory of token shards; empty for a text corpus.
    pub data: String,
    /// A text file, or [`SYNTHETIC`] for generated text (used when `data` is empty).
    pub corpus: String,
    /// Seeds the batch order (and the generated text).
    pub seed: u64,
    /// Sequences per global batch.
    pub batch_size: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Validation batches per evaluation.
    pub eval_batches: usize,
    /// The model's vocabulary: every shard token must be below it.
    pub vocab_size: usize,
    /// Whether shard batches carry document masks (attention stays inside a document).
    pub document_mask: bool,
}

/// A run's data, opened.
pub enum DataSpec {
    /// A text corpus (or [`SYNTHETIC`] text), byte-tokenised.
    Corpus(Corpus),
    /// Token shards written by `brrr data prepare` (or llm.c).
    Shards(DataDir),
}

impl DataSpec {
    /// Opens what `cfg` names: `cfg.data` (shards) if set, else `cfg.corpus`.
    pub fn open(cfg: &DataOptions) -> Result<Self> {
        if !cfg.data.is_empty() {
            Ok(DataSpec::Shards(open_data_dir(Path::new(&cfg.data))?))
        } else if cfg.corpus == SYNTHETIC {
            Ok(DataSpec::Corpus(synthetic_corpus(cfg.seed)?))
        } else {
            Ok(DataSpec::Corpus(Corpus::load(&cfg.corpus)?))
        }
    }

    /// The corpus, when training on text.
    pub fn corpus(&self) -> Option<&Corpus> {
        match self {
            DataSpec::Corpus(c) => Some(c),
            DataSpec::Shards(_) => None,
        }
    }

    /// One rank's source of global training batches and the fixed global validation
    /// batches, with `prefetch` batches prepared ahead on a thread (0: none). The
    /// batches are the same whatever `prefetch` is.
    pub fn source(&self, cfg: &DataOptions, prefetch: usize) -> Result<(SendSource, Vec<Batch>)> {
        if prefetch > MAX_PREFETCH {
            return Err(Error::invalid(
                "train",
                format!("--prefetch {prefetch} is more than {MAX_PREFETCH} batches ahead"),
            ));
        }
        let (source, val): (SendSource, Vec<Batch>) = match self {
            DataSpec::Corpus(corpus) => (
                Box::new(Batcher::for_corpus(
                    corpus,
                    cfg.batch_size,
                    cfg.seq_len,
                    cfg.seed,
                )?),
                val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches)?,
            ),
            DataSpec::Shards(dir) => shard_source(cfg, dir)?,
        };
        match prefetch {
            // Without a thread, keep the source itself: a `Batcher` hands a
            // data-parallel rank only its rows (`BatchSource::next_rows`).
            0 => Ok((source, val)),
            n => Ok((Box::new(Prefetcher::new(source, n)), val)),
        }
    }
}

/// The training loader over a data directory's shards (one device's stream: rank 0 of
/// 1, whatever the layout) and its fixed validation batches, with document masks under
/// `cfg.document_mask`.
fn shard_source(cfg: &DataOptions, dir: &DataDir) -> Result<(SendSource, Vec<Batch>)> {
    let loader = crate::ShardLoader::new(
        dir.train.clone(),
        cfg.batch_size,
        cfg.seq_len,
        cfg.seed,
        cfg.vocab_size,
        0,
        1,
    )?;
    let val = crate::shard_val_batches(&dir.val, cfg.batch_size, cfg.seq_len, cfg.eval_batches)?;
    if !cfg.document_mask {
        return Ok((Box::new(loader), val));
    }
    let eot = dir.tokenizer.eot();
    let val = val
        .into_iter()
        .map(|b| b.with_document_mask(eot))
        .collect::<Result<_>>()?;
    Ok((Box::new(loader.with_document_mask(eot)), val))
}
