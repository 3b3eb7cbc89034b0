use brrr_collectives::{Communicator, ReduceOp};

/// Reduce-scatter the gradients (each rank gets the mean of its chunk), update the
/// chunk with the chunk's momentum, all-gather the new chunks: an all-reduce's traffic,
/// `1/n` of the optimizer state.
pub fn zero1_step(
    comm: &Communicator,
    params: &mut [f32],
    grads: &[f32],
    momentum: &mut Vec<f32>,
    (lr, beta): (f32, f32),
) -> brrr_collectives::Result<()> {
    let g = comm.reduce_scatter(grads, ReduceOp::Avg)?;
    let c = params.len() / comm.world_size();
    let mine = comm.rank() * c..(comm.rank() + 1) * c;
    momentum.resize(c, 0.0);
    let mut chunk = params[mine].to_vec();
    for ((p, m), g) in chunk.iter_mut().zip(momentum.iter_mut()).zip(&g) {
        *m = beta * *m + g;
        *p -= lr * *m;
    }
    params.copy_from_slice(&comm.all_gather(&chunk)?);
    Ok(())
}
