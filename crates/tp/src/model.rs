//! A tensor-parallel GPT: each rank's shard sliced from a single-device [`Gpt`] with the
//! same weights, so that the same seed gives the same model at any degree.

use crate::comm::{RegionEntry, RegionExit};
use crate::ends::{self, HeadSaved, Region};
use crate::layers::{ColumnParallelLinear, RowParallelLinear};
use crate::shard::{column_shard, qkv_shard, row_shard, split_dim};
use crate::vocab::VocabParallelEmbedding;
use brrr_backend::{Backend, Error, Result};
use brrr_collectives::Communicator;
use brrr_nn::{
    Block, BlockPart, CausalSelfAttention, Embedding, Gpt, GptConfig, LayerNorm, MicroBatch, Mlp,
    Module, Param, Segments, Stash, backward_blocks, forward_blocks, forward_selective,
};
use brrr_tensor::Tensor;
use std::collections::BTreeSet;
use std::sync::Arc;

/// A private copy of a parameter under the same name.
pub(crate) fn copy_param<B: Backend>(p: &Param<B>) -> Result<Param<B>> {
    Param::new(p.name.clone(), p.value.deep_clone()?)
}

pub(crate) fn copy_layer_norm<B: Backend>(ln: &LayerNorm<B>) -> Result<LayerNorm<B>> {
    Ok(LayerNorm {
        gamma: copy_param(&ln.gamma)?,
        beta: copy_param(&ln.beta)?,
        eps: ln.eps,
        saved: Stash::new(),
    })
}

/// `(weight, bias)` of a single-device projection.
fn weight_bias<B: Backend>(layer: &dyn Module<B>) -> Result<(&Param<B>, &Param<B>)> {
    match layer.params()[..] {
        [w, b] => Ok((w, b)),
        _ => Err(Error::invalid(
            "TpGpt::from_gpt",
            "expected a projection with a weight and a bias",
        )),
    }
}

/// One pre-norm block with attention heads and MLP columns split over the ranks. Without
/// sequence parallelism LayerNorms and residuals run on the full `[B, T, C]` on every
/// rank; with it on this rank's `[B, T/n, C]` sequence shard.
pub struct TpBlock<B: Backend> {
    /// The LayerNorm before attention, replicated: a full copy on every rank.
    pub ln_1: LayerNorm<B>,
    /// Begins attention's region: brrr-nn's attention reads `B` and `T` from its input,
    /// so the block gathers the sequence before it, not `c_attn`.
    pub attn_entry: RegionEntry,
    /// `c_attn` column-parallel (this rank's heads), `c_proj` row-parallel.
    pub attn: CausalSelfAttention<B>,
    /// The LayerNorm before the MLP, replicated.
    pub ln_2: LayerNorm<B>,
    /// `c_fc` column-parallel (with the region's entry), `c_proj` row-parallel.
    pub mlp: Mlp<B>,
    comm: Arc<Communicator>,
}

impl<B: Backend> TpBlock<B> {
    /// Rank `comm.rank()`'s shard of `block`.
    pub fn from_block(block: &Block<B>, comm: Arc<Communicator>, sp: bool) -> Result<Self> {
        let (r, n) = (comm.rank(), comm.world_size());
        let (entry, exit) = (
            RegionEntry::for_sequence_parallel(sp),
            RegionExit::for_sequence_parallel(sp),
        );
        let head_dim = block.attn.head_dim;
        let n_head = block.attn.n_head();
        let (w, b) = weight_bias(block.attn.c_attn.as_ref())?;
        let mut c_attn = ColumnParallelLinear::new(
            w.name.trim_end_matches(".weight"),
            qkv_shard(&w.value, n_head, r, n)?,
            Some(qkv_shard(&b.value, n_head, r, n)?),
            None,
            comm.clone(),
        )?;
        let (w, b) = weight_bias(block.attn.c_proj.as_ref())?;
        let a_proj = RowParallelLinear::new(
            w.name.trim_end_matches(".weight"),
            row_shard(&w.value, r, n)?,
            Some(b.value.deep_clone()?),
            exit,
            comm.clone(),
        )?;
        let (w, b) = weight_bias(block.mlp.c_fc.as_ref())?;
        let mut c_fc = ColumnParallelLinear::new(
            w.name.trim_end_matches(".weight"),
            column_shard(&w.value, r, n)?,
            Some(column_shard(&b.value, r, n)?),
            Some(entry),
            comm.clone(),
        )?;
        // Sequence parallelism keeps the GEMM inputs as sequence shards.
        c_attn.save_sequence_shard = sp;
        c_fc.save_sequence_shard = sp;
        let (w, b) = weight_bias(block.mlp.c_proj.as_ref())?;
        let m_proj = RowParallelLinear::new(
            w.name.trim_end_matches(".weight"),
            row_shard(&w.value, r, n)?,
            Some(b.value.deep_clone()?),
            exit,
            comm.clone(),
        )?;
        let mut attn =
            CausalSelfAttention::from_parts(Box::new(c_attn), Box::new(a_proj), head_dim)?;
        // This rank's heads are whole heads (`qkv_shard`), so `c_attn`'s local output is
        // `[B, T, 3, H/n, D]`, the layout the fused kernel reads: the switch carries over.
        attn.fused = block.attn.fused;
        Ok(TpBlock {
            ln_1: copy_layer_norm(&block.ln_1)?,
            attn_entry: entry,
            attn,
            ln_2: copy_layer_norm(&block.ln_2)?,
            mlp: Mlp::from_parts(Box::new(c_fc), Box::new(m_proj))?,
            comm,
        })
    }

    /// `x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))` on this rank's part of `x`.
    pub fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        let h = self
            .attn_entry
            .forward(&self.comm, &self.ln_1.forward(mb, x)?)?;
        let x1 = x.add(&self.attn.forward(mb, &h)?)?;
        let m = self.mlp.forward(mb, &self.ln_2.forward(mb, &x1)?)?;
        x1.add(&m)
    }

    /// The gradient of the block's input from that of its output.
    pub fn backward(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        let mut dx1 = self.ln_2.backward(mb, &self.mlp.backward(mb, dout)?)?;
        dx1.add_(dout)?;
        let dh = self
            .attn_entry
            .backward(&self.comm, &self.attn.backward(mb, &dx1)?)?;
        let mut dx = self.ln_1.backward(mb, &dh)?;
        dx.add_(&dx1)?;
        Ok(dx)
    }

    /// [`TpBlock::backward`] with the four projections' weight gradients deferred to
    /// [`TpBlock::backward_weight`] (the zero-bubble "B", as brrr-nn's
    /// `Block::backward_input`). Every collective of the block's backward happens here
    /// (the regions' entries and, under sequence parallelism, the exits' all-gathers),
    /// so W needs no communication. Bitwise the `dx` of [`TpBlock::backward`].
    pub fn backward_input(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        let mut dx1 = self
            .ln_2
            .backward(mb, &self.mlp.backward_input(mb, dout)?)?;
        dx1.add_(dout)?;
        let dh = self
            .attn_entry
            .backward(&self.comm, &self.attn.backward_input(mb, &dx1)?)?;
        let mut dx = self.ln_1.backward(mb, &dh)?;
        dx.add_(&dx1)?;
        Ok(dx)
    }

    /// The projections' local weight gradients of micro-batch `mb` (the zero-bubble "W").
    pub fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        self.mlp.backward_weight(mb)?;
        self.attn.backward_weight(mb)
    }
}

impl<B: Backend> BlockPart<B> for TpBlock<B> {
    fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        TpBlock::forward(self, mb, x)
    }
    fn backward(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        TpBlock::backward(self, mb, dout)
    }
    fn backward_input(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        TpBlock::backward_input(self, mb, dout)
    }
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        TpBlock::backward_weight(self, mb)
    }
    fn attn_mut(&mut self) -> &mut CausalSelfAttention<B> {
        &mut self.attn
    }
}

impl<B: Backend> Module<B> for TpBlock<B> {
    fn clear_saved(&mut self) {
        self.ln_1.clear_saved();
        self.attn.clear_saved();
        self.ln_2.clear_saved();
        self.mlp.clear_saved();
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.ln_1.discard_saved(mb)?;
        self.attn.discard_saved(mb)?;
        self.ln_2.discard_saved(mb)?;
        self.mlp.discard_saved(mb)
    }
    fn params(&self) -> Vec<&Param<B>> {
        let mut v = self.ln_1.params();
        v.extend(self.attn.params());
        v.extend(self.ln_2.params());
        v.extend(self.mlp.params());
        v
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = self.ln_1.params_mut();
        v.extend(self.attn.params_mut());
        v.extend(self.ln_2.params_mut());
        v.extend(self.mlp.params_mut());
        v
    }
}

/// Rank `r`'s shard of a GPT over a tensor-parallel group of `n` ranks (Megatron-LM):
/// the vocabulary-parallel token embedding (also the tied head), the positional
/// embedding and LayerNorms replicated, each block's heads and MLP columns split.
/// With sequence parallelism (Korthikanti et al. 2022) the residual stream between the
/// tensor-parallel regions is a `[B, T/n, C]` sequence shard.
///
/// Parameters keep the single-device names (`h.0.attn.c_attn.weight`): a shard of
/// a sharded parameter, a full copy of a replicated one ([`TpGpt::is_replicated`]).
pub struct TpGpt<B: Backend> {
    /// The whole (unsharded) model's shape.
    pub config: GptConfig,
    /// Sequence parallelism on.
    pub sp: bool,
    /// This rank's rows `[V/n, C]` of the token embedding, also the tied head.
    pub wte: VocabParallelEmbedding<B>,
    /// The positional embedding `[block_size, C]`, replicated.
    pub wpe: Embedding<B>,
    /// This rank's shard of every block, input first.
    pub h: Vec<TpBlock<B>>,
    /// The final LayerNorm, replicated.
    pub ln_f: LayerNorm<B>,
    replicated: BTreeSet<String>,
    comm: Arc<Communicator>,
    saved: Stash<HeadSaved<B>>,
}

impl<B: Backend> TpGpt<B> {
    /// Rank `comm.rank()`'s shard of `gpt` over the tensor-parallel group `comm`.
    /// Errors when heads or vocabulary do not divide by the group's size.
    pub fn from_gpt(gpt: &Gpt<B>, comm: Arc<Communicator>, sp: bool) -> Result<Self> {
        let (r, n) = (comm.rank(), comm.world_size());
        crate::config::check_model(&gpt.config, n)?;
        let wte_rows = split_dim(&gpt.wte.weight.value, 0, r, n)?;
        let wte = VocabParallelEmbedding::new("wte", wte_rows, r * gpt.config.vocab_size / n)?;
        let wpe = Embedding {
            weight: copy_param(&gpt.wpe.weight)?,
            saved_ids: Stash::new(),
        };
        let h = gpt
            .h
            .iter()
            .map(|b| TpBlock::from_block(b, comm.clone(), sp))
            .collect::<Result<Vec<_>>>()?;
        let mut model = TpGpt {
            config: gpt.config.clone(),
            sp,
            wte,
            wpe,
            h,
            ln_f: copy_layer_norm(&gpt.ln_f)?,
            replicated: BTreeSet::new(),
            comm,
            saved: Stash::new(),
        };
        // Whatever kept the single-device shape is a full copy on every rank.
        let full: std::collections::BTreeMap<&str, &[usize]> = gpt
            .params()
            .into_iter()
            .map(|p| (p.name.as_str(), p.value.dims()))
            .collect();
        model.replicated = model
            .params()
            .iter()
            .filter(|p| n == 1 || full.get(p.name.as_str()) == Some(&p.value.dims()))
            .map(|p| p.name.clone())
            .collect();
        Ok(model)
    }

    /// Mixed precision (`--amp`) on the shard, as `brrr_amp::apply_policy` on one
    /// device: each parameter (sliced from the f32 model) becomes its f32 master with a
    /// 16-bit compute copy, and attention's core takes the policy's dtype.
    pub fn apply_policy(&mut self, policy: &brrr_amp::Policy) -> Result<()> {
        brrr_amp::apply_policy_to_params(policy, self.params_mut())?;
        let core = brrr_amp::attention_core_dtype(policy);
        for block in &mut self.h {
            block.attn.core_dtype = core;
        }
        Ok(())
    }

    /// Packed documents: every block's attention stays inside the segments (u32
    /// `[B, T]`, the whole sequence) until called again with `None`.
    pub fn set_segments(&mut self, segments: Option<&Tensor<B>>) {
        for block in &mut self.h {
            block.attn.segments = segments.cloned();
        }
    }

    /// The tensor-parallel group.
    pub fn comm(&self) -> &Arc<Communicator> {
        &self.comm
    }

    /// Whether the parameter `name` is a full copy on every rank (LayerNorms, the
    /// positional table, the row-parallel biases) rather than a shard.
    pub fn is_replicated(&self, name: &str) -> bool {
        self.replicated.contains(name)
    }

    /// Per-position losses `[B, T]` (the same on every rank) of token ids and targets
    /// (host, row-major `[B, T]`), saving under `mb`.
    pub fn forward_loss_mb(
        &mut self,
        mb: MicroBatch,
        ids: &[u32],
        targets: &[u32],
        bt: (usize, usize),
    ) -> Result<Tensor<B>> {
        self.forward_loss_packed_mb(mb, ids, targets, bt, None)
    }

    /// [`TpGpt::forward_loss_mb`] on packed rows, as brrr-nn's
    /// `Gpt::forward_loss_packed_mb`: `packed` gives each token's position inside its
    /// document (host, `[B, T]`) and the documents' segment ids (u32 `[B, T]`, on the
    /// device), so attention never crosses a document. `None`: plain rows.
    pub fn forward_loss_packed_mb(
        &mut self,
        mb: MicroBatch,
        ids: &[u32],
        targets: &[u32],
        bt: (usize, usize),
        packed: Option<(&[u32], &Tensor<B>)>,
    ) -> Result<Tensor<B>> {
        let (b, t) = bt;
        if ids.len() != b * t || targets.len() != b * t {
            return Err(Error::shape(
                "TpGpt::forward_loss_mb",
                format!(
                    "{} ids and {} targets for [{b}, {t}]",
                    ids.len(),
                    targets.len()
                ),
            ));
        }
        if t > self.config.block_size {
            return Err(Error::shape(
                "TpGpt::forward_loss_mb",
                format!(
                    "sequence length {t} exceeds block_size {}",
                    self.config.block_size
                ),
            ));
        }
        let positions = packed.map(|(p, _)| p);
        let x0 = self.embed_mb(mb, ids, (b, t), positions)?;
        let segments = packed.map(|(_, s)| s);
        let x = forward_blocks(&mut self.h, mb, x0, segments)?;
        self.head_loss_mb(mb, &x, targets)
    }

    /// The head on the last block's output `x` (this rank's sequence shard under
    /// sequence parallelism): final LayerNorm, the tied vocabulary-parallel projection
    /// and loss of `targets` (host, `[B, T]` row-major). Per-position losses `[B, T]`,
    /// the same on every rank; saves under `mb`.
    pub fn head_loss_mb(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &[u32],
    ) -> Result<Tensor<B>> {
        let region = Region {
            comm: &self.comm,
            sp: self.sp,
        };
        let tied = (&self.wte.weight.value, self.wte.start);
        let (losses, saved) = ends::head_forward(&mut self.ln_f, tied, region, mb, x, targets)?;
        self.saved.put(mb, saved);
        Ok(losses)
    }

    /// Drops what [`TpGpt::head_loss_mb`] saved for `mb`.
    pub fn discard_head(&mut self, mb: MicroBatch) -> Result<()> {
        self.saved.discard(mb);
        self.ln_f.discard_saved(mb)
    }

    /// Token embeddings (partial per rank, reduced by the region's exit) plus positions
    /// (`0..T` of each row, or packed documents' own): the first block's input, this
    /// rank's sequence shard of it under sequence parallelism.
    pub fn embed_mb(
        &mut self,
        mb: MicroBatch,
        ids: &[u32],
        (b, t): (usize, usize),
        positions: Option<&[u32]>,
    ) -> Result<Tensor<B>> {
        let region = Region {
            comm: &self.comm,
            sp: self.sp,
        };
        let tables = (&mut self.wte, &mut self.wpe);
        ends::embed(tables, region, mb, ids, (b, t), positions)
    }

    /// Backward of micro-batch `mb` from `Σ losses · dloss`, accumulating every local
    /// gradient. Under sequence parallelism the replicated parameters then hold partial
    /// sums: call [`TpGpt::reduce_replicated_grads`] once per step.
    pub fn backward_mb(&mut self, mb: MicroBatch, dloss: f32) -> Result<()> {
        let dx = self.head_backward_mb(mb, dloss)?;
        let dx = backward_blocks(&mut self.h, mb, dx, false)?;
        self.embed_backward_mb(mb, &dx)
    }

    /// The head's backward from `Σ losses · dloss`: the gradient of the last block's
    /// output (this rank's part of it).
    pub fn head_backward_mb(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        let saved = self.saved.take(mb, "TpGpt")?;
        let (dx, tied) = ends::head_backward(saved, &self.wte.weight.value, dloss)?;
        ends::add_tied_grad(&mut self.wte.weight.grad, tied)?;
        let region = Region {
            comm: &self.comm,
            sp: self.sp,
        };
        ends::head_backward_input(&mut self.ln_f, region, mb, &dx)
    }

    /// The embeddings' backward from the gradient of the first block's input.
    pub fn embed_backward_mb(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()> {
        let region = Region {
            comm: &self.comm,
            sp: self.sp,
        };
        ends::embed_backward((&mut self.wte, &mut self.wpe), region, mb, dx)
    }

    /// Under sequence parallelism each rank's gradient of a replicated parameter covers
    /// its sequence shard only: sums them over the group (one all-reduce of all of them
    /// packed together). Without it they are already complete: nothing to do.
    pub fn reduce_replicated_grads(&mut self) -> Result<()> {
        if !self.sp || self.comm.world_size() == 1 {
            return Ok(());
        }
        let comm = self.comm.clone();
        let replicated = self.replicated.clone();
        let mut params: Vec<&mut Param<B>> = self
            .params_mut()
            .into_iter()
            .filter(|p| replicated.contains(&p.name))
            .collect();
        all_reduce_grads(&comm, &mut params)
    }

    /// Sum of squared gradients of the whole (unsharded) model, the same on every rank:
    /// shards counted on their own rank, replicated parameters once.
    pub fn grad_sq_sum(&self) -> Result<f64> {
        let first = self.comm.rank() == 0;
        let mut local = 0.0f64;
        for p in self.params() {
            if first || !self.is_replicated(&p.name) {
                local += p
                    .grad
                    .to_vec_f32()?
                    .iter()
                    .map(|&g| f64::from(g) * f64::from(g))
                    .sum::<f64>();
            }
        }
        let mut buf = [local as f32];
        self.comm
            .all_reduce(&mut buf, brrr_collectives::ReduceOp::Sum)?;
        Ok(f64::from(buf[0]))
    }
}

/// Sums the gradients of `params` over `comm` in one packed all-reduce, and with
/// `average` divides by the group's size.
pub(crate) fn all_reduce_grads_scaled<B: Backend>(
    comm: &Communicator,
    params: &mut [&mut Param<B>],
    average: bool,
) -> Result<()> {
    let mut flat = Vec::new();
    for p in params.iter() {
        flat.extend(p.grad.to_vec_f32()?);
    }
    let op = if average {
        brrr_collectives::ReduceOp::Avg
    } else {
        brrr_collectives::ReduceOp::Sum
    };
    comm.all_reduce(&mut flat, op)?;
    let mut at = 0;
    for p in params.iter_mut() {
        let len = p.grad.elem_count();
        let g = &flat[at..at + len];
        p.grad = Tensor::from_f32(p.grad.backend(), g, p.grad.shape().clone(), p.grad.dtype())?;
        at += len;
    }
    Ok(())
}

fn all_reduce_grads<B: Backend>(comm: &Communicator, params: &mut [&mut Param<B>]) -> Result<()> {
    all_reduce_grads_scaled(comm, params, false)
}

/// The shard as activation recomputation's chain (`--tp` with `--checkpoint`): its
/// blocks, then the vocabulary-parallel head, whose targets are host token ids.
impl<B: Backend> Segments<B> for TpGpt<B> {
    type Targets = Arc<[u32]>;

    fn n_blocks(&self) -> usize {
        self.h.len()
    }

    fn block_forward(
        &mut self,
        mb: MicroBatch,
        l: usize,
        x: &Tensor<B>,
        selective: bool,
    ) -> Result<Tensor<B>> {
        forward_selective(
            &mut self.h[l],
            |b| &mut b.attn,
            selective,
            |b| b.forward(mb, x),
        )
    }

    fn block_backward(&mut self, mb: MicroBatch, l: usize, dy: &Tensor<B>) -> Result<Tensor<B>> {
        self.h[l].backward(mb, dy)
    }

    fn block_discard(&mut self, mb: MicroBatch, l: usize) -> Result<()> {
        self.h[l].discard_saved(mb)
    }

    fn head_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Arc<[u32]>,
    ) -> Result<Tensor<B>> {
        self.head_loss_mb(mb, x, targets)
    }

    fn head_backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        self.head_backward_mb(mb, dloss)
    }

    fn head_discard(&mut self, mb: MicroBatch) -> Result<()> {
        self.discard_head(mb)
    }
}

impl<B: Backend> Module<B> for TpGpt<B> {
    fn clear_saved(&mut self) {
        self.saved.clear();
        self.wte.clear_saved();
        self.wpe.clear_saved();
        for b in &mut self.h {
            b.clear_saved();
        }
        self.ln_f.clear_saved();
    }
    fn params(&self) -> Vec<&Param<B>> {
        let mut v = self.wte.params();
        v.extend(self.wpe.params());
        for b in &self.h {
            v.extend(b.params());
        }
        v.extend(self.ln_f.params());
        v
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = self.wte.params_mut();
        v.extend(self.wpe.params_mut());
        for b in &mut self.h {
            v.extend(b.params_mut());
        }
        v.extend(self.ln_f.params_mut());
        v
    }
}

/// This rank's positions of a `[B, T]` batch, row-major: every position (`0..T`, or
/// the packed documents' own `positions`), or only this rank's sequence shard of each
/// row with sequence parallelism (`sp`), whose residual stream is `[B, T/n, C]`.
pub(crate) fn rank_positions(
    comm: &Communicator,
    sp: bool,
    (b, t): (usize, usize),
    positions: Option<&[u32]>,
) -> Result<Vec<u32>> {
    if let Some(p) = positions
        && p.len() != b * t
    {
        return Err(Error::shape(
            "TpGpt::embed",
            format!("{} positions for a [{b}, {t}] batch", p.len()),
        ));
    }
    let (r, n) = (comm.rank(), comm.world_size());
    let cols = if sp { r * t / n..(r + 1) * t / n } else { 0..t };
    Ok((0..b)
        .flat_map(|row| {
            cols.clone().map(move |c| match positions {
                Some(p) => p[row * t + c],
                None => c as u32,
            })
        })
        .collect())
}
