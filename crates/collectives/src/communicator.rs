//! [`Communicator`]: the ranks of a world (or of a sub-group of it) and the collectives
//! between them, on host `f32` slices. Each collective builds the chosen algorithm's
//! [`Schedule`] and runs it over the [`Mailbox`]: the same code runs in-process, over
//! sockets and over MPI.

use crate::algorithms::{self, Algorithm, Collective};
use crate::error::{CollError, Result};
use crate::frame::{Frame, Header, OpCode};
use crate::link::{Expect, Link, Mailbox};
use crate::reduce::ReduceOp;
use crate::schedule::{Schedule, chunk_range};
use crate::stats::CommStats;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The default receive timeout: long enough for a slow first step (allocations, a busy
/// machine), short enough that a dead rank is noticed. Override with
/// [`Communicator::set_timeout`] or `BRRR_COLL_TIMEOUT_S` (see [`crate::env`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The algorithm each collective uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Algorithms {
    /// For all-reduce.
    pub all_reduce: Algorithm,
    /// For reduce-scatter.
    pub reduce_scatter: Algorithm,
    /// For all-gather.
    pub all_gather: Algorithm,
    /// For broadcast.
    pub broadcast: Algorithm,
    /// For all-to-all.
    pub all_to_all: Algorithm,
}

impl Default for Algorithms {
    /// Ring everywhere but broadcast (tree): the bandwidth-optimal choice for the large
    /// gradient buffers of training.
    fn default() -> Self {
        Algorithms {
            all_reduce: Algorithm::Ring,
            reduce_scatter: Algorithm::Ring,
            all_gather: Algorithm::Ring,
            broadcast: Algorithm::Tree,
            all_to_all: Algorithm::Ring,
        }
    }
}

impl Algorithms {
    /// The algorithm for `c`.
    pub fn get(&self, c: Collective) -> Algorithm {
        match c {
            Collective::AllReduce => self.all_reduce,
            Collective::ReduceScatter => self.reduce_scatter,
            Collective::AllGather => self.all_gather,
            Collective::Broadcast => self.broadcast,
            Collective::AllToAll => self.all_to_all,
        }
    }
}

/// A group of ranks that run collectives together. Cheap to share between threads
/// (`&Communicator` is enough for every operation); the `*_start` methods return a
/// [`Handle`](crate::Handle) so that a caller can compute while the collective runs.
pub struct Communicator {
    mailbox: Arc<Mailbox>,
    /// Group rank → world rank.
    ranks: Vec<usize>,
    rank: usize,
    ctx: u32,
    splits: AtomicU32,
    algorithms: Mutex<Algorithms>,
    worker: crate::handle::Worker,
    stats: Mutex<CommStats>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("ranks", &self.ranks)
            .field("ctx", &self.ctx)
            .finish()
    }
}

impl Communicator {
    /// The world of `link`, with receives timing out after `timeout`.
    pub fn new(link: Box<dyn Link>, timeout: Duration) -> Self {
        let rank = link.rank();
        let n = link.world_size();
        Communicator {
            mailbox: Arc::new(Mailbox::new(link, timeout)),
            ranks: (0..n).collect(),
            rank,
            ctx: 0,
            splits: AtomicU32::new(0),
            algorithms: Mutex::new(Algorithms::default()),
            worker: crate::handle::Worker::default(),
            stats: Mutex::new(CommStats::default()),
        }
    }

    /// This rank within the communicator.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the communicator.
    pub fn world_size(&self) -> usize {
        self.ranks.len()
    }

    /// The world ranks of this communicator's members, in group-rank order.
    pub fn world_ranks(&self) -> &[usize] {
        &self.ranks
    }

    /// The transport's name (`in-process`, `socket`, `mpi`).
    pub fn transport(&self) -> &'static str {
        self.mailbox().transport()
    }

    /// The receive timeout (shared by every communicator of the same world).
    pub fn timeout(&self) -> Duration {
        self.mailbox().timeout()
    }

    /// Changes the receive timeout.
    pub fn set_timeout(&self, timeout: Duration) {
        self.mailbox().set_timeout(timeout);
    }

    /// The algorithms in use.
    pub fn algorithms(&self) -> Algorithms {
        *self.algorithms.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Uses `algorithm` for `collective` from now on (every rank must choose the same).
    pub fn set_algorithm(&self, collective: Collective, algorithm: Algorithm) -> Result<()> {
        if !algorithm.supports(collective) {
            return Err(CollError::invalid(
                collective.name(),
                format!("the {} algorithm does not implement it", algorithm.name()),
            ));
        }
        let mut a = self.algorithms.lock().unwrap_or_else(|p| p.into_inner());
        match collective {
            Collective::AllReduce => a.all_reduce = algorithm,
            Collective::ReduceScatter => a.reduce_scatter = algorithm,
            Collective::AllGather => a.all_gather = algorithm,
            Collective::Broadcast => a.broadcast = algorithm,
            Collective::AllToAll => a.all_to_all = algorithm,
        }
        Ok(())
    }

    /// What this communicator has moved since it was made or [`Communicator::reset_stats`].
    pub fn stats(&self) -> CommStats {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Zeroes the counters of [`Communicator::stats`].
    pub fn reset_stats(&self) {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner()) = CommStats::default();
    }

    fn record(&self, op: OpCode, elements: usize, sent: usize, received: usize) {
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.record(op.name(), elements, sent, received);
    }

    fn mailbox(&self) -> &Mailbox {
        &self.mailbox
    }

    fn header(&self, op: OpCode, dtype: u8, total: usize) -> Header {
        Header {
            ctx: self.ctx,
            op,
            dtype,
            total: total as u64,
        }
    }

    /// Runs `schedule` on this rank's `buf`. On any error, tells the other ranks.
    pub(crate) fn execute(
        &self,
        schedule: &Schedule,
        buf: &mut [f32],
        op: ReduceOp,
        header: Header,
    ) -> Result<()> {
        self.worker.wait_idle();
        if buf.len() != schedule.len {
            return Err(CollError::invalid(
                header.op.name(),
                format!(
                    "buffer of {} elements, schedule for {}",
                    buf.len(),
                    schedule.len
                ),
            ));
        }
        let mb = self.mailbox();
        let result = self.run_schedule(mb, schedule, buf, op, header);
        if result.is_err() {
            mb.abort_all(self.ctx);
        } else {
            let me = self.rank;
            let transfers = schedule.steps.iter().flat_map(|s| &s.transfers);
            let (mut sent, mut received) = (0, 0);
            for t in transfers.filter(|t| t.src != t.dst) {
                if t.src == me {
                    sent += t.src_range.len();
                }
                if t.dst == me {
                    received += t.dst_range.len();
                }
            }
            self.record(header.op, header.total as usize, sent, received);
        }
        result
    }

    fn run_schedule(
        &self,
        mb: &Mailbox,
        schedule: &Schedule,
        buf: &mut [f32],
        op: ReduceOp,
        header: Header,
    ) -> Result<()> {
        let me = self.rank;
        for step in &schedule.steps {
            // Sources are read as they are at the start of the step: local copies are
            // taken before anything arrives, and every send goes out before any receive.
            let locals: Vec<Vec<f32>> = step
                .transfers
                .iter()
                .filter(|t| t.src == me && t.dst == me)
                .map(|t| buf[t.src_range.clone()].to_vec())
                .collect();
            for t in step.transfers.iter().filter(|t| t.src == me && t.dst != me) {
                let data = buf[t.src_range.clone()].to_vec();
                mb.send(self.ranks[t.dst], Frame { header, data })?;
            }
            for t in step.transfers.iter().filter(|t| t.dst == me && t.src != me) {
                let expect = Expect {
                    header,
                    len: t.dst_range.len(),
                };
                let frame = mb.recv(self.ranks[t.src], expect)?;
                apply(&mut buf[t.dst_range.clone()], &frame.data, t.reduce, op);
            }
            let local_ts = step.transfers.iter().filter(|t| t.src == me && t.dst == me);
            for (t, data) in local_ts.zip(locals) {
                apply(&mut buf[t.dst_range.clone()], &data, t.reduce, op);
            }
        }
        Ok(())
    }

    fn plan(&self, c: Collective, alg: Algorithm, len: usize, root: usize) -> Result<Schedule> {
        algorithms::plan(c, alg, self.world_size(), len, root)
    }

    /// All-reduce `buf` in place with the configured algorithm.
    pub fn all_reduce(&self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        self.all_reduce_with(buf, op, self.algorithms().all_reduce, 0)
    }

    /// All-reduce `buf` in place with `alg`; `dtype` is the caller's dtype code
    /// ([`crate::frame::dtype_code`]; 0 for f32), checked across ranks.
    pub fn all_reduce_with(
        &self,
        buf: &mut [f32],
        op: ReduceOp,
        alg: Algorithm,
        dtype: u8,
    ) -> Result<()> {
        let s = self.plan(Collective::AllReduce, alg, buf.len(), 0)?;
        self.execute(
            &s,
            buf,
            op,
            self.header(OpCode::AllReduce, dtype, buf.len()),
        )?;
        op.finish(buf, self.world_size());
        Ok(())
    }

    /// Reduce-scatter: returns this rank's chunk ([`chunk_range`]`(len, n, rank)`) of
    /// the reduction of every rank's `input`. Lengths need not divide by the world size.
    pub fn reduce_scatter(&self, input: &[f32], op: ReduceOp) -> Result<Vec<f32>> {
        self.reduce_scatter_with(input, op, self.algorithms().reduce_scatter)
    }

    /// [`Communicator::reduce_scatter`] with `alg`.
    pub fn reduce_scatter_with(
        &self,
        input: &[f32],
        op: ReduceOp,
        alg: Algorithm,
    ) -> Result<Vec<f32>> {
        let n = input.len();
        let s = self.plan(Collective::ReduceScatter, alg, n, 0)?;
        let mut work = input.to_vec();
        self.execute(&s, &mut work, op, self.header(OpCode::ReduceScatter, 0, n))?;
        let mut out = work[chunk_range(n, self.world_size(), self.rank)].to_vec();
        op.finish(&mut out, self.world_size());
        Ok(out)
    }

    /// All-gather: every rank's `input` (equal lengths), concatenated in rank order.
    pub fn all_gather(&self, input: &[f32]) -> Result<Vec<f32>> {
        self.all_gather_with(input, self.algorithms().all_gather)
    }

    /// [`Communicator::all_gather`] with `alg`.
    pub fn all_gather_with(&self, input: &[f32], alg: Algorithm) -> Result<Vec<f32>> {
        let n = self.world_size();
        let total = input
            .len()
            .checked_mul(n)
            .ok_or_else(|| CollError::invalid("all-gather", "output length overflows"))?;
        let s = self.plan(Collective::AllGather, alg, total, 0)?;
        let mut work = vec![0.0; total];
        work[chunk_range(total, n, self.rank)].copy_from_slice(input);
        self.execute(
            &s,
            &mut work,
            ReduceOp::Sum,
            self.header(OpCode::AllGather, 0, total),
        )?;
        Ok(work)
    }

    /// Broadcast `buf` from `root` to every rank.
    pub fn broadcast(&self, buf: &mut [f32], root: usize) -> Result<()> {
        self.broadcast_with(buf, root, self.algorithms().broadcast)
    }

    /// [`Communicator::broadcast`] with `alg`.
    pub fn broadcast_with(&self, buf: &mut [f32], root: usize, alg: Algorithm) -> Result<()> {
        let s = self.plan(Collective::Broadcast, alg, buf.len(), root)?;
        let header = self.header(OpCode::Broadcast, 0, buf.len());
        self.execute(&s, buf, ReduceOp::Sum, header)
    }

    /// All-to-all: `input` is `n` blocks of equal length, block `j` for rank `j`; the
    /// result is `n` blocks, block `i` from rank `i`.
    pub fn all_to_all(&self, input: &[f32]) -> Result<Vec<f32>> {
        self.all_to_all_with(input, self.algorithms().all_to_all)
    }

    /// [`Communicator::all_to_all`] with `alg`.
    pub fn all_to_all_with(&self, input: &[f32], alg: Algorithm) -> Result<Vec<f32>> {
        let n = self.world_size();
        if !input.len().is_multiple_of(n) {
            return Err(CollError::invalid(
                "all-to-all",
                format!(
                    "{} elements do not split into {n} equal blocks",
                    input.len()
                ),
            ));
        }
        let s = self.plan(Collective::AllToAll, alg, input.len() / n, 0)?;
        let mut work = input.to_vec();
        work.resize(2 * input.len(), 0.0);
        let header = self.header(OpCode::AllToAll, 0, input.len());
        self.execute(&s, &mut work, ReduceOp::Sum, header)?;
        Ok(work.split_off(input.len()))
    }

    /// Waits until every rank has called `barrier`.
    pub fn barrier(&self) -> Result<()> {
        let s = algorithms::barrier(self.world_size());
        self.execute(
            &s,
            &mut [],
            ReduceOp::Sum,
            self.header(OpCode::Barrier, 0, 0),
        )
    }

    /// Sends `data` to rank `to` (returns without waiting for the receiver).
    pub fn send(&self, to: usize, data: &[f32]) -> Result<()> {
        let world = *self.peer(to, "send")?;
        self.worker.wait_idle();
        let header = self.header(OpCode::SendRecv, 0, data.len());
        self.mailbox().send(
            world,
            Frame {
                header,
                data: data.to_vec(),
            },
        )?;
        self.record(OpCode::SendRecv, data.len(), data.len(), 0);
        Ok(())
    }

    /// Receives `out.len()` elements from rank `from`; an error if it sent another length.
    pub fn recv(&self, from: usize, out: &mut [f32]) -> Result<()> {
        let world = *self.peer(from, "recv")?;
        self.worker.wait_idle();
        let header = self.header(OpCode::SendRecv, 0, out.len());
        let f = self.mailbox().recv(
            world,
            Expect {
                header,
                len: out.len(),
            },
        )?;
        out.copy_from_slice(&f.data);
        self.record(OpCode::SendRecv, out.len(), 0, out.len());
        Ok(())
    }

    fn peer(&self, r: usize, op: &'static str) -> Result<&usize> {
        self.ranks.get(r).ok_or_else(|| {
            CollError::invalid(
                op,
                format!("rank {r} out of range (world size {})", self.world_size()),
            )
        })
    }

    /// Splits into sub-groups, as `MPI_Comm_split`: ranks passing the same `color` form
    /// one communicator, ordered by `key` (then by rank). Collective over this
    /// communicator; the groups share its transport.
    pub fn split(&self, color: u32, key: u32) -> Result<Communicator> {
        let pairs = self.all_gather_with(
            &[f32::from_bits(color), f32::from_bits(key)],
            Algorithm::Ring,
        )?;
        let mut members: Vec<(u32, usize)> = (0..self.world_size())
            .filter(|&r| pairs[2 * r].to_bits() == color)
            .map(|r| (pairs[2 * r + 1].to_bits(), r))
            .collect();
        members.sort_unstable();
        let rank = members
            .iter()
            .position(|&(_, r)| r == self.rank)
            .expect("this rank passed its own color");
        let split_no = self.splits.fetch_add(1, Ordering::Relaxed);
        Ok(Communicator {
            mailbox: Arc::clone(&self.mailbox),
            ranks: members.iter().map(|&(_, r)| self.ranks[r]).collect(),
            rank,
            ctx: derive_ctx(self.ctx, split_no, color),
            splits: AtomicU32::new(0),
            algorithms: Mutex::new(self.algorithms()),
            worker: crate::handle::Worker::default(),
            stats: Mutex::new(CommStats::default()),
        })
    }

    /// Runs `f` on a background thread, after every operation started before it; the
    /// handle's [`crate::Handle::wait`] returns its result. Blocking calls on this
    /// communicator wait for started operations first, so the order of collectives is the
    /// order of calls on every rank.
    pub fn start<T, F>(self: &Arc<Self>, f: F) -> Result<crate::Handle<T>>
    where
        T: Send + 'static,
        F: FnOnce(&Communicator) -> Result<T> + Send + 'static,
    {
        let me = Arc::clone(self);
        self.worker.submit(move || f(&me))
    }

    /// All-reduce of `data` on a background thread ([`Communicator::start`]).
    pub fn all_reduce_start(
        self: &Arc<Self>,
        mut data: Vec<f32>,
        op: ReduceOp,
    ) -> Result<crate::Handle<Vec<f32>>> {
        self.start(move |c| {
            c.all_reduce(&mut data, op)?;
            Ok(data)
        })
    }
}

fn apply(dst: &mut [f32], data: &[f32], reduce: bool, op: ReduceOp) {
    if reduce {
        op.combine_into(dst, data);
    } else {
        dst.copy_from_slice(data);
    }
}

/// A context id for a sub-group: equal on its members (they computed it from the same
/// parent, split count and color), distinct from other groups' with overwhelming
/// probability (a 32-bit mix, splitmix-style).
fn derive_ctx(parent: u32, split_no: u32, color: u32) -> u32 {
    let mut x = (u64::from(parent) << 40) ^ (u64::from(split_no) << 32) ^ u64::from(color);
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    let c = (x ^ (x >> 31)) as u32;
    // 0 is the world.
    c.max(1)
}
