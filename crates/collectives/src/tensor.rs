//! Collectives on a backend's tensors. The data is read to the host, reduced by the
//! [`Communicator`], and written into a new tensor of the same shape, dtype and backend:
//! simple and correct on every backend, but it costs a device-to-host and a
//! host-to-device copy per call. A device engine such as NCCL reduces in device memory
//! instead, which is why multi-GPU training uses one.

use crate::communicator::Communicator;
use crate::error::Result;
use crate::frame::dtype_code;
use crate::reduce::ReduceOp;
use brrr_backend::Backend;
use brrr_tensor::Tensor;

/// All-reduce of `t` over `comm`: a new tensor like `t` holding the reduction. Every rank
/// must pass the same dtype and element count (checked: a mismatch is an error).
pub fn all_reduce<B: Backend>(
    comm: &Communicator,
    t: &Tensor<B>,
    op: ReduceOp,
) -> Result<Tensor<B>> {
    let mut host = t.to_vec_f32()?;
    let alg = comm.algorithms().all_reduce;
    comm.all_reduce_with(&mut host, op, alg, dtype_code(t.dtype()))?;
    Ok(Tensor::from_f32(
        t.backend(),
        &host,
        t.shape().clone(),
        t.dtype(),
    )?)
}

/// Broadcast of `t` from `root`: a new tensor like `t` with the root's values.
pub fn broadcast<B: Backend>(comm: &Communicator, t: &Tensor<B>, root: usize) -> Result<Tensor<B>> {
    let mut host = t.to_vec_f32()?;
    comm.broadcast(&mut host, root)?;
    Ok(Tensor::from_f32(
        t.backend(),
        &host,
        t.shape().clone(),
        t.dtype(),
    )?)
}
