//! The in-process transport: one thread per rank, frames over channels. For teaching
//! and tests: `n` ranks with `n` CPU (or wgpu) backends in one process.

use crate::error::Result;
use crate::frame::Frame;
use crate::link::{Link, LinkError};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::Duration;

/// One rank's end of an in-process world: a sender to and a receiver from every rank.
pub struct InProcessLink {
    rank: usize,
    to: Vec<Sender<Frame>>,
    /// One lock per peer: threads receiving from different peers never wait on each other.
    from: Vec<Mutex<Receiver<Frame>>>,
}

/// The links of a world of `n` ranks, one per rank, to move into one thread each.
pub fn links(n: usize) -> Vec<InProcessLink> {
    // channels[src][dst]
    let mut senders: Vec<Vec<Option<Sender<Frame>>>> = (0..n).map(|_| Vec::new()).collect();
    let mut receivers: Vec<Vec<Option<Receiver<Frame>>>> =
        (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
    for (src, row) in senders.iter_mut().enumerate() {
        for rx_row in receivers.iter_mut() {
            let (tx, rx) = channel();
            row.push(Some(tx));
            rx_row[src] = Some(rx);
        }
    }
    (0..n)
        .map(|rank| InProcessLink {
            rank,
            to: senders[rank]
                .iter_mut()
                .map(|s| s.take().expect("one sender"))
                .collect(),
            from: receivers[rank]
                .iter_mut()
                .map(|r| Mutex::new(r.take().expect("one receiver")))
                .collect(),
        })
        .collect()
}

impl Link for InProcessLink {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.to.len()
    }

    fn name(&self) -> &'static str {
        "in-process"
    }

    fn send(&self, to: usize, frame: Frame) -> Result<(), LinkError> {
        let tx = self
            .to
            .get(to)
            .ok_or(LinkError::Lost(format!("no rank {to}")))?;
        // Unbounded channel: never waits for the receiver, as `Link` requires.
        tx.send(frame)
            .map_err(|_| LinkError::Lost("its thread has ended".into()))
    }

    fn recv(&self, from: usize, timeout: Duration) -> Result<Frame, LinkError> {
        let rx = self
            .from
            .get(from)
            .ok_or(LinkError::Lost(format!("no rank {from}")))?;
        let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
        rx.recv_timeout(timeout).map_err(|e| match e {
            RecvTimeoutError::Timeout => LinkError::Timeout,
            RecvTimeoutError::Disconnected => LinkError::Lost("its thread has ended".into()),
        })
    }
}
