//! `--checkpoint` under `--dp`: the data-parallel engine walked by brrr-checkpoint's
//! recomputation executor. The executor decides which blocks keep their activations
//! and when a dropped one runs again; this module only says what running a segment
//! means here: gather its parameters first and free them after (ZeRO-3, where a
//! recomputed block is gathered again, as FSDP does), and after a block's backward
//! start the collectives of the buckets it completed.
//!
//! The plain walk in `engine.rs` prefetches the next block's gather while one computes;
//! this one gathers when a segment runs (a recomputation's order is the plan's, not the
//! model's), so under ZeRO-3 it trades that overlap for the memory recomputation saves.

use crate::engine::{DataParallel, Pending};
use brrr_backend::{Backend, Result};
use brrr_nn::{MicroBatch, Module, Segments};
use brrr_tensor::Tensor;

/// The engine as the executor's chain, with the bucket launches of the step's last
/// micro-batch (`None` on the others: `no_sync`).
pub(crate) struct Walk<'a, 'l, B: Backend> {
    pub(crate) dp: &'a mut DataParallel<B>,
    pub(crate) launch: Option<(&'l mut Vec<Pending>, &'l mut Vec<bool>)>,
}

impl<B: Backend> Walk<'_, '_, B> {
    /// The head's buckets: its own and the embeddings' (the tied `wte`).
    fn head_groups(&self) -> (usize, usize) {
        (0, self.dp.groups.len() - 1)
    }
}

impl<B: Backend> Segments<B> for Walk<'_, '_, B> {
    type Targets = Tensor<B>;

    fn n_blocks(&self) -> usize {
        self.dp.model.h.len()
    }

    fn block_forward(
        &mut self,
        mb: MicroBatch,
        l: usize,
        x: &Tensor<B>,
        selective: bool,
    ) -> Result<Tensor<B>> {
        let g = self.dp.block_group(l);
        self.dp.gather_if_sharded(g)?;
        let out = {
            let tracer = self.dp.tracer.clone();
            let _s = tracer.span(format!("forward h.{l}"));
            self.dp.model.block_forward(mb, l, x, selective)
        };
        self.dp.free_if_sharded(g)?;
        out
    }

    fn block_backward(&mut self, mb: MicroBatch, l: usize, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let g = self.dp.block_group(l);
        self.dp.gather_if_sharded(g)?;
        let params = self.dp.pieces.blocks[l].clone();
        self.dp.ensure_grads(params.clone())?;
        let dx = {
            let tracer = self.dp.tracer.clone();
            let _s = tracer.span(format!("backward h.{l}"));
            self.dp.model.h[l].backward(mb, dy)?
        };
        self.dp.free_if_sharded(g)?;
        if let Some((p, done)) = &mut self.launch {
            self.dp.launch_ready(params.start, p, done)?;
        }
        Ok(dx)
    }

    fn block_discard(&mut self, mb: MicroBatch, l: usize) -> Result<()> {
        self.dp.model.h[l].discard_saved(mb)
    }

    fn head_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        let (head, embed) = self.head_groups();
        self.dp.gather_if_sharded(embed)?;
        self.dp.gather_if_sharded(head)?;
        let losses = {
            let tracer = self.dp.tracer.clone();
            let _s = tracer.span("forward head");
            self.dp.model.head_loss_mb(mb, x, targets)
        };
        self.dp.free_if_sharded(head)?;
        self.dp.free_if_sharded(embed)?;
        losses
    }

    fn head_backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        let (head, embed) = self.head_groups();
        self.dp.gather_if_sharded(embed)?;
        self.dp.gather_if_sharded(head)?;
        let (hp, ep) = (self.dp.pieces.head.clone(), self.dp.pieces.embed.clone());
        self.dp.ensure_grads(hp.clone())?;
        self.dp.ensure_grads(ep)?;
        let dx = {
            let tracer = self.dp.tracer.clone();
            let _s = tracer.span("backward head");
            self.dp.model.head_backward_mb(mb, dloss)?
        };
        self.dp.free_if_sharded(head)?;
        self.dp.free_if_sharded(embed)?;
        if let Some((p, done)) = &mut self.launch {
            self.dp.launch_ready(hp.start, p, done)?;
        }
        Ok(dx)
    }

    fn head_discard(&mut self, mb: MicroBatch) -> Result<()> {
        self.dp.model.discard_head(mb)
    }
}

impl<B: Backend> DataParallel<B> {
    /// The forward of micro-batch `mb` under `--checkpoint`: the embeddings (gathered,
    /// then freed), then the executor's first sweep over the blocks and the head.
    pub(crate) fn forward_recomputed(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        if self.mask.is_some() {
            // `TrainConfig::validate` refuses the pair; a caller's batch source may not.
            return Err(brrr_backend::Error::invalid(
                "dp",
                "document masks with --checkpoint are not supported: use --checkpoint none",
            ));
        }
        let embed = self.groups.len() - 1;
        self.gather_if_sharded(embed)?;
        let x0 = self.embed(mb, ids);
        self.free_if_sharded(embed)?;
        let mut r = self.take_recompute()?;
        let losses = r.forward_loss_from(
            &mut Walk {
                dp: self,
                launch: None,
            },
            mb,
            x0?,
            targets,
            &mut |_| {},
        );
        self.recompute = Some(r);
        losses
    }

    /// The backward of micro-batch `mb` under `--checkpoint`: the rest of the plan, then
    /// the embeddings; with `launch` (the last micro-batch) each bucket's collective
    /// starts once its gradients are final. Returns the backward's (start, end).
    pub(crate) fn backward_recomputed(
        &mut self,
        mb: MicroBatch,
        dloss: f32,
        launch: Option<(&mut Vec<Pending>, &mut Vec<bool>)>,
    ) -> Result<(f64, f64)> {
        let start = self.now();
        let mut r = self.take_recompute()?;
        let mut walk = Walk { dp: self, launch };
        let dx = r.backward_to_input(&mut walk, mb, dloss, &mut |_| {});
        let launch = walk.launch.take();
        self.recompute = Some(r);
        let dx = dx?;
        {
            let tracer = self.tracer.clone();
            let _s = tracer.span("backward embed");
            self.model.embed_backward_mb(mb, &dx)?;
        }
        if let Some((p, done)) = launch {
            let from = self.pieces.embed.start;
            self.launch_ready(from, p, done)?;
        }
        Ok((start, self.now()))
    }

    fn take_recompute(&mut self) -> Result<brrr_checkpoint::Recompute<B>> {
        self.recompute.take().ok_or_else(|| {
            brrr_backend::Error::invalid("dp", "the step recomputes, but has no executor")
        })
    }
}
