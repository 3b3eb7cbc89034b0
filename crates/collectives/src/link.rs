//! Point-to-point transport, the only thing a new backend has to implement: a [`Link`]
//! moves [`Frame`]s between the ranks of one world. [`Mailbox`] puts message matching on
//! top: frames of different communicators (sub-groups) sharing one link are told apart
//! by their context id, and every receive is checked against what the caller expects.
//!
//! Several threads of one rank may run collectives at once on different communicators
//! (a data-parallel gradient reduce-scatter on a communicator's background thread while
//! the compute thread runs a tensor-parallel all-reduce). So nothing is locked while a
//! receive waits: one thread at a time reads from a given peer, stashing the frames of
//! other communicators, and the threads waiting on that peer are woken to look for
//! theirs. A lock held across the wait would let a rank's two threads wait on each
//! other through their peers' threads, and the world would hang.

use crate::error::{CollError, Result};
use crate::frame::{Frame, Header, OpCode, dtype_name};
use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
/// from one sender arrive in the order sent. Threads may call `send` and `recv` at once
/// ([`Mailbox`] never has two threads receive from the same peer at once).
pub trait Link: Send + Sync {
    /// This rank, `0..world_size`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// The transport's name in errors and reports (`in-process`, `socket`, `mpi`).
    fn name(&self) -> &'static str;
    /// Queues `frame` for rank `to`.
    fn send(&self, to: usize, frame: Frame) -> Result<(), LinkError>;
    /// The next frame from rank `from`, waiting at most `timeout`.
    fn recv(&self, from: usize, timeout: Duration) -> Result<Frame, LinkError>;
}

/// A link plus the frames that arrived for another communicator than the one asking,
/// shared by every communicator (and thread) of a rank.
pub struct Mailbox {
    link: Box<dyn Link>,
    state: Mutex<Inbox>,
    /// Signalled when a thread stops reading from a peer (a frame stashed, or an error).
    arrived: Condvar,
    timeout: Mutex<Duration>,
}

/// What the receiving threads share.
#[derive(Default)]
struct Inbox {
    /// Frames read for another communicator than the reader's: by (peer, context).
    stash: HashMap<(usize, u32), VecDeque<Frame>>,
    /// Peers a thread is reading from now.
    reading: Vec<bool>,
    /// Peers that sent an abort.
    aborted: Vec<bool>,
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
        let n = link.world_size();
        Mailbox {
            link,
            state: Mutex::new(Inbox {
                reading: vec![false; n],
                aborted: vec![false; n],
                ..Inbox::default()
            }),
            arrived: Condvar::new(),
            timeout: Mutex::new(timeout),
        }
    }

    fn inbox(&self) -> MutexGuard<'_, Inbox> {
        // A panic while holding the lock leaves the inbox usable: frames are whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the receive timeout.
    pub fn set_timeout(&self, timeout: Duration) {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner()) = timeout;
    }

    fn lost(&self, op: OpCode, peer: usize, e: LinkError) -> CollError {
        let rank = self.rank();
        match e {
            LinkError::Timeout => CollError::Timeout {
                op: op.name(),
                rank,
                peer,
                timeout_s: self.timeout().as_secs_f64(),
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
    pub fn send(&self, to: usize, frame: Frame) -> Result<()> {
        let op = frame.header.op;
        self.link.send(to, frame).map_err(|e| self.lost(op, to, e))
    }

    /// The next frame of communicator `expect.header.ctx` from world rank `from`, checked.
    /// Waits at most the timeout, reading from `from` itself unless another thread is.
    pub fn recv(&self, from: usize, expect: Expect) -> Result<Frame> {
        let (ctx, op) = (expect.header.ctx, expect.header.op);
        let aborted = || CollError::PeerAborted {
            op: op.name(),
            rank: self.rank(),
            peer: from,
        };
        if from >= self.world_size() {
            return Err(self.lost(op, from, LinkError::Lost(format!("no rank {from}"))));
        }
        let deadline = Instant::now() + self.timeout();
        let mut inbox = self.inbox();
        let frame = loop {
            if let Some(f) = inbox
                .stash
                .get_mut(&(from, ctx))
                .and_then(|q| q.pop_front())
            {
                break f;
            }
            if inbox.aborted[from] {
                return Err(aborted());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if inbox.reading[from] {
                // Another thread is reading from `from`: it stashes what is ours.
                if left.is_zero() {
                    return Err(self.lost(op, from, LinkError::Timeout));
                }
                inbox = self
                    .arrived
                    .wait_timeout(inbox, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                continue;
            }
            inbox.reading[from] = true;
            drop(inbox);
            let read = self.link.recv(from, left.max(Duration::from_millis(1)));
            inbox = self.inbox();
            inbox.reading[from] = false;
            self.arrived.notify_all();
            let f = read.map_err(|e| self.lost(op, from, e))?;
            if f.header.op == OpCode::Abort {
                inbox.aborted[from] = true;
                return Err(aborted());
            }
            if f.header.ctx == ctx {
                break f;
            }
            inbox
                .stash
                .entry((from, f.header.ctx))
                .or_default()
                .push_back(f);
        };
        drop(inbox);
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
    pub fn abort_all(&self, ctx: u32) {
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
