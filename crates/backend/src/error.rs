use crate::DType;

/// One error type for every backend and the crates above them. Messages name the op,
/// the shapes and the dtypes involved, so that an error read in a log is enough to
/// find the bug.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Sizes that do not fit together: shapes that cannot broadcast, a dimension index
    /// out of range, a layout whose strides do not match its shape, a table that is not
    /// whole rows.
    #[error("{op}: shape mismatch: {msg}")]
    Shape {
        /// The operation that refused, e.g. `"gemm"` or `"HostData::from_bytes"`.
        op: &'static str,
        /// What does not fit, with the sizes involved.
        msg: String,
    },

    /// A buffer of the wrong dtype: operands that must share a dtype do not, or an
    /// index/statistics buffer is not the dtype the op requires (u32 segment ids, f32
    /// `mean`/`rstd`, ...).
    #[error("{op}: dtype mismatch: expected {expected}, got {got}")]
    DType {
        /// The operation that refused.
        op: &'static str,
        /// The dtype the op needed here.
        expected: DType,
        /// The dtype it was given.
        got: DType,
    },

    #[error("{op}: dtype {dtype} is not supported by the {backend} backend{}", if .why.is_empty() { String::new() } else { format!(" ({})", .why) })]
    /// A dtype that is valid in general but that this backend's kernel cannot compute
    /// in, such as f64 on wgpu (WGSL has no f64).
    Unsupported {
        /// The operation that refused.
        op: &'static str,
        /// The backend's short name (`cpu`, `wgpu`, `cuda`).
        backend: &'static str,
        /// The dtype it cannot compute in.
        dtype: DType,
        /// The reason, or empty; printed in parentheses when not empty.
        why: String,
    },

    #[error("{op}: buffer too small: needs {needed} elements, has {len}")]
    /// A buffer shorter than the spec says it must be. On a GPU an unchecked length
    /// would be an out-of-bounds access, so every backend checks before it launches.
    BufferTooSmall {
        /// The operation that refused.
        op: &'static str,
        /// Elements (not bytes) the op needs the buffer to hold.
        needed: usize,
        /// Elements the buffer holds.
        len: usize,
    },

    /// An argument out of its domain that is not a shape or dtype problem: sizes whose
    /// product or end overflows `usize`, a non-finite scale, an op a backend does not
    /// implement, a reduction over an empty axis.
    #[error("{op}: invalid argument: {msg}")]
    Invalid {
        /// The operation that refused.
        op: &'static str,
        /// What is wrong, with the values involved.
        msg: String,
    },

    #[error("out of memory on {backend}: requested {requested} bytes, {free} bytes free")]
    /// A device allocation failed for lack of memory (after any cache the backend
    /// keeps was given back).
    OutOfMemory {
        /// The backend (or device kind) whose allocation failed.
        backend: &'static str,
        /// Bytes of the allocation that failed.
        requested: u64,
        /// Bytes the device reported free at that moment (0 when it could not say).
        free: u64,
    },

    #[error("{backend}: device limit '{limit}' exceeded: requested {requested}, maximum {max}")]
    /// A size beyond a hard limit of the device or its API (a buffer larger than the
    /// adapter allows, a count that must fit an `i32` kernel argument), reported before
    /// anything is launched.
    LimitExceeded {
        /// The backend whose limit it is.
        backend: &'static str,
        /// The limit's name, e.g. wgpu's `max_buffer_size`.
        limit: &'static str,
        /// The value asked for, in the limit's unit (bytes for buffer sizes).
        requested: u64,
        /// The largest value allowed.
        max: u64,
    },

    #[error("{backend}: no device: {reason}")]
    /// The backend could not open a device: no GPU, no driver, no adapter. Tests and
    /// examples treat it as "skip", not as a failure.
    NoDevice {
        /// The backend that found no device.
        backend: &'static str,
        /// Why, as the driver or the backend put it.
        reason: String,
    },

    /// Any other failure the device, driver or runtime reported (a CUDA driver error, a
    /// wgpu validation error, a kernel that failed to compile).
    #[error("{backend}: {msg}")]
    Backend {
        /// The backend that failed.
        backend: &'static str,
        /// The device's or driver's message, prefixed with what brrr was doing.
        msg: String,
    },

    /// Text that could not be parsed: a dtype name, a command-line value, a config
    /// entry. The message is complete on its own.
    #[error("{0}")]
    Parse(String),

    /// A file or directory whose contents are wrong (a checkpoint, a dataset, a shard
    /// directory), as opposed to one that could not be read ([`Error::Io`]).
    #[error("{path}: {msg}")]
    File {
        /// The file or directory, as displayed.
        path: String,
        /// What is wrong with it.
        msg: String,
    },

    #[error("{context}: {source}")]
    /// An I/O operation failed; `source` is the operating system's error.
    Io {
        /// What was being done, usually naming the path.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// `std::result::Result` with brrr's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Shape`] for `op`.
    pub fn shape(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Shape {
            op,
            msg: msg.into(),
        }
    }

    /// An [`Error::Invalid`] for `op`.
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Invalid {
            op,
            msg: msg.into(),
        }
    }

    /// An [`Error::Io`]: `source` while doing `context`.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// An [`Error::File`] about `path` (displayed lossily if it is not UTF-8).
    pub fn file(path: impl AsRef<std::path::Path>, msg: impl Into<String>) -> Self {
        Error::File {
            path: path.as_ref().display().to_string(),
            msg: msg.into(),
        }
    }

    /// Checks `got == expected` for `op`; otherwise an [`Error::DType`].
    pub fn check_dtype(op: &'static str, expected: DType, got: DType) -> Result<()> {
        if expected == got {
            Ok(())
        } else {
            Err(Error::DType { op, expected, got })
        }
    }

    /// Checks that a buffer of `len` elements holds at least `needed`; otherwise an
    /// [`Error::BufferTooSmall`].
    pub fn check_len(op: &'static str, needed: usize, len: usize) -> Result<()> {
        if len >= needed {
            Ok(())
        } else {
            Err(Error::BufferTooSmall { op, needed, len })
        }
    }
}
