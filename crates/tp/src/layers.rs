//! Megatron's two linear shards (Shoeybi et al. 2019, §3): a column-parallel linear
//! holds `1/n` of the output features, a row-parallel linear `1/n` of the input
//! features. Column then row needs no communication in between: the column shard's
//! output is exactly the row shard's input. Both implement brrr-nn's [`LinearLayer`], so
//! brrr-nn's attention and MLP are built from them unchanged.

use crate::comm::{RegionEntry, RegionExit, all_gather_sequence};
use brrr_backend::{Backend, Error, Result};
use brrr_collectives::Communicator;
use brrr_nn::{Linear, LinearLayer, MicroBatch, Module, Param, Stash};
use brrr_tensor::Tensor;
use std::sync::Arc;

/// `y_r = x W_rᵀ + b_r`: rank `r`'s output features `W_r` (rows of `W: [out, in]`).
///
/// With an `entry` it begins a tensor-parallel region itself (Megatron's `f`, or the
/// all-gather of sequence parallelism) on its input; without one the caller has done
/// that (attention reads `B` and `T` from its input, so a block gathers a sequence
/// shard before attention rather than inside `c_attn`).
pub struct ColumnParallelLinear<B: Backend> {
    /// The local shard: `[out/n, in]` and `[out/n]`.
    pub linear: Linear<B>,
    /// The region's entry operator, if this layer applies it.
    pub entry: Option<RegionEntry>,
    /// Sequence parallelism's memory saving (Korthikanti et al. 2022, §4.2.2): keep only
    /// this rank's sequence shard `[B, T/n, in]` of the (gathered) input for the weight
    /// gradient, and all-gather it again in the backward, instead of keeping all `T`.
    pub save_sequence_shard: bool,
    /// The kept shards, per micro-batch in flight (with `save_sequence_shard`).
    pub saved_shard: Stash<Tensor<B>>,
    comm: Arc<Communicator>,
}

impl<B: Backend> ColumnParallelLinear<B> {
    /// A shard from its local weight `[out/n, in]` and bias `[out/n]`.
    pub fn new(
        name: &str,
        weight: Tensor<B>,
        bias: Option<Tensor<B>>,
        entry: Option<RegionEntry>,
        comm: Arc<Communicator>,
    ) -> Result<Self> {
        Ok(ColumnParallelLinear {
            linear: Linear::from_weights(name, weight, bias)?,
            entry,
            save_sequence_shard: false,
            saved_shard: Stash::new(),
            comm,
        })
    }

    /// With [`ColumnParallelLinear::save_sequence_shard`] on: the input's sequence shard
    /// of this rank, taken from `x` (the shard itself when this layer gathers, else the
    /// gathered `[B, T, in]`).
    fn shard_of(&self, x: &Tensor<B>, gathered: &Tensor<B>) -> Result<Tensor<B>> {
        if self.entry == Some(RegionEntry::GatherSequence) {
            return Ok(x.clone());
        }
        let (r, n) = (self.comm.rank(), self.comm.world_size());
        crate::shard::split_dim(gathered, 1, r, n)
    }
}

impl<B: Backend> LinearLayer<B> for ColumnParallelLinear<B> {
    fn in_features(&self) -> usize {
        self.linear.in_features()
    }
    fn out_features(&self) -> usize {
        self.linear.out_features()
    }
    fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        let full = match &self.entry {
            Some(e) => e.forward(&self.comm, x)?,
            None => x.clone(),
        };
        let y = self.linear.forward(mb, &full)?;
        if self.save_sequence_shard {
            self.linear.saved_input.discard(mb);
            let shard = self.shard_of(x, &full)?;
            self.saved_shard.put(mb, shard);
        }
        Ok(y)
    }
    fn backward(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        if self.save_sequence_shard {
            let shard = self.saved_shard.take(mb, "ColumnParallelLinear")?;
            let full = all_gather_sequence(&self.comm, &shard)?;
            let rows = full.elem_count() / self.in_features().max(1);
            let full = full.reshape([rows, self.in_features()])?;
            self.linear.saved_input.put(mb, full);
        }
        // dx = dy_r W_r covers this rank's columns only: a partial sum of the full dx.
        let dx = self.linear.backward(mb, dy)?;
        match &self.entry {
            Some(e) => e.backward(&self.comm, &dx),
            None => Ok(dx),
        }
    }
    /// The zero-bubble "B": the input gradient only (with the region's collective, if
    /// this layer begins it); the local weight and bias gradients wait in the shard's
    /// [`Linear`] for [`LinearLayer::backward_weight`], which needs no communication.
    /// Under sequence parallelism the gathered input is rebuilt here, as in the fused
    /// backward, and kept until W.
    fn backward_input(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        if self.save_sequence_shard {
            let shard = self.saved_shard.take(mb, "ColumnParallelLinear")?;
            let full = all_gather_sequence(&self.comm, &shard)?;
            let rows = full.elem_count() / self.in_features().max(1);
            let full = full.reshape([rows, self.in_features()])?;
            self.linear.saved_input.put(mb, full);
        }
        let dx = self.linear.backward_input(mb, dy)?;
        match &self.entry {
            Some(e) => e.backward(&self.comm, &dx),
            None => Ok(dx),
        }
    }
    /// The zero-bubble "W": this shard's `dW_r += dy_rᵀ x`, `db_r += Σ dy_r`, local.
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        self.linear.backward_weight(mb)
    }
}

impl<B: Backend> Module<B> for ColumnParallelLinear<B> {
    fn clear_saved(&mut self) {
        self.linear.clear_saved();
        self.saved_shard.clear();
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.saved_shard.discard(mb);
        self.linear.discard_saved(mb)
    }
    fn params(&self) -> Vec<&Param<B>> {
        self.linear.params()
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        self.linear.params_mut()
    }
}

/// `y = Σ_r x_r W_rᵀ + b`: rank `r` holds input features `W_r` (columns of
/// `W: [out, in]`) and reads the matching slice `x_r` of the input (what a
/// column-parallel layer wrote). The partial products are reduced by `exit` (all-reduce,
/// or reduce-scatter over the sequence), and the bias, replicated, is added once after
/// the reduction.
pub struct RowParallelLinear<B: Backend> {
    /// The local shard `[out, in/n]`, without bias.
    pub linear: Linear<B>,
    /// The full bias `[out]`, replicated on every rank.
    pub bias: Option<Param<B>>,
    /// How the partial sums are reduced.
    pub exit: RegionExit,
    comm: Arc<Communicator>,
}

impl<B: Backend> RowParallelLinear<B> {
    /// A shard from its local weight `[out, in/n]` and the full bias `[out]`.
    pub fn new(
        name: &str,
        weight: Tensor<B>,
        bias: Option<Tensor<B>>,
        exit: RegionExit,
        comm: Arc<Communicator>,
    ) -> Result<Self> {
        let linear = Linear::from_weights(name, weight, None)?;
        if let Some(b) = &bias
            && b.dims() != [linear.out_features()]
        {
            return Err(Error::shape(
                "RowParallelLinear::new",
                format!(
                    "{name}: bias {} does not match {} outputs",
                    b.shape(),
                    linear.out_features()
                ),
            ));
        }
        let bias = match bias {
            Some(b) => Some(Param::new(format!("{name}.bias"), b)?),
            None => None,
        };
        Ok(RowParallelLinear {
            linear,
            bias,
            exit,
            comm,
        })
    }
}

impl<B: Backend> LinearLayer<B> for RowParallelLinear<B> {
    fn in_features(&self) -> usize {
        self.linear.in_features()
    }
    fn out_features(&self) -> usize {
        self.linear.out_features()
    }
    fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        let partial = self.linear.forward(mb, x)?;
        let y = self.exit.forward(&self.comm, &partial)?;
        match &self.bias {
            Some(b) => y.add(&b.value),
            None => Ok(y),
        }
    }
    fn backward(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        if let Some(b) = &mut self.bias {
            // Under sequence parallelism dy is this rank's sequence shard, so this is a
            // partial sum: `TpGpt::reduce_replicated_grads` sums it over the ranks.
            let out = dy.dims().last().copied().unwrap_or(1).max(1);
            let dy2 = dy.reshape([dy.elem_count() / out, out])?;
            b.accumulate_grad(&dy2.sum_dim(0, false)?)?;
        }
        let dy_full = self.exit.backward(&self.comm, dy)?;
        self.linear.backward(mb, &dy_full)
    }
    /// The zero-bubble "B": the replicated bias gradient (a row sum, too cheap to
    /// defer) and the input gradient; the shard's weight gradient waits for
    /// [`LinearLayer::backward_weight`]. The exit's all-gather (sequence parallelism)
    /// happens here, so W is local.
    fn backward_input(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        if let Some(b) = &mut self.bias {
            let out = dy.dims().last().copied().unwrap_or(1).max(1);
            let dy2 = dy.reshape([dy.elem_count() / out, out])?;
            b.accumulate_grad(&dy2.sum_dim(0, false)?)?;
        }
        let dy_full = self.exit.backward(&self.comm, dy)?;
        self.linear.backward_input(mb, &dy_full)
    }
    /// The zero-bubble "W": this shard's `dW_r += dyᵀ x_r`, local.
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        self.linear.backward_weight(mb)
    }
}

impl<B: Backend> Module<B> for RowParallelLinear<B> {
    fn clear_saved(&mut self) {
        self.linear.clear_saved();
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.linear.discard_saved(mb)
    }
    fn params(&self) -> Vec<&Param<B>> {
        let mut v = self.linear.params();
        v.extend(self.bias.as_ref());
        v
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = self.linear.params_mut();
        v.extend(self.bias.as_mut());
        v
    }
}
