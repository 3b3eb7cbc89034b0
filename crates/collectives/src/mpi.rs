//! MPI transport (feature `mpi`): frames as MPI messages between the ranks of
//! `MPI_COMM_WORLD`, so that `mpirun -np N` ranks run the same algorithms as every other
//! transport. Sends are non-blocking (`MPI_Isend` on a buffer the link owns until the
//! send completes), as [`Link`] requires; receives poll with `MPI_Improbe` so that they can
//! give up after the timeout instead of blocking forever in `MPI_Recv`.

use crate::error::{CollError, Result};
use crate::frame::{Frame, HEADER_BYTES};
use crate::link::{Link, LinkError};
use mpi::point_to_point::MatchedReceiveVec;
use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, Destination, Source};
use std::mem::ManuallyDrop;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A send in flight and the buffer it reads (from `Box::into_raw`).
type PendingSend = (Request<'static, [u8], StaticScope>, *mut [u8]);

/// One rank of `MPI_COMM_WORLD`.
pub struct MpiLink {
    rank: usize,
    size: usize,
    max_frame_elems: u64,
    /// Every MPI call, one at a time (`Threading::Serialized`); never held while a receive
    /// waits between polls.
    mpi: Mutex<Mpi>,
}

/// MPI's state: the world, the sends in flight, whether a peer failed.
struct Mpi {
    world: SimpleCommunicator,
    /// Sends in flight and the buffers they read, freed when they complete.
    pending: Vec<PendingSend>,
    /// A receive timed out or a frame was malformed: a peer is dead or stuck, and
    /// `MPI_Finalize` (which waits for every rank) would hang on it.
    failed: bool,
    // MPI is finalised when the universe drops, in `Drop`, after the sends above are
    // complete; never when a send could not complete (a peer stopped answering).
    universe: ManuallyDrop<mpi::environment::Universe>,
}

// SAFETY: MPI is initialised with at least `Threading::Serialized`, which allows calls
// from any thread as long as no two run at once. Every call goes through `&mut Mpi`,
// which only `MpiLink`'s mutex hands out, so calls are serialised; the raw buffer
// pointers are owned by this value alone.
unsafe impl Send for Mpi {}

impl MpiLink {
    /// Initialises MPI (once per process) and joins `MPI_COMM_WORLD`.
    pub fn init() -> Result<Self> {
        let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .ok_or_else(|| CollError::setup("mpi", "MPI is already initialised in this process"))?;
        if level < mpi::Threading::Serialized {
            return Err(CollError::setup(
                "mpi",
                format!("MPI offers only {level:?} threading"),
            ));
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(MpiLink {
            rank,
            size,
            max_frame_elems: 1 << 28,
            mpi: Mutex::new(Mpi {
                world,
                pending: Vec::new(),
                failed: false,
                universe: ManuallyDrop::new(universe),
            }),
        })
    }

    fn mpi(&self) -> MutexGuard<'_, Mpi> {
        self.mpi.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Mpi {
    /// Frees the buffers of completed sends.
    fn reap(&mut self) {
        let mut still = Vec::with_capacity(self.pending.len());
        for (req, buf) in self.pending.drain(..) {
            match req.test() {
                // SAFETY: `buf` came from `Box::into_raw` in `send` and its send is complete,
                // so nothing reads it any more.
                Ok(_) => drop(unsafe { Box::from_raw(buf) }),
                Err(req) => still.push((req, buf)),
            }
        }
        self.pending = still;
    }
}

/// How long a closing link waits for its last sends to be received.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

impl Drop for Mpi {
    /// Waits (boundedly) for the sends still in flight, then finalises MPI. A peer that
    /// stopped answering never receives them and never reaches `MPI_Finalize`: waiting
    /// for it (`MPI_Wait`, or `MPI_Finalize`, which waits for every rank) would turn its
    /// fault into this rank's hang. So after a timed-out receive, or after
    /// `DRAIN_TIMEOUT` (5 s) with sends still pending, MPI is left unfinalised (and the sends
    /// and their buffers leaked): the process exits with its error, and the launcher ends
    /// the job.
    fn drop(&mut self) {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while !self.pending.is_empty() && Instant::now() < deadline {
            self.reap();
            std::thread::sleep(Duration::from_millis(1));
        }
        if self.failed || std::thread::panicking() {
            eprintln!("mpi: a peer stopped answering; exiting without MPI_Finalize");
        } else if self.pending.is_empty() {
            // SAFETY: dropped once, here, and the field is never used after.
            unsafe { ManuallyDrop::drop(&mut self.universe) };
            return;
        } else {
            eprintln!(
                "mpi: {} send(s) to unresponsive ranks never completed; exiting without MPI_Finalize",
                self.pending.len()
            );
        }
        for (req, _buf) in self.pending.drain(..) {
            // An incomplete request may not be dropped (rsmpi panics) and its buffer may
            // still be read by MPI: both are leaked until the process exits.
            std::mem::forget(req);
        }
    }
}

impl Link for MpiLink {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.size
    }

    fn name(&self) -> &'static str {
        "mpi"
    }

    fn send(&self, to: usize, frame: Frame) -> Result<(), LinkError> {
        if to >= self.size {
            return Err(LinkError::Lost(format!("no rank {to}")));
        }
        let mut mpi = self.mpi();
        mpi.reap();
        let mut bytes = frame.encode_header().to_vec();
        bytes.extend(frame.payload_bytes());
        let raw: *mut [u8] = Box::into_raw(bytes.into_boxed_slice());
        // SAFETY: the buffer stays allocated until the request completes (`reap`/`drop`),
        // which is what the `'static` promises MPI.
        let buf: &'static [u8] = unsafe { &*raw };
        let req = mpi
            .world
            .process_at_rank(to as i32)
            .immediate_send(StaticScope, buf);
        mpi.pending.push((req, raw));
        Ok(())
    }

    fn recv(&self, from: usize, timeout: Duration) -> Result<Frame, LinkError> {
        if from >= self.size {
            return Err(LinkError::Lost(format!("no rank {from}")));
        }
        let deadline = Instant::now() + timeout;
        let bytes = loop {
            {
                // Locked for one poll only: the rank's other threads call MPI between polls.
                let mut mpi = self.mpi();
                if let Some(probed) = mpi
                    .world
                    .process_at_rank(from as i32)
                    .immediate_matched_probe()
                {
                    break probed.matched_receive_vec::<u8>().0;
                }
                mpi.reap();
                if Instant::now() > deadline {
                    mpi.failed = true;
                    return Err(LinkError::Timeout);
                }
            }
            std::thread::yield_now();
        };
        let header: &[u8; HEADER_BYTES] = bytes
            .get(..HEADER_BYTES)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| LinkError::Lost(format!("a message of {} bytes", bytes.len())))?;
        let (header, len) =
            Frame::decode_header(header, self.max_frame_elems).map_err(LinkError::Other)?;
        if bytes.len() != HEADER_BYTES + 4 * len {
            return Err(LinkError::Lost(format!(
                "a frame of {len} elements in {} bytes",
                bytes.len()
            )));
        }
        let data = bytes[HEADER_BYTES..]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok(Frame { header, data })
    }
}
