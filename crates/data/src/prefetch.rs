//! A background thread that produces batches ahead of the trainer.
//!
//! While the device runs step `n`, the host should already be reading and assembling
//! the batch of step `n + 1`: then the step never waits for data. [`Prefetcher`] runs
//! any [`BatchSource`] on its own thread and hands batches over a bounded channel of
//! `depth` slots (`std::sync::mpsc::sync_channel`): the producer runs at most `depth`
//! batches ahead and then blocks, so memory stays bounded however slow the consumer.
//!
//! Resumability is kept exact: each batch travels with the source's position *after*
//! it, and [`Prefetcher::position`] reports the position after the last batch the
//! trainer *took*, not the one the producer reached. Batches prefetched but not taken
//! when a checkpoint is written are simply produced again after a resume.

use crate::corpus::{Batch, BatchSource};
use brrr_backend::{Error, Result};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A source that may move to the prefetch thread.
pub type SendSource = Box<dyn BatchSource + Send>;

type Item = Result<(Batch, String)>;

enum State {
    Idle(SendSource),
    Running {
        rx: Receiver<Item>,
        handle: JoinHandle<SendSource>,
    },
    /// The producer thread panicked; the source is gone.
    Broken,
}

/// Runs a [`BatchSource`] on a background thread, `depth` batches ahead; `depth = 0`
/// calls the source synchronously (what the browser, which has no threads, does).
pub struct Prefetcher {
    depth: usize,
    fingerprint: String,
    position: String,
    state: State,
    waited: Duration,
}

impl Prefetcher {
    /// Wraps `source`, to be run `depth` batches ahead. The thread starts on the first
    /// [`BatchSource::next_batch`], not here; the fingerprint and the starting position
    /// are the source's.
    pub fn new(source: SendSource, depth: usize) -> Self {
        Prefetcher {
            depth,
            fingerprint: source.fingerprint(),
            position: source.position(),
            state: State::Idle(source),
            waited: Duration::ZERO,
        }
    }

    /// Total time [`BatchSource::next_batch`] spent waiting for a batch (producing it,
    /// when synchronous): the data wait a trace shows.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Batches the producer may run ahead (0: synchronous, no thread).
    pub fn depth(&self) -> usize {
        self.depth
    }

    fn start(source: SendSource, depth: usize) -> State {
        let (tx, rx) = sync_channel(depth);
        let handle = std::thread::Builder::new()
            .name("brrr-prefetch".into())
            .spawn(move || produce(source, tx));
        match handle {
            Ok(handle) => State::Running { rx, handle },
            // Spawning failed (no threads left): the closure, and the source with it,
            // is gone. Report it on the next call.
            Err(_) => State::Broken,
        }
    }

    /// Stops the producer and takes the source back.
    fn stop(&mut self) -> Result<SendSource> {
        match std::mem::replace(&mut self.state, State::Broken) {
            State::Idle(s) => Ok(s),
            State::Running { rx, handle } => {
                // Dropping the receiver makes the producer's next `send` fail, also
                // one blocked on a full channel, and the thread returns the source.
                drop(rx);
                handle.join().map_err(|_| broken())
            }
            State::Broken => Err(broken()),
        }
    }
}

fn broken() -> Error {
    Error::invalid(
        "Prefetcher",
        "the prefetch thread could not start or panicked",
    )
}

fn produce(mut source: SendSource, tx: SyncSender<Item>) -> SendSource {
    loop {
        let item = source.next_batch().map(|b| (b, source.position()));
        let failed = item.is_err();
        if tx.send(item).is_err() || failed {
            return source;
        }
    }
}

impl BatchSource for Prefetcher {
    fn next_batch(&mut self) -> Result<Batch> {
        let t0 = Instant::now();
        let out = if self.depth == 0 {
            match &mut self.state {
                State::Idle(s) => s.next_batch().map(|b| (b, s.position())),
                _ => Err(broken()),
            }
        } else {
            if let State::Idle(_) = self.state {
                let State::Idle(s) = std::mem::replace(&mut self.state, State::Broken) else {
                    unreachable!("matched above")
                };
                self.state = Self::start(s, self.depth);
            }
            match &self.state {
                State::Running { rx, .. } => match rx.recv() {
                    Ok(item) => item,
                    Err(_) => Err(broken()),
                },
                _ => Err(broken()),
            }
        };
        self.waited += t0.elapsed();
        let (batch, position) = out?;
        self.position = position;
        Ok(batch)
    }

    fn position(&self) -> String {
        self.position.clone()
    }

    fn set_position(&mut self, position: &str) -> Result<()> {
        let mut source = self.stop()?;
        let r = source.set_position(position);
        self.position = source.position();
        self.state = State::Idle(source);
        r
    }

    fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
