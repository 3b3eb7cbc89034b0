//! Collective communication: a [`Communicator`] over the ranks of a world, its
//! collectives (all-reduce with sum/avg/max/min, reduce-scatter, all-gather, broadcast,
//! all-to-all, barrier, send/recv), sub-groups ([`Communicator::split`],
//! [`ParallelGroups`] for a `dp × tp × pp` layout), and [`Handle`]s to overlap them with
//! compute.
//!
//! Layers, bottom up:
//! - [`Link`]: point-to-point frames between ranks. Implementations: [`inproc`] (one
//!   thread per rank), [`socket`] (TCP with a rendezvous on `MASTER_ADDR:MASTER_PORT`),
//!   `mpi` (feature `mpi`). NCCL (feature `cuda`, module `nccl`) is a device engine with
//!   its own algorithms.
//! - [`algorithms`]: naive, ring, tree, double binary tree, recursive halving-doubling,
//!   each a function building a [`Schedule`] of transfers; written once, run by every
//!   transport and by [`Simulation`] step by step (the browser page).
//! - [`Communicator`]: runs schedules on host `f32` slices; [`tensor`] wraps it for a
//!   backend's tensors by reading them to the host, reducing, and writing back. A device
//!   engine such as NCCL avoids that round trip: it reduces in device memory.
//!
//! ```
//! use brrr_collectives::{ReduceOp, run_in_process};
//! let sums = run_in_process(3, |comm| {
//!     let mut g = vec![comm.rank() as f32; 4];
//!     comm.all_reduce(&mut g, ReduceOp::Sum)?;
//!     Ok(g)
//! });
//! for s in sums {
//!     assert_eq!(s.unwrap(), vec![3.0; 4]); // 0 + 1 + 2
//! }
//! ```

#![warn(missing_docs)]

pub mod algorithms;
mod communicator;
pub mod env;
pub mod error;
pub mod frame;
mod groups;
mod handle;
pub mod inproc;
pub mod link;
#[cfg(all(feature = "mpi", not(target_arch = "wasm32")))]
pub mod mpi;
#[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
pub mod nccl;
pub mod reduce;
pub mod schedule;
#[cfg(not(target_arch = "wasm32"))]
pub mod socket;
mod stats;
#[cfg(not(target_arch = "wasm32"))]
pub mod tensor;
pub mod verify;
#[cfg(not(target_arch = "wasm32"))]
mod world;
#[cfg(not(target_arch = "wasm32"))]
pub use world::from_env;

pub use algorithms::{Algorithm, Collective, plan};
pub use communicator::{Algorithms, Communicator, DEFAULT_TIMEOUT};
pub use error::{CollError, Result};
pub use groups::{ParallelGroups, ParallelLayout};
pub use handle::Handle;
pub use link::Link;
pub use reduce::{ReduceOp, reference_reduce};
pub use schedule::{Schedule, Simulation, Step, Transfer, chunk_range};
pub use stats::{CommStats, OpStats};

use std::time::Duration;

/// Runs `f` on `n` in-process ranks, one thread each, with the default timeout; returns
/// each rank's result in rank order. A rank that panics gives `Err` for that rank, and
/// the others see its link close.
pub fn run_in_process<T, F>(n: usize, f: F) -> Vec<Result<T>>
where
    T: Send,
    F: Fn(&Communicator) -> Result<T> + Sync,
{
    run_in_process_with_timeout(n, DEFAULT_TIMEOUT, f)
}

/// [`run_in_process`] with receives timing out after `timeout`.
pub fn run_in_process_with_timeout<T, F>(n: usize, timeout: Duration, f: F) -> Vec<Result<T>>
where
    T: Send,
    F: Fn(&Communicator) -> Result<T> + Sync,
{
    let links = inproc::links(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = links
            .into_iter()
            .map(|link| {
                let f = &f;
                s.spawn(move || {
                    let comm = Communicator::new(Box::new(link), timeout);
                    f(&comm)
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(r, h)| {
                h.join().unwrap_or_else(|_| {
                    Err(CollError::invalid(
                        "run_in_process",
                        format!("rank {r} panicked"),
                    ))
                })
            })
            .collect()
    })
}

#[cfg(all(test, not(feature = "cuda")))]
mod tests {
    #[test]
    fn nccl_is_reported_skipped_when_not_built() {
        brrr_backend::skip::report_skipped(
            "nccl all-reduce (brrr-collectives)",
            "built without the `cuda` feature",
        );
    }
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
