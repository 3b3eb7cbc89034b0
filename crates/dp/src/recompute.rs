//! `--checkpoint` under `--dp`: the data-parallel engine ([`Walk`]) walked by
//! brrr-checkpoint's recomputation executor instead of brrr-nn's plain walk. The
//! executor decides which blocks keep their activations and when a dropped one runs
//! again; the walk gathers each segment's parameters when it runs (ZeRO-3; a
//! recomputed block is gathered again, as in FSDP). The executor's order is the
//! plan's, not the model's, so it gives no prefetch hints: under ZeRO-3 recomputation
//! trades that overlap for the memory it saves.

use crate::engine::{DataParallel, Pending};
use crate::model::ReplicaModel;
use crate::walk::Walk;
use brrr_backend::{Backend, Result};
use brrr_nn::MicroBatch;
use brrr_tensor::Tensor;
use brrr_train::Batch;

impl<B: Backend, M: ReplicaModel<B>> DataParallel<B, M> {
    /// The forward of micro-batch `mb` under `--checkpoint`: the embeddings (gathered,
    /// then freed), then the executor's first sweep over the blocks and the head.
    pub(crate) fn forward_recomputed(
        &mut self,
        mb: MicroBatch,
        batch: &Batch,
        targets: &M::Targets,
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
        let x0 = self.embed(mb, batch);
        self.free_if_sharded(embed)?;
        let mut r = self.take_recompute()?;
        let losses = r.forward_loss_from(&mut Walk::new(self, None), mb, x0?, targets, &mut |_| {});
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
        let mut walk = Walk::new(self, launch);
        let dx = r.backward_to_input(&mut walk, mb, dloss, &mut |_| {});
        let launch = walk.into_launch();
        self.recompute = Some(r);
        self.embed_backward(mb, &dx?, launch)?;
        Ok((start, self.now()))
    }

    fn take_recompute(&mut self) -> Result<brrr_checkpoint::Recompute<B, M::Targets>> {
        self.recompute.take().ok_or_else(|| {
            brrr_backend::Error::invalid("dp", "the step recomputes, but has no executor")
        })
    }
}
