//! Point-to-point transport, the only thing a new backend has to implement: a [`Link`]
//! moves [`Frame`]s between the ranks of one world. [`Mailbox`] puts message matching on
//! top: frames of different communicators (sub-groups) sharing one link are told apart
//! by their context id, and every receive is checked against what the caller expects.

use crate::error::{CollError, Result};
use crate::frame::{Frame, Header, OpCode, dtype_name};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// Why a link operation failed; [`Mailbox`] adds the op name and ranks.
#[derive(Debug)]
pub enum LinkError {
    /// Nothing arrived from the peer in time.
    Timeout,
    /// The peer is gone.
    Lost(String),
    /// Anything else.
    Other(CollError),
}

/// Point-to-point frames between the ranks of one world.
///
/// Contract: `send` never waits for the receiver to call `recv` (it buffers or queues),
/// so that a step in which every rank sends and then receives cannot deadlock; frames
/// from one sender arrive in the order sent.
pub trait Link: Send {
    /// This rank, `0..world_size`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// The transport's name in errors and reports (`in-process`, `socket`, `mpi`).
    fn name(&self) -> &'static str;
    /// Queues `frame` for rank `to`.
    fn send(&mut self, to: usize, frame: Frame) -> Result<(), LinkError>;
    /// The next frame from rank `from`, waiting at most `timeout`.
    fn recv(&mut self, from: usize, timeout: Duration) -> Result<Frame, LinkError>;
}

/// A link plus the frames that arrived for another communicator than the one asking.
pub struct Mailbox {
    link: Box<dyn Link>,
    stash: HashMap<(usize, u32), VecDeque<Frame>>,
    timeout: Duration,
}

/// What a receiver expects: checked against the frame's header.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    /// Header fields that must match exactly.
    pub header: Header,
    /// Payload length in elements.
    pub len: usize,
}

impl Mailbox {
    /// A mailbox over `link`; every receive waits at most `timeout`.
    pub fn new(link: Box<dyn Link>, timeout: Duration) -> Self {
        Mailbox {
            link,
            stash: HashMap::new(),
            timeout,
        }
    }

    /// The world rank.
    pub fn rank(&self) -> usize {
        self.link.rank()
    }

    /// The world size.
    pub fn world_size(&self) -> usize {
        self.link.world_size()
    }

    /// The transport's name.
    pub fn transport(&self) -> &'static str {
        self.link.name()
    }

    /// The receive timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the receive timeout.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn lost(&self, op: OpCode, peer: usize, e: LinkError) -> CollError {
        let rank = self.rank();
        match e {
            LinkError::Timeout => CollError::Timeout {
                op: op.name(),
                rank,
                peer,
                timeout_s: self.timeout.as_secs_f64(),
            },
            LinkError::Lost(why) => CollError::PeerLost {
                op: op.name(),
                rank,
                peer,
                why,
            },
            LinkError::Other(e) => e,
        }
    }

    /// Sends `frame` to world rank `to`.
    pub fn send(&mut self, to: usize, frame: Frame) -> Result<()> {
        let op = frame.header.op;
        self.link.send(to, frame).map_err(|e| self.lost(op, to, e))
    }

    /// The next frame of communicator `expect.header.ctx` from world rank `from`, checked.
    pub fn recv(&mut self, from: usize, expect: Expect) -> Result<Frame> {
        let ctx = expect.header.ctx;
        let op = expect.header.op;
        let frame = loop {
            if let Some(f) = self.stash.get_mut(&(from, ctx)).and_then(|q| q.pop_front()) {
                break f;
            }
            let f = self
                .link
                .recv(from, self.timeout)
                .map_err(|e| self.lost(op, from, e))?;
            if f.header.op == OpCode::Abort {
                return Err(CollError::PeerAborted {
                    op: op.name(),
                    rank: self.rank(),
                    peer: from,
                });
            }
            if f.header.ctx == ctx {
                break f;
            }
            self.stash
                .entry((from, f.header.ctx))
                .or_default()
                .push_back(f);
        };
        self.check(from, &frame, expect)?;
        Ok(frame)
    }

    fn check(&self, from: usize, f: &Frame, e: Expect) -> Result<()> {
        let (got, want) = (f.header, e.header);
        let what = if got.op != want.op {
            format!(
                "rank {from} is in {}, this rank in {}",
                got.op.name(),
                want.op.name()
            )
        } else if got.dtype != want.dtype {
            format!(
                "rank {from} has dtype {}, this rank {}",
                dtype_name(got.dtype),
                dtype_name(want.dtype)
            )
        } else if got.total != want.total || f.data.len() != e.len {
            format!(
                "rank {from} has a buffer of {} elements (sent {}), this rank {} (expects {})",
                got.total,
                f.data.len(),
                want.total,
                e.len
            )
        } else {
            return Ok(());
        };
        Err(CollError::Mismatch {
            op: want.op.name(),
            rank: self.rank(),
            peer: from,
            what,
        })
    }

    /// Tells every other rank that this one gave up (best effort: errors are ignored,
    /// the peers may be gone already).
    pub fn abort_all(&mut self, ctx: u32) {
        let me = self.rank();
        for peer in (0..self.world_size()).filter(|&p| p != me) {
            let frame = Frame {
                header: Header {
                    ctx,
                    op: OpCode::Abort,
                    dtype: 0,
                    total: 0,
                },
                data: Vec::new(),
            };
            let _ = self.link.send(peer, frame);
        }
    }
}
