//! The collectives a tensor-parallel layer calls, on a backend's tensors, and Megatron's
//! conjugate operators built from them.
//!
//! Tensors go to the host, through the [`Communicator`], and back (the collectives'
//! `tensor` helpers): correct on every backend; a device engine (NCCL) would avoid the
//! round trip. Sequence-parallel tensors are `[B, T, C]` with the sequence split over
//! the ranks along dimension 1: rank `r` holds positions `r·T/n .. (r+1)·T/n`.

use brrr_backend::{Backend, Error, Result};
use brrr_collectives::{Communicator, ReduceOp};
use brrr_tensor::Tensor;

/// Sum of `t` over the ranks of `comm`.
pub fn all_reduce_sum<B: Backend>(comm: &Communicator, t: &Tensor<B>) -> Result<Tensor<B>> {
    Ok(brrr_collectives::tensor::all_reduce(
        comm,
        t,
        ReduceOp::Sum,
    )?)
}

/// Element-wise maximum of `t` over the ranks of `comm`.
pub fn all_reduce_max<B: Backend>(comm: &Communicator, t: &Tensor<B>) -> Result<Tensor<B>> {
    Ok(brrr_collectives::tensor::all_reduce(
        comm,
        t,
        ReduceOp::Max,
    )?)
}

fn dims3<B: Backend>(op: &'static str, x: &Tensor<B>) -> Result<(usize, usize, usize)> {
    match x.dims() {
        &[b, t, c] => Ok((b, t, c)),
        _ => Err(Error::shape(
            op,
            format!("expected [B, T, C], got {}", x.shape()),
        )),
    }
}

/// `[B, T/n, C]` on each rank → `[B, T, C]` on every rank, the shards concatenated in
/// rank order along the sequence.
pub fn all_gather_sequence<B: Backend>(comm: &Communicator, x: &Tensor<B>) -> Result<Tensor<B>> {
    let (b, tl, c) = dims3("all_gather_sequence", x)?;
    let n = comm.world_size();
    if n == 1 {
        return Ok(x.clone());
    }
    // The communicator concatenates flat buffers in rank order: [n, B, T/n, C].
    let all = comm.all_gather(&x.to_vec_f32()?)?;
    let t = Tensor::from_f32(x.backend(), &all, [n, b, tl, c], x.dtype())?;
    t.permute(&[1, 0, 2, 3])?
        .contiguous()?
        .reshape([b, n * tl, c])
}

/// `[B, T, C]` partial sums on each rank → rank `r`'s sequence shard `[B, T/n, C]` of
/// their sum. `T` must divide by the number of ranks.
pub fn reduce_scatter_sequence<B: Backend>(
    comm: &Communicator,
    x: &Tensor<B>,
) -> Result<Tensor<B>> {
    let (b, t, c) = dims3("reduce_scatter_sequence", x)?;
    let n = comm.world_size();
    if !t.is_multiple_of(n) {
        return Err(Error::invalid(
            "reduce_scatter_sequence",
            format!("sequence length {t} does not divide by {n} tensor-parallel ranks"),
        ));
    }
    if n == 1 {
        return Ok(x.clone());
    }
    let tl = t / n;
    // Rank-major [n, B, T/n, C], so that the communicator's r-th chunk is shard r.
    let x4 = x
        .reshape([b, n, tl, c])?
        .permute(&[1, 0, 2, 3])?
        .contiguous()?;
    let mine = comm.reduce_scatter(&x4.to_vec_f32()?, ReduceOp::Sum)?;
    Tensor::from_f32(x.backend(), &mine, [b, tl, c], x.dtype())
}

/// Where a tensor-parallel region begins (Megatron-LM, Shoeybi et al. 2019, §3, the
/// operator `f`; with sequence parallelism Korthikanti et al. 2022, §4.2.2, `g`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionEntry {
    /// The input is replicated on every rank: identity forward, all-reduce of the
    /// input gradient backward (each rank's gradient covers only its own columns).
    Copy,
    /// The input is a sequence shard: all-gather forward, reduce-scatter backward.
    GatherSequence,
}

impl RegionEntry {
    /// The entry for a model with (`true`) or without sequence parallelism.
    pub fn for_sequence_parallel(sp: bool) -> Self {
        if sp {
            RegionEntry::GatherSequence
        } else {
            RegionEntry::Copy
        }
    }

    /// Forward: the full input of the region.
    pub fn forward<B: Backend>(&self, comm: &Communicator, x: &Tensor<B>) -> Result<Tensor<B>> {
        match self {
            RegionEntry::Copy => Ok(x.clone()),
            RegionEntry::GatherSequence => all_gather_sequence(comm, x),
        }
    }

    /// Backward: the gradient of the region's input, summed over the ranks.
    pub fn backward<B: Backend>(&self, comm: &Communicator, dx: &Tensor<B>) -> Result<Tensor<B>> {
        match self {
            RegionEntry::Copy => all_reduce_sum(comm, dx),
            RegionEntry::GatherSequence => reduce_scatter_sequence(comm, dx),
        }
    }
}

/// Where a tensor-parallel region ends (Megatron's `g`; with sequence parallelism
/// `ḡ`): each rank holds a partial sum of the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionExit {
    /// All-reduce forward (every rank gets the full output), identity backward.
    AllReduce,
    /// Reduce-scatter forward (each rank gets its sequence shard of the sum),
    /// all-gather backward.
    ReduceScatterSequence,
}

impl RegionExit {
    /// The exit for a model with (`true`) or without sequence parallelism.
    pub fn for_sequence_parallel(sp: bool) -> Self {
        if sp {
            RegionExit::ReduceScatterSequence
        } else {
            RegionExit::AllReduce
        }
    }

    /// Forward: the partial sums reduced.
    pub fn forward<B: Backend>(&self, comm: &Communicator, y: &Tensor<B>) -> Result<Tensor<B>> {
        match self {
            RegionExit::AllReduce => all_reduce_sum(comm, y),
            RegionExit::ReduceScatterSequence => reduce_scatter_sequence(comm, y),
        }
    }

    /// Backward: the full output gradient every rank's partial sum needs.
    pub fn backward<B: Backend>(&self, comm: &Communicator, dy: &Tensor<B>) -> Result<Tensor<B>> {
        match self {
            RegionExit::AllReduce => Ok(dy.clone()),
            RegionExit::ReduceScatterSequence => all_gather_sequence(comm, dy),
        }
    }
}
