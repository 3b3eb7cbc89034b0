//! One error type for every collective. Messages name the operation and the peer rank,
//! so that one line of a log says which rank failed in which call.

/// What went wrong in a collective or a transport.
#[derive(Debug, thiserror::Error)]
pub enum CollError {
    /// No message from `peer` within the timeout: it died, hangs, or called a different op.
    #[error(
        "{op}: rank {rank} got no message from rank {peer} within {timeout_s:.1} s (is it alive, and in the same collective?)"
    )]
    Timeout {
        /// The collective or call that failed, as its name (`"all-reduce"`, `"send/recv"`, ...).
        op: &'static str,
        /// The world rank reporting the error (this process's or thread's rank).
        rank: usize,
        /// The world rank that was expected to send.
        peer: usize,
        /// The receive timeout that expired, in seconds.
        timeout_s: f64,
    },
    /// The connection to `peer` is gone (the process exited or its thread ended).
    #[error("{op}: rank {rank} lost its connection to rank {peer}: {why}")]
    PeerLost {
        /// The collective or call that failed, as its name (`"all-reduce"`, `"send/recv"`, ...).
        op: &'static str,
        /// The world rank reporting the error (this process's or thread's rank).
        rank: usize,
        /// The world rank whose connection closed.
        peer: usize,
        /// The transport's description of the loss (an I/O error, a closed channel).
        why: String,
    },
    /// `peer` gave up on a collective and told everybody.
    #[error("{op}: rank {peer} aborted (see its own error); rank {rank} stops too")]
    PeerAborted {
        /// The collective or call that failed, as its name (`"all-reduce"`, `"send/recv"`, ...).
        op: &'static str,
        /// The world rank reporting the error (this process's or thread's rank).
        rank: usize,
        /// The world rank that sent the abort; its own error says why.
        peer: usize,
    },
    /// Ranks disagree on the op, the dtype or the size.
    #[error("{op}: rank {rank} and rank {peer} disagree: {what}")]
    Mismatch {
        /// The collective this rank is in, as its name (`"all-reduce"`, `"send/recv"`, ...).
        op: &'static str,
        /// The world rank reporting the error (this process's or thread's rank).
        rank: usize,
        /// The world rank whose message did not match.
        peer: usize,
        /// Which of op, dtype or length differs, with both sides' values.
        what: String,
    },
    /// A wrong argument on this rank (a rank out of range, a buffer of the wrong length).
    #[error("{op}: invalid argument: {msg}")]
    Invalid {
        /// The call that refused the argument (`"all-gather"`, `"parallel groups"`, ...).
        op: &'static str,
        /// What is wrong, with the offending value.
        msg: String,
    },
    /// The algorithm does not implement this collective.
    #[error(
        "{op}: the {algorithm} algorithm is not implemented for this collective (supported: {supported})"
    )]
    Unsupported {
        /// The collective asked for.
        op: &'static str,
        /// The algorithm asked for ([`Algorithm::name`](crate::Algorithm::name)).
        algorithm: &'static str,
        /// The algorithms that do implement `op`, comma-separated.
        supported: String,
    },
    /// Setting up a transport failed (rendezvous, environment, library).
    #[error("{transport}: {msg}")]
    Setup {
        /// What was being set up (`"socket"`, `"mpi"`, `"launch environment"`, ...).
        transport: &'static str,
        /// What failed, with the offending value or OS error.
        msg: String,
    },
    /// A transport needs something absent here (MPI, NCCL, a GPU).
    #[error("{transport}: not available: {reason}")]
    Unavailable {
        /// The transport that cannot run (`"nccl"`).
        transport: &'static str,
        /// What is missing (`libcuda not found`, `libnccl not found`, `no CUDA device`).
        reason: String,
    },
    /// An error of the backend a tensor lives on.
    #[error(transparent)]
    Backend(#[from] brrr_backend::Error),
}

impl CollError {
    /// An [`CollError::Invalid`] for `op`.
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        CollError::Invalid {
            op,
            msg: msg.into(),
        }
    }

    /// A [`CollError::Setup`] for `transport`.
    pub fn setup(transport: &'static str, msg: impl Into<String>) -> Self {
        CollError::Setup {
            transport,
            msg: msg.into(),
        }
    }
}

impl From<CollError> for brrr_backend::Error {
    fn from(e: CollError) -> Self {
        match e {
            CollError::Backend(inner) => inner,
            other => brrr_backend::Error::Backend {
                backend: "collectives",
                msg: other.to_string(),
            },
        }
    }
}

/// Result with [`CollError`].
pub type Result<T, E = CollError> = std::result::Result<T, E>;
