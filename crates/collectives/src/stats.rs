//! [`CommStats`]: what a communicator has moved, counted as it runs, so that a parallel
//! training step can compare its measured traffic with the theory (e.g. `2Ψ(n-1)/n`
//! elements sent per rank by a ring all-reduce of `Ψ` elements).

use std::collections::BTreeMap;

/// Calls and traffic of one operation kind (`all-reduce`, `send/recv`, ...).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpStats {
    /// How many times it was called on this rank.
    pub calls: u64,
    /// The sum of its logical sizes in elements: the buffer of an all-reduce or a
    /// broadcast, the input of a reduce-scatter or an all-to-all, the output of an
    /// all-gather, the message of a send or a receive.
    pub elements: u64,
    /// Elements this rank put on the wire for it (4 bytes each: frames carry `f32`).
    pub elements_sent: u64,
    /// Elements this rank took off the wire for it.
    pub elements_received: u64,
}

/// Per-operation counters of one communicator (a sub-communicator from
/// [`crate::Communicator::split`] counts its own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommStats {
    /// Keyed by the operation's name ([`crate::frame::OpCode::name`]).
    pub ops: BTreeMap<&'static str, OpStats>,
}

impl CommStats {
    /// The counters of `op` (zeros when it never ran).
    pub fn op(&self, op: &str) -> OpStats {
        self.ops.get(op).copied().unwrap_or_default()
    }

    /// Elements sent by this rank over all operations.
    pub fn elements_sent(&self) -> u64 {
        self.ops.values().map(|s| s.elements_sent).sum()
    }

    /// Bytes sent by this rank over all operations.
    pub fn bytes_sent(&self) -> u64 {
        4 * self.elements_sent()
    }

    /// Elements received by this rank over all operations.
    pub fn elements_received(&self) -> u64 {
        self.ops.values().map(|s| s.elements_received).sum()
    }

    pub(crate) fn record(&mut self, op: &'static str, elements: usize, sent: usize, recv: usize) {
        let s = self.ops.entry(op).or_default();
        s.calls += 1;
        s.elements += elements as u64;
        s.elements_sent += sent as u64;
        s.elements_received += recv as u64;
    }
}
