//! Overlapping communication with compute: a communicator's background thread runs
//! started operations in order, and a [`Handle`] waits for one. (A device engine such as
//! NCCL would instead enqueue the collective on a stream; on the host a thread is the
//! honest equivalent.)

use crate::error::{CollError, Result};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::ThreadId;

type Job = Box<dyn FnOnce() + Send>;

/// The result of a started operation, to wait for later.
#[derive(Debug)]
pub struct Handle<T> {
    rx: Receiver<Result<T>>,
}

impl<T> Handle<T> {
    /// Blocks until the operation has finished and returns its result.
    pub fn wait(self) -> Result<T> {
        self.rx.recv().unwrap_or_else(|_| {
            Err(CollError::invalid(
                "handle",
                "the background operation panicked",
            ))
        })
    }
}

/// A lazily started background thread plus a count of unfinished jobs.
#[derive(Default)]
pub(crate) struct Worker {
    tx: Mutex<Option<Sender<Job>>>,
    thread: OnceLock<ThreadId>,
    in_flight: Arc<(Mutex<usize>, Condvar)>,
}

impl Worker {
    /// Queues `f`; its result goes to the returned handle.
    pub(crate) fn submit<T, F>(&self, f: F) -> Result<Handle<T>>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T> + Send + 'static,
    {
        let (rtx, rrx) = channel();
        let counter = Arc::clone(&self.in_flight);
        let job: Job = Box::new(move || {
            let r = f();
            let _ = rtx.send(r);
            let (lock, cv) = &*counter;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
            cv.notify_all();
        });
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if tx.is_none() {
            *tx = Some(self.spawn()?);
        }
        *self.in_flight.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        if tx.as_ref().expect("spawned above").send(job).is_err() {
            *self.in_flight.0.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
            return Err(CollError::invalid(
                "start",
                "the background thread has ended",
            ));
        }
        Ok(Handle { rx: rrx })
    }

    fn spawn(&self) -> Result<Sender<Job>> {
        let (tx, rx) = channel::<Job>();
        let handle = std::thread::Builder::new()
            .name("brrr-collectives".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .map_err(|e| CollError::invalid("start", format!("no background thread: {e}")))?;
        let _ = self.thread.set(handle.thread().id());
        Ok(tx)
    }

    /// Waits until every queued job has finished (a no-op on the worker thread itself,
    /// whose current job is the one calling).
    pub(crate) fn wait_idle(&self) {
        if self.thread.get() == Some(&std::thread::current().id()) {
            return;
        }
        let (lock, cv) = &*self.in_flight;
        let mut n = lock.lock().unwrap_or_else(|p| p.into_inner());
        while *n > 0 {
            n = cv.wait(n).unwrap_or_else(|p| p.into_inner());
        }
    }
}
