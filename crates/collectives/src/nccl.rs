//! NCCL through cudarc (feature `cuda`): the device engine for CUDA, one process per GPU.
//! NCCL runs its own ring and tree algorithms in device memory, so the host round trip of
//! [`crate::tensor`] disappears. Ranks share NCCL's unique id through a host
//! [`Communicator`] (sockets on `MASTER_ADDR:MASTER_PORT`, or MPI): rank 0 creates it
//! and broadcasts its 128 bytes.
//!
//! cudarc loads libcuda and libnccl at run time and panics when they are absent, so
//! [`availability`] checks for both (and a GPU) before anything touches them.

use crate::communicator::Communicator;
use crate::error::{CollError, Result};
use crate::reduce::ReduceOp;
use cudarc::driver::CudaContext;
use cudarc::nccl::{Comm, Id};
use std::sync::Arc;

/// `Ok` when libcuda, libnccl and a GPU are present; otherwise why not.
pub fn availability() -> std::result::Result<(), String> {
    // SAFETY: these only try to load the shared libraries; no CUDA state is touched.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("libcuda not found".into());
    }
    // SAFETY: as above, for libnccl.
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Err("libnccl not found".into());
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => Ok(()),
        Ok(_) => Err("no CUDA device".into()),
        Err(e) => Err(format!("no CUDA device: {e}")),
    }
}

/// One rank's NCCL communicator on GPU `ordinal`.
pub struct NcclCommunicator {
    comm: Comm,
}

fn nccl_err(e: impl std::fmt::Debug) -> CollError {
    CollError::setup("nccl", format!("{e:?}"))
}

impl NcclCommunicator {
    /// Creates the NCCL communicator of `host`'s world on GPU `ordinal` (usually the
    /// local rank). Collective over `host`.
    pub fn new(host: &Communicator, ordinal: usize) -> Result<Self> {
        availability().map_err(|reason| CollError::Unavailable {
            transport: "nccl",
            reason,
        })?;
        // The 128-byte id travels as 32 f32 bit patterns (copied, never computed on).
        let mut words = [0f32; 32];
        if host.rank() == 0 {
            let id = Id::new().map_err(nccl_err)?;
            let bytes: Vec<u8> = id.internal().iter().map(|&c| c as u8).collect();
            for (w, b) in words.iter_mut().zip(bytes.chunks_exact(4)) {
                *w = f32::from_bits(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            }
        }
        host.broadcast(&mut words, 0)?;
        let mut internal = [0 as core::ffi::c_char; 128];
        for (i, w) in words.iter().enumerate() {
            for (j, b) in w.to_bits().to_le_bytes().into_iter().enumerate() {
                internal[4 * i + j] = b as core::ffi::c_char;
            }
        }
        let ctx: Arc<CudaContext> = CudaContext::new(ordinal).map_err(nccl_err)?;
        let comm = Comm::from_rank(
            ctx.default_stream(),
            host.rank(),
            host.world_size(),
            Id::uninit(internal),
        )
        .map_err(nccl_err)?;
        Ok(NcclCommunicator { comm })
    }

    /// All-reduce of a host buffer through device memory (for tests and the benchmark;
    /// training would keep its gradients on the device and call NCCL on them directly).
    pub fn all_reduce_host(&self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        let stream = self.comm.stream();
        let mut dev = stream.clone_htod(buf).map_err(nccl_err)?;
        let nop = match op {
            ReduceOp::Sum => cudarc::nccl::ReduceOp::Sum,
            ReduceOp::Avg => cudarc::nccl::ReduceOp::Avg,
            ReduceOp::Max => cudarc::nccl::ReduceOp::Max,
            ReduceOp::Min => cudarc::nccl::ReduceOp::Min,
        };
        self.comm
            .all_reduce_in_place(&mut dev, &nop)
            .map_err(nccl_err)?;
        let back = stream.clone_dtoh(&dev).map_err(nccl_err)?;
        buf.copy_from_slice(&back);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// One rank (what one GPU allows: NCCL refuses two ranks on one device): the
    /// communicator is built through the host world, and every operation of a one-rank
    /// world returns its input bit for bit, through device memory. Absent libnccl or a GPU
    /// it is SKIPPED by name, unless `BRRR_REQUIRE_CUDA=1` (a GPU machine's run) makes
    /// that a failure.
    #[test]
    fn nccl_all_reduce_or_skipped_by_name() {
        if let Err(reason) = super::availability() {
            if std::env::var("BRRR_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("BRRR_REQUIRE_CUDA=1 but NCCL is unavailable: {reason}");
            }
            brrr_backend::skip::report_skipped("nccl all-reduce (brrr-collectives)", &reason);
            return;
        }
        // Values no reduction of one rank may change: odd bit patterns, both signs.
        let input: Vec<f32> = (0..4099u32)
            .map(|i| {
                f32::from_bits(0x3f80_0001u32.wrapping_add(i.wrapping_mul(2_654_435_761) >> 9))
                    - 1.5
            })
            .collect();
        let out = crate::run_in_process(1, |c| {
            let n = super::NcclCommunicator::new(c, 0)?;
            let mut results = Vec::new();
            for op in [
                crate::ReduceOp::Sum,
                crate::ReduceOp::Max,
                crate::ReduceOp::Avg,
            ] {
                let mut b = input.clone();
                n.all_reduce_host(&mut b, op)?;
                results.push(b);
            }
            Ok(results)
        });
        for (op, got) in ["sum", "max", "avg"].iter().zip(out[0].as_ref().unwrap()) {
            let same = got
                .iter()
                .zip(&input)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "one-rank NCCL {op} changed its input");
        }
    }
}
