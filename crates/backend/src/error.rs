use crate::DType;

/// One error type for every backend and the crates above them. Messages name the op,
/// the shapes and the dtypes involved, so that an error read in a log is enough to
/// find the bug.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op}: shape mismatch: {msg}")]
    Shape { op: &'static str, msg: String },

    #[error("{op}: dtype mismatch: expected {expected}, got {got}")]
    DType {
        op: &'static str,
        expected: DType,
        got: DType,
    },

    #[error("{op}: dtype {dtype} is not supported by the {backend} backend{}", if .why.is_empty() { String::new() } else { format!(" ({})", .why) })]
    Unsupported {
        op: &'static str,
        backend: &'static str,
        dtype: DType,
        why: String,
    },

    #[error("{op}: buffer too small: needs {needed} elements, has {len}")]
    BufferTooSmall {
        op: &'static str,
        needed: usize,
        len: usize,
    },

    #[error("{op}: invalid argument: {msg}")]
    Invalid { op: &'static str, msg: String },

    #[error("out of memory on {backend}: requested {requested} bytes, {free} bytes free")]
    OutOfMemory {
        backend: &'static str,
        requested: u64,
        free: u64,
    },

    #[error("{backend}: device limit '{limit}' exceeded: requested {requested}, maximum {max}")]
    LimitExceeded {
        backend: &'static str,
        limit: &'static str,
        requested: u64,
        max: u64,
    },

    #[error("{backend}: no device: {reason}")]
    NoDevice {
        backend: &'static str,
        reason: String,
    },

    #[error("{backend}: {msg}")]
    Backend { backend: &'static str, msg: String },

    #[error("{0}")]
    Parse(String),

    #[error("{path}: {msg}")]
    File { path: String, msg: String },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn shape(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Shape {
            op,
            msg: msg.into(),
        }
    }

    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Invalid {
            op,
            msg: msg.into(),
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub fn file(path: impl AsRef<std::path::Path>, msg: impl Into<String>) -> Self {
        Error::File {
            path: path.as_ref().display().to_string(),
            msg: msg.into(),
        }
    }

    /// Checks `got == expected` for `op`.
    pub fn check_dtype(op: &'static str, expected: DType, got: DType) -> Result<()> {
        if expected == got {
            Ok(())
        } else {
            Err(Error::DType { op, expected, got })
        }
    }

    /// Checks that a buffer of `len` elements holds at least `needed`.
    pub fn check_len(op: &'static str, needed: usize, len: usize) -> Result<()> {
        if len >= needed {
            Ok(())
        } else {
            Err(Error::BufferTooSmall { op, needed, len })
        }
    }
}
