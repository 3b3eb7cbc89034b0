//! The training text, its tokenizer, and reproducible batches.
//!
//! # Tokenizer: bytes
//!
//! Tokens are the bytes of the UTF-8 text, so the vocabulary is the 256 byte values.
//! This is the simplest honest choice for a small model trained on a CPU:
//!
//! - there is nothing to train, store or version: a checkpoint needs only the name
//!   [`ByteTokenizer::NAME`], and any text (a prompt with an accent or an emoji) can be
//!   encoded, where a character vocabulary built from the corpus would have to reject
//!   characters it never saw;
//! - 99.97 % of the shipped corpus's characters are ASCII, so bytes cost almost nothing
//!   in sequence length over characters (2,671,649 bytes against 2,670,322 characters);
//! - the embedding and the output layer carry 256 rows, of which the corpus uses 96;
//!   the 160 unused rows are a few percent of a small GPT's parameters, and their
//!   logits are quickly pushed down.
//!
//! A model that learned nothing predicts the uniform distribution, a loss of
//! ln 256 ≈ 5.545 nats per token; one that learned only how often each byte occurs
//! reaches the corpus's unigram entropy ([`unigram_entropy_nats`]). Those two numbers
//! frame a loss curve.
//!
//! # Batches
//!
//! Training batches are windows at uniformly random positions of the training split,
//! drawn from a [`ChaCha8Rng`]. ChaCha's output stream is fully specified by (seed,
//! stream, position), and the position can be read and set, so [`Batcher::state`]
//! captures everything needed for a resumed run to draw exactly the batches the
//! uninterrupted run would have drawn. Positions are drawn from raw `next_u64` words
//! with our own unbiased bounded sampling ([`Batcher::next_batch`]), not with `rand`'s
//! range sampling, whose algorithm is not promised to stay the same across versions.
//!
//! Validation batches ([`val_batches`]) use no randomness at all: fixed windows spread
//! evenly over the held-out split, so every evaluation of every run scores the same text.

use brrr_backend::{Error, Result};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The largest corpus [`Corpus::load`] reads: 1 GiB. The whole text is held in memory
/// (twice: the corpus and the training split the [`Batcher`] copies), and a path such as
/// `/dev/zero` or a named pipe never ends; reading stops one byte past this bound.
pub const MAX_CORPUS_BYTES: u64 = 1 << 30;

/// The last `1 / VAL_DENOMINATOR` of the corpus is held out for validation.
pub const VAL_DENOMINATOR: usize = 10;

/// Byte-level tokenizer: token `i` is the byte `i`. See the module documentation for
/// why bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ByteTokenizer;

impl ByteTokenizer {
    /// What a checkpoint records under its tokenizer key.
    pub const NAME: &'static str = "bytes";
    /// Token ids are `0..256`, one per byte value.
    pub const VOCAB_SIZE: usize = 256;

    /// The UTF-8 bytes of `text`, as token ids.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    /// Text from token ids. A model can emit a byte sequence that is not valid UTF-8
    /// (half of a multi-byte character); such bytes, and ids outside the vocabulary,
    /// become U+FFFD rather than an error, because this is for showing samples.
    pub fn decode(&self, tokens: &[u32]) -> String {
        let mut bytes = Vec::with_capacity(tokens.len());
        for &t in tokens {
            match u8::try_from(t) {
                Ok(b) => bytes.push(b),
                Err(_) => bytes.extend_from_slice("\u{FFFD}".as_bytes()),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// A UTF-8 text corpus as byte tokens, split into training and validation parts.
#[derive(Clone, Debug)]
pub struct Corpus {
    path: PathBuf,
    text: String,
    split: usize,
}

impl Corpus {
    /// Reads a UTF-8 text file of at most [`MAX_CORPUS_BYTES`]. Errors name the path and
    /// say what is wrong: missing, unreadable, too large, empty, or not UTF-8 (with the
    /// offset of the first bad byte).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::load_at_most(path, MAX_CORPUS_BYTES)
    }

    /// [`Corpus::load`] with another size bound. The file is read through
    /// `Read::take(max_bytes + 1)`, so a device or pipe that never ends (`/dev/zero`)
    /// costs at most `max_bytes + 1` bytes of memory before the error.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load_at_most(path: impl AsRef<Path>, max_bytes: u64) -> Result<Self> {
        use std::io::Read;
        let path = path.as_ref();
        let open_err = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => Error::file(path, "corpus file not found"),
            _ => Error::io(format!("{}: reading the corpus", path.display()), e),
        };
        let file = std::fs::File::open(path).map_err(open_err)?;
        let mut bytes = Vec::new();
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(open_err)?;
        if bytes.len() as u64 > max_bytes {
            return Err(Error::file(
                path,
                format!(
                    "corpus is larger than the maximum of {max_bytes} bytes ({:.1} GiB) brrr \
                     reads into memory",
                    max_bytes as f64 / (1u64 << 30) as f64
                ),
            ));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            Error::file(
                path,
                format!("corpus is not UTF-8 text: invalid byte sequence at byte offset {at}"),
            )
        })?;
        Self::from_text(path, text)
    }

    /// A corpus from text already in memory; `path` is only used in messages.
    pub fn from_text(path: impl AsRef<Path>, text: impl Into<String>) -> Result<Self> {
        let path = path.as_ref();
        let text = text.into();
        if text.is_empty() {
            return Err(Error::file(path, "corpus is empty"));
        }
        let split = text.len() - text.len() / VAL_DENOMINATOR;
        Ok(Corpus {
            path: path.to_path_buf(),
            text,
            split,
        })
    }

    /// Where the text came from (for [`Corpus::from_text`], the name given).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole text, training and validation parts together.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Every token (byte) of the corpus.
    pub fn tokens(&self) -> &[u8] {
        self.text.as_bytes()
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// Always false: [`Corpus::load`] rejects empty files.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Index of the first validation token: the first `len - len / 10` tokens train.
    /// The split is by position, not shuffled, so that validation text is text the
    /// model never saw any part of (windows do not straddle the boundary).
    pub fn split_index(&self) -> usize {
        self.split
    }

    /// The training tokens: `tokens()[..split_index()]`.
    pub fn train(&self) -> &[u8] {
        &self.tokens()[..self.split]
    }

    /// The held-out validation tokens: `tokens()[split_index()..]`, the last tenth.
    pub fn val(&self) -> &[u8] {
        &self.tokens()[self.split..]
    }

    /// `fnv1a64:<hex>:<len>` of the bytes. Record it in a checkpoint and compare on
    /// resume: batch positions only mean the same text if the corpus is the same.
    pub fn fingerprint(&self) -> String {
        fingerprint(self.tokens())
    }
}

/// `fnv1a64:<hex>:<len>` of `bytes` (FNV-1a, 64 bits).
pub fn fingerprint(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fnv1a64:{h:016x}:{}", bytes.len())
}

/// Entropy of the byte (unigram) distribution of `tokens`, in nats: the loss of the
/// best model that ignores context. Divide by ln 2 for bits.
pub fn unigram_entropy_nats(tokens: &[u8]) -> f64 {
    let mut counts = [0u64; 256];
    for &b in tokens {
        counts[usize::from(b)] += 1;
    }
    let n = tokens.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.ln()
        })
        .sum()
}

/// One batch: `batch` rows of `seq` tokens each, row-major (`[batch, seq]`).
/// `targets[r][t] = inputs[r][t + 1]`: each position predicts the next token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Token ids, `batch * seq` of them, row-major.
    pub inputs: Vec<u32>,
    /// The token after each input, same layout as `inputs`.
    pub targets: Vec<u32>,
    /// Rows (sequences) in the batch.
    pub batch: usize,
    /// Tokens per row.
    pub seq: usize,
    /// Where documents start inside the rows, when attention must not cross them.
    pub mask: Option<DocumentMask>,
}

impl Batch {
    fn with_capacity(batch: usize, seq: usize) -> Self {
        Batch {
            inputs: Vec::with_capacity(batch * seq),
            targets: Vec::with_capacity(batch * seq),
            batch,
            seq,
            mask: None,
        }
    }

    /// This batch with a [`DocumentMask`] that starts a document at every `eot` token.
    pub fn with_document_mask(mut self, eot: u32) -> Result<Self> {
        self.mask = Some(DocumentMask::at_separators(
            &self.inputs,
            self.batch,
            self.seq,
            eot,
        )?);
        Ok(self)
    }

    /// Rows `rows` of this batch (and of its document mask): a data-parallel rank's
    /// share of a global batch. An error if the rows are not inside the batch.
    pub fn rows(&self, rows: std::ops::Range<usize>) -> Result<Batch> {
        if rows.start > rows.end || rows.end > self.batch {
            return Err(Error::shape(
                "Batch::rows",
                format!("rows {rows:?} of a batch of {} rows", self.batch),
            ));
        }
        let t = rows.start * self.seq..rows.end * self.seq;
        if self.inputs.len() < t.end || self.targets.len() < t.end {
            return Err(Error::shape(
                "Batch::rows",
                format!(
                    "{} inputs and {} targets are not {} rows of {}",
                    self.inputs.len(),
                    self.targets.len(),
                    self.batch,
                    self.seq
                ),
            ));
        }
        let mask = match &self.mask {
            None => None,
            Some(m) if m.positions.len() >= t.end && m.segments.len() >= t.end => {
                Some(DocumentMask {
                    positions: m.positions[t.clone()].to_vec(),
                    segments: m.segments[t.clone()].to_vec(),
                })
            }
            Some(m) => {
                return Err(Error::shape(
                    "Batch::rows",
                    format!(
                        "the document mask has {} positions for {} tokens",
                        m.positions.len(),
                        self.inputs.len()
                    ),
                ));
            }
        };
        Ok(Batch {
            inputs: self.inputs[t.clone()].to_vec(),
            targets: self.targets[t].to_vec(),
            batch: rows.len(),
            seq: self.seq,
            mask,
        })
    }

    /// Appends the window starting at `pos`: `seq` inputs and the `seq` tokens after
    /// each of them.
    fn push_window(&mut self, tokens: &[u8], pos: usize) {
        let w = &tokens[pos..pos + self.seq + 1];
        self.inputs
            .extend(w[..self.seq].iter().map(|&b| u32::from(b)));
        self.targets.extend(w[1..].iter().map(|&b| u32::from(b)));
    }
}

/// Document boundaries inside a batch's rows, `[batch, seq]` each: every token's
/// position inside its document (restarting at 0, for the position embedding) and its
/// document's segment id (attention only looks at earlier tokens of the same segment).
///
/// A window cut from a stream of concatenated documents holds the end of one and the
/// start of the next; without the mask a token attends to the unrelated document before
/// it. Masking at document boundaries inside each window is how Llama 3 trains
/// (Grattafiori et al. 2024, §3.2): nothing is padded, only attention changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentMask {
    /// Each token's position inside its document, restarting at 0 at every boundary;
    /// `batch * seq` values, row-major like [`Batch::inputs`].
    pub positions: Vec<u32>,
    /// Each token's document index inside its row (0, 1, ...), same layout; a token
    /// attends only to earlier tokens with the same value.
    pub segments: Vec<u32>,
}

impl DocumentMask {
    /// Starts a new document at every `eot` token of each row (`brrr data prepare`
    /// writes one *before* each document, as llm.c does): the separator gets position 0
    /// of its document, and a row's first token is always position 0 of segment 0.
    pub fn at_separators(inputs: &[u32], batch: usize, seq: usize, eot: u32) -> Result<Self> {
        if batch.checked_mul(seq) != Some(inputs.len()) || seq == 0 {
            return Err(Error::shape(
                "DocumentMask::at_separators",
                format!("{} tokens are not {batch} rows of {seq}", inputs.len()),
            ));
        }
        let mut positions = Vec::with_capacity(inputs.len());
        let mut segments = Vec::with_capacity(inputs.len());
        for row in inputs.chunks_exact(seq) {
            let (mut pos, mut seg) = (0u32, 0u32);
            for (t, &tok) in row.iter().enumerate() {
                if tok == eot && t > 0 {
                    (pos, seg) = (0, seg + 1);
                }
                positions.push(pos);
                segments.push(seg);
                pos += 1;
            }
        }
        Ok(DocumentMask {
            positions,
            segments,
        })
    }
}

/// Everything that determines the batches a [`Batcher`] draws next.
///
/// It is written into checkpoints as a string (`Display` / `FromStr`):
/// `seed=42 stream=0 word_pos=1234`. `word_pos` counts 32-bit words of ChaCha output
/// consumed, and is a `u128`, which TOML and JSON numbers cannot hold; a string can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RngState {
    /// The seed the ChaCha8 generator was created from.
    pub seed: u64,
    /// Independent streams for the same seed, e.g. one per data-parallel rank.
    pub stream: u64,
    /// How far the generator has advanced, in 32-bit words of ChaCha output.
    pub word_pos: u128,
}

impl RngState {
    /// The state of a fresh generator.
    pub fn new(seed: u64, stream: u64) -> Self {
        RngState {
            seed,
            stream,
            word_pos: 0,
        }
    }

    fn rng(&self) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(self.stream);
        rng.set_word_pos(self.word_pos);
        rng
    }
}

impl fmt::Display for RngState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed={} stream={} word_pos={}",
            self.seed, self.stream, self.word_pos
        )
    }
}

impl FromStr for RngState {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| Error::Parse(format!("batch RNG state {s:?}: {why}"));
        let mut fields = s.split_whitespace();
        let mut next = |key: &str| -> Result<&str> {
            let kv = fields
                .next()
                .ok_or_else(|| bad(&format!("missing `{key}=`")))?;
            kv.strip_prefix(key)
                .and_then(|r| r.strip_prefix('='))
                .ok_or_else(|| bad(&format!("expected `{key}=...`, found {kv:?}")))
        };
        let seed = next("seed")?;
        let stream = next("stream")?;
        let word_pos = next("word_pos")?;
        let state = RngState {
            seed: seed.parse().map_err(|_| bad("seed is not a u64"))?,
            stream: stream.parse().map_err(|_| bad("stream is not a u64"))?,
            word_pos: word_pos
                .parse()
                .map_err(|_| bad("word_pos is not a u128"))?,
        };
        if fields.next().is_some() {
            return Err(bad("unexpected text after word_pos"));
        }
        Ok(state)
    }
}

/// Where a trainer (brrr-train's `Trainer`, every engine) gets its training batches.
///
/// A source is deterministic given its position: [`BatchSource::position`] is saved in
/// every checkpoint and [`BatchSource::set_position`] restores it, after which the
/// source must yield exactly the batches it would have yielded had the run never
/// stopped. That is what makes a resumed run continue bit for bit.
pub trait BatchSource {
    /// The next training batch (`[batch, seq]` inputs and targets).
    fn next_batch(&mut self) -> Result<Batch>;
    /// Where the source stands, as text for the checkpoint's metadata.
    fn position(&self) -> String;
    /// Rows `rows` of the next training batch, advancing the source exactly as
    /// [`BatchSource::next_batch`] does: a data-parallel rank asks for its own rows, and
    /// the ranks' rows together are the batch one device would train on. The default
    /// draws the whole batch and keeps the rows; a source that can produce only the
    /// rows asked for ([`Batcher`]) overrides it. `brrr-data`'s sources keep the
    /// default: its `Prefetcher` draws whole batches ahead on another thread (asking it
    /// for rows would need the rows before the batch is drawn), and its `ShardLoader`
    /// is sharded by rank already, in an order of its own.
    fn next_rows(&mut self, rows: std::ops::Range<usize>) -> Result<Batch> {
        self.next_batch()?.rows(rows)
    }
    /// Continues from a [`BatchSource::position`] string; errors if it is not one.
    fn set_position(&mut self, position: &str) -> Result<()>;
    /// The identity of the data (a checkpoint records it, and resuming on other data
    /// is refused: the saved position would mean other text).
    fn fingerprint(&self) -> String;
}

impl BatchSource for Batcher {
    fn next_batch(&mut self) -> Result<Batch> {
        Ok(Batcher::next_batch(self))
    }

    fn next_rows(&mut self, rows: std::ops::Range<usize>) -> Result<Batch> {
        Batcher::next_rows(self, rows)
    }

    /// [`RngState`]'s text form, `seed=.. stream=.. word_pos=..`.
    fn position(&self) -> String {
        self.state().to_string()
    }

    fn set_position(&mut self, position: &str) -> Result<()> {
        self.set_state(position.parse()?);
        Ok(())
    }

    fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }
}

/// The `corpus` name of a run on generated data.
pub const SYNTHETIC: &str = "synthetic";

/// 4 MiB of uniformly random printable ASCII (95 symbols) from `seed`: a corpus for
/// throughput benchmarks, on which the loss cannot fall below ln 95.
pub fn synthetic_corpus(seed: u64) -> Result<Corpus> {
    use rand::Rng;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED);
    let text: String = (0..4 << 20)
        .map(|_| char::from(rng.random_range(32u8..127)))
        .collect();
    Corpus::from_text(SYNTHETIC, text)
}

/// Draws training batches from one split, reproducibly and resumably.
#[derive(Clone, Debug)]
pub struct Batcher {
    tokens: Vec<u8>,
    /// What the checkpoint records as the data's identity (see [`BatchSource::fingerprint`]).
    fingerprint: String,
    batch: usize,
    seq: usize,
    seed: u64,
    rng: ChaCha8Rng,
}

impl Batcher {
    /// A batcher over a copy of `tokens` (normally [`Corpus::train`]), with a fresh
    /// generator on stream 0.
    pub fn new(tokens: &[u8], batch: usize, seq: usize, seed: u64) -> Result<Self> {
        Self::with_state(tokens, batch, seq, RngState::new(seed, 0))
    }

    /// A batcher that continues from a saved [`RngState`].
    pub fn with_state(tokens: &[u8], batch: usize, seq: usize, state: RngState) -> Result<Self> {
        check_window("Batcher", tokens.len(), batch, seq)?;
        Ok(Batcher {
            tokens: tokens.to_vec(),
            fingerprint: fingerprint(tokens),
            batch,
            seq,
            seed: state.seed,
            rng: state.rng(),
        })
    }

    /// A batcher over the training split of `corpus` whose
    /// [`fingerprint`](BatchSource::fingerprint) is the whole corpus's (what checkpoints
    /// have always recorded).
    pub fn for_corpus(corpus: &Corpus, batch: usize, seq: usize, seed: u64) -> Result<Self> {
        let mut b = Self::new(corpus.train(), batch, seq, seed)?;
        b.fingerprint = corpus.fingerprint();
        Ok(b)
    }

    /// Rows per batch.
    pub fn batch_size(&self) -> usize {
        self.batch
    }

    /// Tokens per row.
    pub fn seq_len(&self) -> usize {
        self.seq
    }

    /// Where the generator stands: save this with the model, and pass it to
    /// [`Batcher::with_state`] or [`Batcher::set_state`] to continue.
    pub fn state(&self) -> RngState {
        RngState {
            seed: self.seed,
            stream: self.rng.get_stream(),
            word_pos: self.rng.get_word_pos(),
        }
    }

    /// Moves the generator to `state` (forwards or back): the next batch is the one
    /// drawn after [`Batcher::state`] returned `state`. The tokens are not changed, so
    /// the caller must check the corpus is the same (compare fingerprints).
    pub fn set_state(&mut self, state: RngState) {
        self.seed = state.seed;
        self.rng = state.rng();
    }

    /// The next batch: `batch` windows at independent uniform positions in
    /// `0 ..= len - seq - 1`.
    pub fn next_batch(&mut self) -> Batch {
        let starts = (self.tokens.len() - self.seq) as u64;
        let mut out = Batch::with_capacity(self.batch, self.seq);
        for _ in 0..self.batch {
            let pos = below(&mut self.rng, starts) as usize;
            out.push_window(&self.tokens, pos);
        }
        out
    }
}

impl Batcher {
    /// Rows `rows` of [`Batcher::next_batch`]'s next batch, leaving the generator where
    /// `next_batch` leaves it: every row's start position is drawn (a few `u64`s each,
    /// in order, since rejection sampling draws a variable number), and only the rows
    /// asked for are copied out of the corpus.
    pub fn next_rows(&mut self, rows: std::ops::Range<usize>) -> Result<Batch> {
        if rows.start > rows.end || rows.end > self.batch {
            return Err(Error::shape(
                "Batcher::next_rows",
                format!("rows {rows:?} of a batch of {} rows", self.batch),
            ));
        }
        let starts = (self.tokens.len() - self.seq) as u64;
        let mut out = Batch::with_capacity(rows.len(), self.seq);
        for row in 0..self.batch {
            let pos = below(&mut self.rng, starts) as usize;
            if rows.contains(&row) {
                out.push_window(&self.tokens, pos);
            }
        }
        Ok(out)
    }
}

/// A uniform integer in `0..n` (`n > 0`) from whole `u64` draws, without modulo bias
/// (Lemire, "Fast random integer generation in an interval", 2019): the high half of
/// `x * n` is uniform once the few low halves that would over-represent some values
/// are rejected.
fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    debug_assert!(n > 0);
    // 2^64 mod n: the number of low halves to reject.
    let threshold = n.wrapping_neg() % n;
    loop {
        let m = u128::from(rng.next_u64()) * u128::from(n);
        if (m as u64) >= threshold {
            return (m >> 64) as u64;
        }
    }
}

fn check_window(what: &'static str, len: usize, batch: usize, seq: usize) -> Result<()> {
    if batch == 0 || seq == 0 {
        return Err(Error::invalid(
            what,
            format!(
                "batch size and sequence length must be positive (got batch {batch}, seq {seq})"
            ),
        ));
    }
    if len < seq + 1 {
        return Err(Error::invalid(
            what,
            format!("the split has {len} tokens, too few for one window of seq {seq} + 1 target"),
        ));
    }
    Ok(())
}

/// `n_batches` fixed validation batches from `tokens` (normally [`Corpus::val`]):
/// `n_batches * batch` windows with start positions spread evenly from the first to the
/// last possible start, in order. No randomness, so every evaluation scores the same
/// text and runs are comparable. Windows overlap only if the split is too short to
/// hold them side by side.
pub fn val_batches(
    tokens: &[u8],
    batch: usize,
    seq: usize,
    n_batches: usize,
) -> Result<Vec<Batch>> {
    check_window("val_batches", tokens.len(), batch, seq)?;
    let count = n_batches.checked_mul(batch).ok_or_else(|| {
        Error::invalid(
            "val_batches",
            format!("{n_batches} batches of {batch} rows overflow the address space"),
        )
    })?;
    let last_start = (tokens.len() - seq - 1) as u128;
    let mut out = Vec::new();
    out.try_reserve_exact(n_batches).map_err(|e| {
        Error::invalid(
            "val_batches",
            format!("cannot allocate {n_batches} validation batches: {e}"),
        )
    })?;
    for b in 0..n_batches {
        let mut cur = Batch::with_capacity(batch, seq);
        for r in 0..batch {
            let i = (b * batch + r) as u128;
            // Exact integer interpolation: the first window starts at 0, the last at
            // `last_start`, whatever the platform's float rounding.
            let pos = if count > 1 {
                i * last_start / (count as u128 - 1)
            } else {
                0
            };
            cur.push_window(tokens, pos as usize);
        }
        out.push(cur);
    }
    Ok(out)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn document_mask_restarts_positions_at_each_separator() {
        const E: u32 = 9;
        // Two rows of 5: a separator mid-row, one at a row's start (no new segment:
        // the row starts one anyway), and two in a row.
        let inputs = [1, 2, E, 3, 4, E, 5, E, E, 6];
        let m = DocumentMask::at_separators(&inputs, 2, 5, E).unwrap();
        assert_eq!(m.positions, [0, 1, 0, 1, 2, 0, 1, 0, 0, 1]);
        assert_eq!(m.segments, [0, 0, 1, 1, 1, 0, 0, 1, 2, 2]);
        let e = DocumentMask::at_separators(&inputs, 3, 5, E).unwrap_err();
        assert!(e.to_string().contains("not 3 rows of 5"), "{e}");
        let b = Batch {
            inputs: inputs.to_vec(),
            targets: inputs.to_vec(),
            batch: 2,
            seq: 5,
            mask: None,
        };
        assert_eq!(b.with_document_mask(E).unwrap().mask, Some(m));
    }

    /// A deterministic pseudo-text with many distinct windows.
    fn text(n: usize) -> String {
        let words = [
            "the ", "union ", "is ", "strong", ". ", "and ", "we ", "shall ", "grow\n",
        ];
        let mut s = String::new();
        let mut x: u32 = 12345;
        while s.len() < n {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            s.push_str(words[(x >> 16) as usize % words.len()]);
        }
        s.truncate(n);
        s
    }

    fn assert_windows(tokens: &[u8], b: &Batch) {
        assert_eq!(b.inputs.len(), b.batch * b.seq);
        assert_eq!(b.targets.len(), b.batch * b.seq);
        for r in 0..b.batch {
            let inp = &b.inputs[r * b.seq..(r + 1) * b.seq];
            let tgt = &b.targets[r * b.seq..(r + 1) * b.seq];
            // Targets are the inputs shifted left by one.
            assert_eq!(&inp[1..], &tgt[..b.seq - 1]);
            // And the row is a real window of the text, target included.
            let mut want: Vec<u32> = inp.to_vec();
            want.push(tgt[b.seq - 1]);
            let found = tokens
                .windows(b.seq + 1)
                .any(|w| w.iter().map(|&x| u32::from(x)).eq(want.iter().copied()));
            assert!(found, "row {r} is not a window of the corpus");
        }
    }

    #[test]
    fn tokenizer_round_trips_utf8_and_replaces_bad_ids() {
        let tok = ByteTokenizer;
        let s = "Fellow citizens — “the state of the Union” is strong. é 🦀";
        let ids = tok.encode(s);
        assert_eq!(ids.len(), s.len());
        assert!(
            ids.iter()
                .all(|&t| (t as usize) < ByteTokenizer::VOCAB_SIZE)
        );
        assert_eq!(tok.decode(&ids), s);
        assert_eq!(tok.decode(&[104, 105, 300, 0xE2]), "hi\u{FFFD}\u{FFFD}");
    }

    #[test]
    fn targets_are_inputs_shifted_by_one() {
        let c = Corpus::from_text("t", text(5000)).unwrap();
        let mut b = Batcher::new(c.train(), 4, 16, 7).unwrap();
        for _ in 0..5 {
            let batch = b.next_batch();
            assert_eq!((batch.batch, batch.seq), (4, 16));
            assert_windows(c.train(), &batch);
        }
    }

    #[test]
    fn same_seed_same_batches_other_seed_or_stream_differs() {
        let t = text(10_000);
        let draw = |state: RngState| {
            let mut b = Batcher::with_state(t.as_bytes(), 3, 8, state).unwrap();
            (0..4).map(|_| b.next_batch()).collect::<Vec<_>>()
        };
        assert_eq!(draw(RngState::new(1, 0)), draw(RngState::new(1, 0)));
        assert_ne!(draw(RngState::new(1, 0)), draw(RngState::new(2, 0)));
        assert_ne!(draw(RngState::new(1, 0)), draw(RngState::new(1, 1)));
    }

    #[test]
    fn resumed_batcher_draws_what_the_uninterrupted_one_would() {
        let c = Corpus::from_text("t", text(20_000)).unwrap();
        let mut full = Batcher::new(c.train(), 4, 32, 1234).unwrap();
        let all: Vec<Batch> = (0..10).map(|_| full.next_batch()).collect();

        let mut first = Batcher::new(c.train(), 4, 32, 1234).unwrap();
        for want in &all[..4] {
            assert_eq!(&first.next_batch(), want);
        }
        // Save through the string form, as a checkpoint does.
        let saved = first.state().to_string();
        drop(first);
        let state: RngState = saved.parse().unwrap();
        assert_eq!(state.seed, 1234);
        assert!(state.word_pos > 0);
        let mut resumed = Batcher::with_state(c.train(), 4, 32, state).unwrap();
        for want in &all[4..] {
            assert_eq!(&resumed.next_batch(), want);
        }
        assert_eq!(resumed.state(), full.state());

        // set_state rewinds an existing batcher too.
        let mut again = Batcher::new(c.train(), 4, 32, 99).unwrap();
        again.set_state(state);
        assert_eq!(again.next_batch(), all[4]);
    }

    #[test]
    fn bounded_sampling_covers_the_range_uniformly() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut counts = [0u32; 7];
        for _ in 0..70_000 {
            counts[below(&mut rng, 7) as usize] += 1;
        }
        // Each bucket expects 10,000; 5 sigma is about 450.
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(below(&mut rng, 1), 0);
        // First and last positions are reachable: a 2-token window in 3 tokens.
        let mut b = Batcher::new(b"abc", 64, 1, 5).unwrap();
        let firsts: std::collections::BTreeSet<u32> = b.next_batch().inputs.into_iter().collect();
        assert_eq!(firsts, [u32::from(b'a'), u32::from(b'b')].into());
    }

    #[test]
    fn rng_state_parse_errors() {
        let ok: RngState = "seed=1 stream=2 word_pos=340282366920938463463374607431768211455"
            .parse()
            .unwrap();
        assert_eq!(ok.word_pos, u128::MAX);
        for bad in [
            "",
            "seed=1",
            "seed=1 stream=2",
            "seed=x stream=2 word_pos=3",
            "stream=2 seed=1 word_pos=3",
            "seed=1 stream=2 word_pos=3 extra",
            "seed=-1 stream=2 word_pos=3",
        ] {
            let e = bad.parse::<RngState>().unwrap_err();
            assert!(matches!(e, Error::Parse(_)), "{bad:?}: {e}");
            assert!(e.to_string().contains("batch RNG state"), "{e}");
        }
    }

    #[test]
    fn split_holds_out_the_last_tenth() {
        let c = Corpus::from_text("t", text(1005)).unwrap();
        assert_eq!(c.len(), 1005);
        assert_eq!(c.val().len(), 100);
        assert_eq!(c.train().len(), 905);
        assert_eq!(c.split_index(), 905);
        assert_eq!([c.train(), c.val()].concat(), c.tokens());
        // A tiny corpus has no validation part, and says so when asked for batches.
        let tiny = Corpus::from_text("tiny", "abc").unwrap();
        assert!(tiny.val().is_empty());
        let e = val_batches(tiny.val(), 1, 1, 1).unwrap_err().to_string();
        assert!(e.contains("0 tokens"), "{e}");
    }

    #[test]
    fn val_batches_are_fixed_and_spread_over_the_split() {
        let c = Corpus::from_text("t", text(50_000)).unwrap();
        let a = val_batches(c.val(), 4, 64, 3).unwrap();
        let b = val_batches(c.val(), 4, 64, 3).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 3);
        for batch in &a {
            assert_windows(c.val(), batch);
        }
        // First window at the start of the split, last at its very end.
        let v: Vec<u32> = c.val().iter().map(|&x| u32::from(x)).collect();
        assert_eq!(&a[0].inputs[..64], &v[..64]);
        let last = &a[2];
        assert_eq!(&last.targets[3 * 64..], &v[v.len() - 64..]);
        assert!(val_batches(c.val(), 4, 64, 0).unwrap().is_empty());
        // One window only: it starts at 0.
        let one = val_batches(c.val(), 1, 8, 1).unwrap();
        assert_eq!(&one[0].inputs[..], &v[..8]);
    }

    #[test]
    fn batcher_rejects_bad_shapes() {
        for (len, batch, seq) in [(100, 0, 4), (100, 4, 0), (8, 1, 8), (0, 1, 1)] {
            let t = vec![b'a'; len];
            let e = Batcher::new(&t, batch, seq, 0).unwrap_err();
            assert!(matches!(e, Error::Invalid { .. }), "{e}");
        }
        assert!(Batcher::new(&[b'a'; 9], 1, 8, 0).is_ok());
    }

    #[test]
    fn load_errors_name_the_path_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();

        let missing = dir.path().join("missing.txt");
        let e = Corpus::load(&missing).unwrap_err().to_string();
        assert!(e.contains("missing.txt") && e.contains("not found"), "{e}");

        // A directory exists but cannot be read as a file.
        let e = Corpus::load(dir.path()).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        assert!(
            e.to_string().contains(&dir.path().display().to_string()),
            "{e}"
        );

        let empty = dir.path().join("empty.txt");
        std::fs::write(&empty, b"").unwrap();
        let e = Corpus::load(&empty).unwrap_err().to_string();
        assert!(e.contains("empty.txt") && e.contains("empty"), "{e}");

        let binary = dir.path().join("latin1.txt");
        std::fs::write(&binary, b"caf\xe9 au lait").unwrap();
        let e = Corpus::load(&binary).unwrap_err().to_string();
        assert!(
            e.contains("latin1.txt") && e.contains("UTF-8") && e.contains("offset 3"),
            "{e}"
        );

        let good = dir.path().join("good.txt");
        std::fs::write(&good, "hello, world\n").unwrap();
        let c = Corpus::load(&good).unwrap();
        assert_eq!(c.text(), "hello, world\n");
        assert_eq!(c.path(), good);
        assert!(!c.is_empty());
    }

    #[test]
    fn reading_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.txt");
        std::fs::write(&p, "x".repeat(1001)).unwrap();
        let e = Corpus::load_at_most(&p, 1000).unwrap_err().to_string();
        assert!(
            e.contains("big.txt") && e.contains("larger than the maximum of 1000"),
            "{e}"
        );
        assert_eq!(Corpus::load_at_most(&p, 1001).unwrap().len(), 1001);
        // A device that never ends costs one byte more than the bound.
        if Path::new("/dev/zero").exists() {
            let e = Corpus::load_at_most("/dev/zero", 1 << 20)
                .unwrap_err()
                .to_string();
            assert!(e.contains("larger than the maximum"), "{e}");
        }
    }

    #[test]
    fn fingerprint_tracks_content() {
        let a = Corpus::from_text("a", "abc").unwrap();
        let b = Corpus::from_text("b", "abc").unwrap();
        let c = Corpus::from_text("c", "abd").unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        // FNV-1a's published test vector for "a".
        let one = Corpus::from_text("x", "a").unwrap();
        assert_eq!(one.fingerprint(), "fnv1a64:af63dc4c8601ec8c:1");
    }

    #[test]
    fn entropy_of_known_distributions() {
        assert_eq!(unigram_entropy_nats(b"aaaa"), 0.0);
        assert!((unigram_entropy_nats(b"abab") - 2f64.ln()).abs() < 1e-12);
        let all: Vec<u8> = (0..=255).collect();
        assert!((unigram_entropy_nats(&all) - 256f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn next_rows_of_every_rank_make_the_whole_batch() {
        let text: Vec<u8> = (0..200u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut whole = Batcher::new(&text, 6, 8, 3).unwrap();
        let ranks: Vec<Batcher> = (0..3).map(|_| whole.clone()).collect();
        let mut ranks = ranks;
        for _ in 0..4 {
            let b = whole.next_batch().with_document_mask(0).unwrap();
            let mut joined = Vec::new();
            for (r, s) in ranks.iter_mut().enumerate() {
                let part = BatchSource::next_rows(s, 2 * r..2 * r + 2).unwrap();
                assert_eq!(part.batch, 2);
                assert_eq!(
                    part.clone().with_document_mask(0).unwrap(),
                    b.rows(2 * r..2 * r + 2).unwrap()
                );
                joined.extend(part.inputs);
                assert_eq!(
                    s.state(),
                    whole.state(),
                    "rank {r}'s generator went elsewhere"
                );
            }
            assert_eq!(joined, b.inputs);
        }
        assert!(whole.next_rows(5..7).is_err());
        assert!(whole.next_batch().rows(2..9).is_err());
    }
}
