use super::matmul_t;
use brrr_collectives::{Communicator, ReduceOp};

/// Each rank's ReLU on its own columns of the hidden layer, its partial `y` from its
/// rows of it, and one all-reduce summing the partials: Megatron's column → row split,
/// with its single collective.
pub fn tp_mlp(
    comm: &Communicator,
    x: &[f32],
    (w_fc, w_proj): (&[f32], &[f32]),
    (t, c): (usize, usize),
) -> brrr_collectives::Result<Vec<f32>> {
    let hidden = 4 * c / comm.world_size();
    let h: Vec<f32> = matmul_t(x, w_fc, t, c, hidden)
        .into_iter()
        .map(|v| v.max(0.0))
        .collect();
    let mut y = matmul_t(&h, w_proj, t, hidden, c);
    comm.all_reduce(&mut y, ReduceOp::Sum)?;
    Ok(y)
}
