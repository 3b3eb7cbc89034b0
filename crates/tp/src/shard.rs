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

/// `[n, a, b]` → `[a, n, b]` (row-major, host).
fn interleave(g: &[f32], n: usize, a: usize, b: usize) -> Vec<f32> {
    let mut out = vec![0.0; g.len()];
    for r in 0..n {
        for i in 0..a {
            let src = (r * a + i) * b;
            let dst = (i * n + r) * b;
            out[dst..dst + b].copy_from_slice(&g[src..src + b]);
        }
    }
    out
}

/// The shape of rank `r`'s shard of the single-device parameter `name` of shape `full`
/// over `n` ranks, as [`shard_by_name`] cuts it (the same for every rank): the first
/// dimension of `wte`, `c_attn` and `mlp.c_fc` divided, the second of a `c_proj`
/// weight, everything else whole.
pub fn shard_dims_by_name(name: &str, full: &[usize], n: usize) -> Vec<usize> {
    let mut dims = full.to_vec();
    let n = n.max(1);
    if name == "wte.weight" || name.contains(".mlp.c_fc.") || name.contains(".attn.c_attn.") {
        if let Some(d) = dims.first_mut() {
            *d /= n;
        }
    } else if name.ends_with(".c_proj.weight") && dims.len() == 2 {
        dims[1] /= n;
    }
    dims
}

/// The inverse of [`shard_by_name`] on the host: `gathered` is the `n` ranks' shards of
/// `name` (each `shard_dims`) concatenated in rank order, as an all-gather returns them;
/// the result is the whole parameter and its shape. A replicated parameter is rank 0's
/// copy.
pub fn unshard_by_name(
    name: &str,
    gathered: &[f32],
    shard_dims: &[usize],
    n: usize,
) -> Result<(Vec<f32>, Vec<usize>)> {
    let len: usize = shard_dims.iter().product();
    if n == 0 || gathered.len() != len * n || shard_dims.is_empty() {
        return Err(Error::shape(
            "unshard_by_name",
            format!(
                "{name}: {} gathered values for {n} shards of {shard_dims:?}",
                gathered.len()
            ),
        ));
    }
    let mut dims = shard_dims.to_vec();
    if name == "wte.weight" || name.contains(".mlp.c_fc.") {
        dims[0] *= n;
        Ok((gathered.to_vec(), dims))
    } else if name.contains(".attn.c_attn.") {
        dims[0] *= n;
        Ok((interleave(gathered, n, 3, len / 3), dims))
    } else if name.ends_with(".c_proj.weight") && dims.len() == 2 {
        dims[1] *= n;
        Ok((interleave(gathered, n, shard_dims[0], shard_dims[1]), dims))
    } else {
        Ok((gathered[..len].to_vec(), dims))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brrr_backend::DType;
    use brrr_cpu::CpuBackend;

    /// Every kind of parameter: sharded by [`shard_by_name`], gathered, and put back
    /// together by [`unshard_by_name`], is the original.
    #[test]
    fn unshard_inverts_shard() {
        let be = CpuBackend::new();
        let n = 2;
        for (name, dims) in [
            ("wte.weight", vec![8, 4]),
            ("h.0.attn.c_attn.weight", vec![12, 4]),
            ("h.0.attn.c_attn.bias", vec![12]),
            ("h.0.attn.c_proj.weight", vec![4, 4]),
            ("h.0.mlp.c_fc.bias", vec![16]),
            ("h.0.mlp.c_proj.weight", vec![4, 16]),
            ("h.0.ln_1.weight", vec![4]),
        ] {
            let len: usize = dims.iter().product();
            let full: Vec<f32> = (0..len).map(|i| i as f32).collect();
            let t = Tensor::from_f32(&be, &full, dims.clone(), DType::F32).unwrap();
            let mut gathered = Vec::new();
            let mut shard_dims = Vec::new();
            for r in 0..n {
                let s = shard_by_name(name, &t, 4, r, n).unwrap();
                shard_dims = s.dims().to_vec();
                gathered.extend(s.to_vec_f32().unwrap());
            }
            let gathered = if shard_dims == dims {
                gathered[..len].repeat(n)
            } else {
                gathered
            };
            let (back, back_dims) = unshard_by_name(name, &gathered, &shard_dims, n).unwrap();
            assert_eq!(back_dims, dims, "{name}");
            assert_eq!(back, full, "{name}");
        }
    }
}
