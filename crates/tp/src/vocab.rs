//! The vocabulary split over the tensor-parallel ranks (Megatron-LM, Shoeybi et al.
//! 2019, §3): rank `r` holds rows `r·V/n .. (r+1)·V/n` of the token embedding, which is
//! also the tied output head, so each rank computes only its `V/n` columns of the
//! logits. The cross-entropy then needs three numbers per position from the other
//! ranks (the maximum logit, the sum of exponentials, and the target's logit), never
//! the `[N, V]` logits themselves.

use crate::comm::{all_reduce_max, all_reduce_sum};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_collectives::Communicator;
use brrr_nn::{MicroBatch, Module, Param, Stash};
use brrr_tensor::Tensor;

/// Rank `rank`'s slice of `ids`: local row indices (0 where the id lies elsewhere) and a
/// mask that is 1 where it lies here.
fn localise(ids: &[u32], start: usize, rows: usize) -> (Vec<u32>, Vec<f32>) {
    ids.iter()
        .map(|&id| {
            let id = id as usize;
            if (start..start + rows).contains(&id) {
                ((id - start) as u32, 1.0)
            } else {
                (0, 0.0)
            }
        })
        .unzip()
}

/// Rank `r`'s rows of the token embedding. The forward looks up the ids that fall in
/// its rows and writes zeros for the others: summed over the ranks (the region's exit)
/// this is the full lookup.
pub struct VocabParallelEmbedding<B: Backend> {
    /// `[V/n, C]`.
    pub weight: Param<B>,
    /// The first vocabulary row this rank holds.
    pub start: usize,
    /// Local ids and the in-range mask `[.., 1]` of each micro-batch in flight.
    pub saved: Stash<(Tensor<B>, Tensor<B>)>,
}

impl<B: Backend> VocabParallelEmbedding<B> {
    /// A shard from its rows `[V/n, C]`, the first being vocabulary row `start`.
    pub fn new(name: &str, weight: Tensor<B>, start: usize) -> Result<Self> {
        Ok(VocabParallelEmbedding {
            weight: Param::new(format!("{name}.weight"), weight)?,
            start,
            saved: Stash::new(),
        })
    }

    /// Rows this rank holds.
    pub fn rows(&self) -> usize {
        self.weight.value.dims()[0]
    }

    /// Token ids (host, `dims` = `[B, T]`) → this rank's partial embedding `[B, T, C]`.
    pub fn forward(&mut self, mb: MicroBatch, ids: &[u32], dims: [usize; 2]) -> Result<Tensor<B>> {
        let be = self.weight.value.backend().clone();
        let (local, mask) = localise(ids, self.start, self.rows());
        let local = Tensor::from_u32(&be, &local, dims)?;
        let mask = Tensor::from_f32(&be, &mask, [dims[0], dims[1], 1], self.weight.value.dtype())?;
        let out = local.embedding(&self.weight.value)?.mul(&mask)?;
        self.saved.put(mb, (local, mask));
        Ok(out)
    }

    /// Scatter-adds the rows of `dout` (`[B, T, C]`, full) whose ids this rank holds.
    pub fn backward(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<()> {
        let (local, mask) = self.saved.take(mb, "VocabParallelEmbedding")?;
        let dout = dout.mul(&mask)?;
        // A 16-bit gradient into an f32 gradient beside an f32 master (`--amp`): widened
        // first, so that repeated ids add up in f32, as brrr-nn's `Embedding` does.
        let dout = match dout.dtype() == self.weight.grad.dtype() {
            true => dout,
            false => dout.to_dtype(self.weight.grad.dtype())?,
        };
        local.embedding_backward(&dout, &mut self.weight.grad)
    }
}

impl<B: Backend> Module<B> for VocabParallelEmbedding<B> {
    fn clear_saved(&mut self) {
        self.saved.clear();
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.saved.discard(mb);
        Ok(())
    }
    fn params(&self) -> Vec<&Param<B>> {
        vec![&self.weight]
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        vec![&mut self.weight]
    }
}

/// What the vocabulary-parallel cross-entropy keeps for its backward.
pub struct VocabParallelLoss<B: Backend> {
    /// Per-position losses `[N]`, the same on every rank.
    pub losses: Tensor<B>,
    /// `exp(logit − max)` of the local columns, `[N, V/n]`.
    exp: Tensor<B>,
    /// `Σ_v exp(logit_v − max)` over the whole vocabulary, `[N, 1]`.
    sum_exp: Tensor<B>,
    /// 1 at the target's local column where this rank holds the target, `[N, V/n]`.
    one_hot: Tensor<B>,
    /// The logits' dtype: the gradient goes back in it.
    dtype: DType,
}

/// Cross-entropy of logits split by vocabulary: `logits` `[N, V/n]` are this rank's
/// columns `start .. start + V/n`, `targets` (host, `N`) the full-vocabulary targets.
/// Two all-reduces of `N` and `2N` elements: the maximum (for a stable `exp`), then the
/// sum of exponentials and the target's shifted logit together;
/// `loss = log Σ exp(l − m) − (l_target − m)`.
pub fn vocab_parallel_cross_entropy<B: Backend>(
    comm: &Communicator,
    logits: &Tensor<B>,
    targets: &[u32],
    start: usize,
) -> Result<VocabParallelLoss<B>> {
    let (n, vl) = match logits.dims() {
        &[n, vl] if n == targets.len() => (n, vl),
        _ => {
            return Err(Error::shape(
                "vocab_parallel_cross_entropy",
                format!("logits {} for {} targets", logits.shape(), targets.len()),
            ));
        }
    };
    let be = logits.backend().clone();
    let dtype = logits.dtype();
    // The loss and the softmax statistics stay f32 whatever the logits' dtype
    // (brrr-amp's policy: `OpClass::Loss`, `OpClass::SoftmaxStatistics`), as the
    // one-device cross-entropy kernel computes internally.
    let logits = &match dtype {
        DType::F32 => logits.clone(),
        _ => logits.to_dtype(DType::F32)?,
    };
    let max = all_reduce_max(comm, &logits.max_dim(1, true)?)?; // [N, 1]
    let shifted = logits.sub(&max)?;
    let exp = shifted.exp()?;
    let (local, mask) = localise(targets, start, vl);
    let mut one_hot = vec![0.0f32; n * vl];
    for (i, (&t, &m)) in local.iter().zip(&mask).enumerate() {
        one_hot[i * vl + t as usize] = m;
    }
    let one_hot = Tensor::from_f32(&be, &one_hot, [n, vl], DType::F32)?;
    let parts = Tensor::cat(
        &[
            &exp.sum_dim(1, true)?,
            &shifted.mul(&one_hot)?.sum_dim(1, true)?,
        ],
        1,
    )?;
    let sums = all_reduce_sum(comm, &parts)?; // [N, 2]
    let sum_exp = sums.narrow(1, 0, 1)?.contiguous()?;
    let target = sums.narrow(1, 1, 1)?.contiguous()?;
    let losses = sum_exp.log()?.sub(&target)?.reshape([n])?;
    Ok(VocabParallelLoss {
        losses,
        exp,
        sum_exp,
        one_hot,
        dtype,
    })
}

impl<B: Backend> VocabParallelLoss<B> {
    /// `d loss_i / d logits = (softmax − one_hot)·dloss` on the local columns, for the
    /// loss `Σ_i loss_i · dloss`: no communication, the softmax denominator is known.
    pub fn backward(&self, dloss: f32) -> Result<Tensor<B>> {
        let softmax = self.exp.div(&self.sum_exp)?;
        let d = softmax.sub(&self.one_hot)?.scale(dloss)?;
        match self.dtype {
            DType::F32 => Ok(d),
            dtype => d.to_dtype(dtype),
        }
    }
}
