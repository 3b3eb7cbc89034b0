//! Token shards in llm.c's binary format.
//!
//! A shard is a header of 256 little-endian `i32`s (1024 bytes) followed by the tokens,
//! little-endian, with nothing after them. llm.c (`dev/data/data_common.py`,
//! `write_datafile`) defines two variants:
//!
//! | header\[0\] (magic) | header\[1\] (version) | token width | used for |
//! |---|---|---|---|
//! | 20240520 | 1 | `u16` | GPT-2's 50,257-token vocabulary |
//! | 20240801 | 7 | `u32` | larger vocabularies (Llama 3's 128k) |
//!
//! `header[2]` is the number of tokens; the other 253 words are zero. The reader checks
//! all of it, and the file's size against the count: a truncated download, a file
//! with trailing bytes, or a file of another format is an error that names the file and
//! says which field is wrong, never a panic or a silent misread.

use brrr_backend::{Error, Result};
use std::path::{Path, PathBuf};

/// Words in a shard header.
pub const HEADER_WORDS: usize = 256;
/// Bytes in a shard header.
pub const HEADER_BYTES: usize = HEADER_WORDS * 4;
/// `header[0]` of a shard of `u16` tokens (llm.c's GPT-2 shards).
pub const MAGIC_U16: i32 = 20240520;
/// `header[1]` of a shard of `u16` tokens.
pub const VERSION_U16: i32 = 1;
/// `header[0]` of a shard of `u32` tokens (llm.c's Llama 3 shards).
pub const MAGIC_U32: i32 = 20240801;
/// `header[1]` of a shard of `u32` tokens.
pub const VERSION_U32: i32 = 7;

/// How many bytes one token takes in a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenWidth {
    /// `u16` tokens, magic 20240520, version 1: vocabularies of at most 65,536.
    U16,
    /// `u32` tokens, magic 20240801, version 7.
    U32,
}

impl TokenWidth {
    /// Bytes per token.
    pub fn bytes(self) -> usize {
        match self {
            TokenWidth::U16 => 2,
            TokenWidth::U32 => 4,
        }
    }

    /// `(magic, version)` written in the header.
    pub fn magic_version(self) -> (i32, i32) {
        match self {
            TokenWidth::U16 => (MAGIC_U16, VERSION_U16),
            TokenWidth::U32 => (MAGIC_U32, VERSION_U32),
        }
    }

    /// The narrowest width that holds token ids below `vocab_size`.
    pub fn for_vocab(vocab_size: usize) -> Self {
        if vocab_size <= 1 << 16 {
            TokenWidth::U16
        } else {
            TokenWidth::U32
        }
    }
}

/// What a valid header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardHeader {
    /// Bytes per token, from the magic and version words.
    pub width: TokenWidth,
    /// Number of tokens after the header.
    pub tokens: usize,
}

impl ShardHeader {
    /// The exact size of a shard with this header, in bytes.
    pub fn file_len(&self) -> Option<u64> {
        (self.tokens as u64)
            .checked_mul(self.width.bytes() as u64)?
            .checked_add(HEADER_BYTES as u64)
    }

    /// The 1024 header bytes.
    pub fn to_bytes(&self) -> Result<[u8; HEADER_BYTES]> {
        let count = i32::try_from(self.tokens).map_err(|_| {
            Error::invalid(
                "ShardHeader::to_bytes",
                format!(
                    "{} tokens do not fit the header's i32 count (at most {}): split the data into more shards",
                    self.tokens,
                    i32::MAX
                ),
            )
        })?;
        let (magic, version) = self.width.magic_version();
        let mut out = [0u8; HEADER_BYTES];
        out[0..4].copy_from_slice(&magic.to_le_bytes());
        out[4..8].copy_from_slice(&version.to_le_bytes());
        out[8..12].copy_from_slice(&count.to_le_bytes());
        Ok(out)
    }
}

/// Parses and checks a shard header against the whole file's length `file_len`.
/// `path` is only used in messages.
pub fn parse_header(path: &Path, bytes: &[u8], file_len: u64) -> Result<ShardHeader> {
    if bytes.len() < HEADER_BYTES {
        return Err(Error::file(
            path,
            format!(
                "not a token shard: {} bytes, shorter than the {HEADER_BYTES}-byte header",
                bytes.len()
            ),
        ));
    }
    let word = |i: usize| i32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap_or([0; 4]));
    let (magic, version, count) = (word(0), word(1), word(2));
    let width = match magic {
        MAGIC_U16 => TokenWidth::U16,
        MAGIC_U32 => TokenWidth::U32,
        _ => {
            return Err(Error::file(
                path,
                format!(
                    "not a token shard: magic number {magic} (header word 0), expected \
                     {MAGIC_U16} (u16 tokens) or {MAGIC_U32} (u32 tokens)"
                ),
            ));
        }
    };
    let want_version = width.magic_version().1;
    if version != want_version {
        return Err(Error::file(
            path,
            format!(
                "unsupported shard version {version} (header word 1) for magic {magic}: \
                 expected {want_version}"
            ),
        ));
    }
    let tokens = usize::try_from(count).map_err(|_| {
        Error::file(
            path,
            format!("corrupt shard header: negative token count {count} (header word 2)"),
        )
    })?;
    if let Some(i) = (3..HEADER_WORDS).find(|&i| word(i) != 0) {
        return Err(Error::file(
            path,
            format!(
                "corrupt shard header: word {i} is {}, but words 3..256 are reserved and zero",
                word(i)
            ),
        ));
    }
    let header = ShardHeader { width, tokens };
    let want = header.file_len().ok_or_else(|| {
        Error::file(
            path,
            format!("corrupt shard header: {tokens} tokens overflow a file size"),
        )
    })?;
    if file_len != want {
        let what = if file_len < want {
            "truncated"
        } else {
            "oversized"
        };
        return Err(Error::file(
            path,
            format!(
                "{what} shard: the header announces {tokens} {} tokens, a file of {want} bytes, \
                 but the file has {file_len} bytes",
                match width {
                    TokenWidth::U16 => "u16",
                    TokenWidth::U32 => "u32",
                }
            ),
        ));
    }
    Ok(header)
}

/// Where a shard's bytes live: a memory map natively, or a vector.
enum Bytes {
    #[cfg(not(target_arch = "wasm32"))]
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            #[cfg(not(target_arch = "wasm32"))]
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// One validated shard: its header and its token bytes (memory-mapped when opened from
/// a file, so opening costs no reading and pages come in as windows are used).
pub struct Shard {
    path: PathBuf,
    header: ShardHeader,
    bytes: Bytes,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

impl Shard {
    /// Opens and validates a shard file, mapping it into memory.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::file(path, "shard not found"),
            _ => Error::io(format!("{}: opening a shard", path.display()), e),
        })?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("{}: reading its size", path.display()), e))?;
        if !meta.is_file() {
            return Err(Error::file(path, "not a regular file"));
        }
        if meta.len() < HEADER_BYTES as u64 {
            return Err(Error::file(
                path,
                format!(
                    "not a token shard: {} bytes, shorter than the {HEADER_BYTES}-byte header",
                    meta.len()
                ),
            ));
        }
        // SAFETY: the map is read-only and lives as long as `Shard`. Mapping a file is
        // only unsound if another process truncates or rewrites it while mapped; shards
        // are written once (atomically, by rename) and never modified in place, and a
        // truncation would show up as SIGBUS, not as a wrong token.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| Error::io(format!("{}: memory-mapping the shard", path.display()), e))?;
        let header = parse_header(path, &map, map.len() as u64)?;
        Ok(Shard {
            path: path.to_path_buf(),
            header,
            bytes: Bytes::Mapped(map),
        })
    }

    /// A shard from bytes already in memory (the browser, tests); `path` names it in
    /// messages.
    pub fn from_bytes(path: impl AsRef<Path>, bytes: Vec<u8>) -> Result<Self> {
        let path = path.as_ref();
        let header = parse_header(path, &bytes, bytes.len() as u64)?;
        Ok(Shard {
            path: path.to_path_buf(),
            header,
            bytes: Bytes::Owned(bytes),
        })
    }

    /// The file the shard was opened from (or the name given to [`Shard::from_bytes`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The checked header: token width and count.
    pub fn header(&self) -> ShardHeader {
        self.header
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.header.tokens
    }

    /// Whether the shard holds no tokens.
    pub fn is_empty(&self) -> bool {
        self.header.tokens == 0
    }

    /// Token `i`, or `None` past the end.
    pub fn token(&self, i: usize) -> Option<u32> {
        let w = self.header.width.bytes();
        let at = HEADER_BYTES.checked_add(i.checked_mul(w)?)?;
        let b = self.bytes.as_slice().get(at..at + w)?;
        Some(match self.header.width {
            TokenWidth::U16 => u32::from(u16::from_le_bytes([b[0], b[1]])),
            TokenWidth::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        })
    }

    /// Appends tokens `start..start + len` to `out`; an error names the shard if the
    /// range is not inside it.
    pub fn extend_range(&self, start: usize, len: usize, out: &mut Vec<u32>) -> Result<()> {
        let end = start
            .checked_add(len)
            .filter(|&e| e <= self.len())
            .ok_or_else(|| {
                Error::file(
                    &self.path,
                    format!(
                        "tokens {start}..{start}+{len} are outside the shard's {} tokens",
                        self.len()
                    ),
                )
            })?;
        let w = self.header.width.bytes();
        let bytes = &self.bytes.as_slice()[HEADER_BYTES + start * w..HEADER_BYTES + end * w];
        match self.header.width {
            TokenWidth::U16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| u32::from(u16::from_le_bytes([b[0], b[1]]))),
            ),
            TokenWidth::U32 => out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            ),
        }
        Ok(())
    }

    /// Every token (a copy).
    pub fn to_vec(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.len());
        // The range is the whole shard, which `open` checked against the file size.
        let _ = self.extend_range(0, self.len(), &mut v);
        v
    }
}

/// The bytes of a shard holding `tokens`: the header, then the tokens little-endian.
/// An error if a token does not fit `width` or the count does not fit the header.
pub fn shard_bytes(tokens: &[u32], width: TokenWidth) -> Result<Vec<u8>> {
    let header = ShardHeader {
        width,
        tokens: tokens.len(),
    }
    .to_bytes()?;
    let mut out = Vec::with_capacity(HEADER_BYTES + tokens.len() * width.bytes());
    out.extend_from_slice(&header);
    match width {
        TokenWidth::U16 => {
            for (i, &t) in tokens.iter().enumerate() {
                let t = u16::try_from(t).map_err(|_| {
                    Error::invalid(
                        "shard_bytes",
                        format!("token {t} at index {i} does not fit a u16 shard: use u32 tokens"),
                    )
                })?;
                out.extend_from_slice(&t.to_le_bytes());
            }
        }
        TokenWidth::U32 => {
            for &t in tokens {
                out.extend_from_slice(&t.to_le_bytes());
            }
        }
    }
    Ok(out)
}

/// Writes a shard atomically (a temporary file renamed over `path`): a reader never
/// sees half a shard, even if the writer is killed.
#[cfg(not(target_arch = "wasm32"))]
pub fn write_shard(path: impl AsRef<Path>, tokens: &[u32], width: TokenWidth) -> Result<()> {
    let bytes = shard_bytes(tokens, width)?;
    crate::atomic::write_atomic(path, &bytes)
}
