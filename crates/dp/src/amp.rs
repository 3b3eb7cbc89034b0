//! Mixed precision (`--amp bf16|fp16`) under data parallelism, with the one-device
//! trainer's pieces: `brrr_amp::apply_policy` (16-bit compute copies beside f32 masters,
//! f32 gradients) and `brrr_amp::DynamicLossScaler` (fp16's loss scale).
//!
//! - Stage 0 replicates everything, masters included, and updates with
//!   `Backend::adamw_master` as one device does.
//! - Stages 1-3 keep the f32 master of a bucket only in its owner's shard (stages 1-2 in
//!   [`crate::engine::GroupShard::master`], stage 3 in its parameter chunk); the model
//!   holds the 16-bit copies, rewritten from the all-gathered masters. Those gathers
//!   (and stage 3's gathers before each use) move f32 values, since the communicator
//!   carries f32; FSDP's `MixedPrecision(param_dtype=bf16)` gathers the 16-bit copies,
//!   half the bytes, and gets the same rounded values.
//! - Gradients are reduced in f32. They already are f32 on every rank: the backward
//!   accumulates each 16-bit partial gradient into an f32 gradient beside the master
//!   (`Param::accumulate_grad`), and a 16-bit reduction would round every rank's
//!   contribution and, in fp16, flush small ones to zero before they are averaged.
//!   PyTorch's DDP reduces in the gradient's dtype unless told otherwise (with autocast
//!   that is f32 too, its parameters staying f32); FSDP's `MixedPrecision` names it
//!   `reduce_dtype`. The price is twice the bytes of a 16-bit reduction.
//! - fp16 loss scaling: each rank unscales the gradients it holds (stage 0 the whole
//!   averaged gradient, stages 1-3 only their chunks) and raises its own overflow flag;
//!   the flags are all-reduced with MAX before anything depends on them, so every rank
//!   skips the same steps and moves its scale the same way. Without that, a rank whose
//!   chunk held the inf would skip while the others updated, and the replicas (or the
//!   shards of one model) would no longer describe the same weights.

use crate::engine::DataParallel;
use crate::model::ReplicaModel;
use brrr_backend::{Backend, DType, Error, Result};
use brrr_collectives::ReduceOp;
use brrr_nn::Param;
use brrr_tensor::Tensor;

impl<B: Backend, M: ReplicaModel<B>> DataParallel<B, M> {
    /// Turns the freshly sharded model into `--amp`'s layout (nothing without `--amp`):
    /// 16-bit compute copies, and at stages 1-3 f32 masters only in this rank's shards.
    pub(crate) fn adopt_amp(&mut self) -> Result<()> {
        let Some(policy) = self.config.amp.policy() else {
            return Ok(());
        };
        self.model.apply_policy(&policy)?;
        self.compute = policy.compute_dtype();
        if self.dp.zero == 0 {
            return Ok(());
        }
        // Stage 3's shards already hold the f32 values (taken before the policy).
        if self.dp.zero < 3 {
            for g in 0..self.groups.len() {
                let chunk = self.group_chunk(g, |p| p.master.as_ref().unwrap_or(&p.value))?;
                let t = Tensor::from_f32(&self.backend, &chunk, [chunk.len()], DType::F32)?;
                self.shards[g].master = Some(t);
            }
        }
        for p in self.model.params_mut() {
            p.master = None;
        }
        Ok(())
    }

    /// Makes this rank alone find an infinite gradient in its next step (its first
    /// gradient element, after the reduction, becomes +inf), as an fp16 overflow in the
    /// backward of the rows that only this rank holds would do at stages 1-3. Every rank
    /// must then skip that step. Without a loss scaler nothing checks for overflows and
    /// this has no effect. A testing aid.
    pub fn inject_overflow(&mut self) {
        self.inject_inf = true;
    }

    /// The loss scale the next backward uses (1 without loss scaling).
    pub fn loss_scale(&self) -> f32 {
        self.scaler.as_ref().map_or(1.0, |s| s.scale())
    }

    /// Stage 0: unscales the averaged gradients and agrees on the overflow flag.
    pub(crate) fn unscale_replicated(&mut self) -> Result<()> {
        let Some(scaler) = &mut self.scaler else {
            return Ok(());
        };
        if std::mem::take(&mut self.inject_inf)
            && let Some(p) = self.model.params_mut().into_iter().next()
        {
            poison(&mut p.grad)?;
        }
        scaler.unscale(self.model.params_mut())?;
        self.agree_on_overflow()
    }

    /// Stages 1-3: unscales this rank's averaged gradient chunks (wrapped as parameters
    /// for the scaler, which unscales parameters' gradients) and agrees on the flag.
    pub(crate) fn unscale_shards(&mut self) -> Result<()> {
        let Some(scaler) = &mut self.scaler else {
            return Ok(());
        };
        let mut chunks = Vec::with_capacity(self.shards.len());
        for s in &mut self.shards {
            let grad = s
                .grad
                .take()
                .ok_or_else(|| Error::invalid("dp", "a bucket was never reduced"))?;
            let mut p = Param::new(
                "gradient chunk",
                Tensor::zeros(&self.backend, [0], DType::F32)?,
            )?;
            p.grad = grad;
            chunks.push(p);
        }
        if std::mem::take(&mut self.inject_inf)
            && let Some(p) = chunks.first_mut()
        {
            poison(&mut p.grad)?;
        }
        scaler.unscale(chunks.iter_mut().collect())?;
        for (s, p) in self.shards.iter_mut().zip(chunks) {
            s.grad = Some(p.grad);
        }
        self.agree_on_overflow()
    }

    /// All-reduces the overflow flag with MAX (over the replicas, and a shard's group):
    /// one rank's inf skips the step everywhere.
    fn agree_on_overflow(&mut self) -> Result<()> {
        let Some(scaler) = &mut self.scaler else {
            return Ok(());
        };
        let mut flag = [scaler.found_inf().to_vec_f32()?[0]];
        self.scalars.all_reduce(&mut flag, ReduceOp::Max)?;
        // A shard's inf is the whole model's: every shard of every replica skips.
        if let Some(group) = self.model.shard_group() {
            group.all_reduce(&mut flag, ReduceOp::Max)?;
        }
        scaler.set_found_inf(flag[0])
    }

    /// The scale update (back off on the agreed overflow, grow after clean steps) and
    /// what it decided: (the scale after the step, whether the step was skipped).
    pub(crate) fn update_scale(&mut self) -> Result<(f32, bool)> {
        let Some(s) = &mut self.scaler else {
            return Ok((1.0, false));
        };
        let r = s.update_and_observe()?;
        Ok((r.scale, r.skipped))
    }
}

/// Sets the first element of `t` to +inf.
fn poison<B: Backend>(t: &mut Tensor<B>) -> Result<()> {
    let mut host = t.to_vec_f32()?;
    if let Some(x) = host.first_mut() {
        *x = f32::INFINITY;
    }
    let backend = t.backend().clone();
    *t = Tensor::from_f32(&backend, &host, t.shape().clone(), t.dtype())?;
    Ok(())
}
