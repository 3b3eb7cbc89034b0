//! Slicing a single-device model's tensors into rank `r`'s shard of `n`: how a
//! tensor-parallel model is built from the same weights (same seed, same model), and how
//! tests slice the single-device gradients to compare them shard by shard.

use brrr_backend::{Backend, Error, Result};
use brrr_tensor::Tensor;

fn part(op: &'static str, len: usize, rank: usize, n: usize, what: &str) -> Result<usize> {
    if n == 0 || rank >= n {
        return Err(Error::invalid(op, format!("rank {rank} of {n} ranks")));
    }
    if !len.is_multiple_of(n) {
        return Err(Error::invalid(
            op,
            format!("{what} of size {len} does not divide by {n} tensor-parallel ranks"),
        ));
    }
    Ok(len / n)
}

/// Rank `rank`'s contiguous `1/n` of dimension `dim` (a dense copy).
pub fn split_dim<B: Backend>(
    t: &Tensor<B>,
    dim: usize,
    rank: usize,
    n: usize,
) -> Result<Tensor<B>> {
    let len = *t
        .dims()
        .get(dim)
        .ok_or_else(|| Error::shape("split_dim", format!("no dim {dim} in {}", t.shape())))?;
    let w = part("split_dim", len, rank, n, "dimension")?;
    t.narrow(dim as isize, rank * w, w)?.deep_clone()
}

/// Column-parallel shard of a weight `[out, in]` or bias `[out]`: rank `rank`'s rows
/// (output features).
pub fn column_shard<B: Backend>(t: &Tensor<B>, rank: usize, n: usize) -> Result<Tensor<B>> {
    split_dim(t, 0, rank, n)
}

/// Row-parallel shard of a weight `[out, in]`: rank `rank`'s columns (input features).
pub fn row_shard<B: Backend>(t: &Tensor<B>, rank: usize, n: usize) -> Result<Tensor<B>> {
    split_dim(t, 1, rank, n)
}

/// Rank `rank`'s shard of the fused q/k/v projection (weight `[3C, C]` or bias `[3C]`):
/// q, k and v are three blocks of `C` outputs, each split by heads, so the shard is
/// `[q_r; k_r; v_r]`, the q, k, v of heads `r·H/n .. (r+1)·H/n`, in the layout attention
/// reads (a contiguous `1/n` of the fused rows would give rank 0 all of q and half of k).
pub fn qkv_shard<B: Backend>(
    t: &Tensor<B>,
    n_head: usize,
    rank: usize,
    n: usize,
) -> Result<Tensor<B>> {
    let rows = t.dims().first().copied().unwrap_or(0);
    if rows == 0 || !rows.is_multiple_of(3) {
        return Err(Error::shape(
            "qkv_shard",
            format!("fused q/k/v must have 3·C rows, got {}", t.shape()),
        ));
    }
    part("qkv_shard", n_head, rank, n, "heads")?;
    let c = rows / 3;
    let blocks = (0..3)
        .map(|i| split_dim(&t.narrow(0, i * c, c)?, 0, rank, n))
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&[&blocks[0], &blocks[1], &blocks[2]], 0)
}

/// Rank `rank`'s shard of the single-device parameter `name` (a GPT's naming:
/// `wte.weight`, `h.0.attn.c_attn.weight`, ...), as [`crate::TpGpt`] holds it: the
/// vocabulary rows of `wte`, the heads of `c_attn`, the output rows of `mlp.c_fc`, the
/// input columns of both `c_proj` weights; everything else whole. Tests compare
/// gradients with it, and a checkpoint writer could invert it.
pub fn shard_by_name<B: Backend>(
    name: &str,
    full: &Tensor<B>,
    n_head: usize,
    rank: usize,
    n: usize,
) -> Result<Tensor<B>> {
    if name == "wte.weight" || name.contains(".mlp.c_fc.") {
        column_shard(full, rank, n)
    } else if name.contains(".attn.c_attn.") {
        qkv_shard(full, n_head, rank, n)
    } else if name.ends_with(".c_proj.weight") {
        row_shard(full, rank, n)
    } else {
        full.deep_clone()
    }
}
