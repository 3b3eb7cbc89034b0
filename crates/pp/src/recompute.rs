//! `--checkpoint` under `--pp`: each chunk of a stage walked by brrr-checkpoint's
//! recomputation executor, with the whole model's plan restricted to the chunk's
//! blocks (and the head, on the last piece). The executor keeps and recomputes in each
//! stage exactly what it does on one device; a recomputation the plan starts in an
//! earlier stage starts at this chunk's input, which the executor keeps. The kernels,
//! their inputs and their order are those of a plain pipeline step, so the gradients
//! are the same bits.
//!
//! The zero-bubble split carries over: B runs the executor's backward with each
//! block's (and the head's) input-only backward, which keeps what W needs; W then runs
//! as without recomputation.

use brrr_backend::{Backend, Error, Result};
use brrr_nn::{BlockPart, BlocksStage, HeadPart, MicroBatch, Segments};
use brrr_tensor::Tensor;

/// One chunk of a stage (and the head, if it holds the last piece) as the executor's
/// chain: block `l` of the whole model is `blocks`' block `l - first`.
pub(crate) struct ChunkWalk<'a, B: Backend> {
    pub(crate) blocks: &'a mut BlocksStage<B, Box<dyn BlockPart<B>>>,
    pub(crate) head: Option<&'a mut Box<dyn HeadPart<B>>>,
    /// The whole model's blocks.
    pub(crate) n_layer: usize,
    /// The zero-bubble B: input gradients only, weight gradients left for W.
    pub(crate) input_only: bool,
}

impl<B: Backend> ChunkWalk<'_, B> {
    fn local(&self, l: usize) -> Result<usize> {
        let layers = self.blocks.layers();
        match layers.contains(&l) {
            true => Ok(l - layers.start),
            false => Err(Error::invalid(
                "pipeline",
                format!("block {l} is not in this chunk ({layers:?})"),
            )),
        }
    }

    fn head(&mut self) -> Result<&mut Box<dyn HeadPart<B>>> {
        self.head
            .as_deref_mut()
            .ok_or_else(|| Error::invalid("pipeline", "the last piece has no head"))
    }
}

impl<B: Backend> Segments<B> for ChunkWalk<'_, B> {
    type Targets = Tensor<B>;

    fn n_blocks(&self) -> usize {
        self.n_layer
    }

    fn block_forward(
        &mut self,
        mb: MicroBatch,
        l: usize,
        x: &Tensor<B>,
        selective: bool,
    ) -> Result<Tensor<B>> {
        let i = self.local(l)?;
        self.blocks.block_forward(i, mb, x, selective)
    }

    fn block_backward(&mut self, mb: MicroBatch, l: usize, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let i = self.local(l)?;
        self.blocks.block_backward(i, mb, dy, self.input_only)
    }

    fn block_discard(&mut self, mb: MicroBatch, l: usize) -> Result<()> {
        let i = self.local(l)?;
        self.blocks.block_mut(i)?.discard_saved(mb)
    }

    fn head_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        self.head()?.forward_loss(mb, x, targets)
    }

    fn head_backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        let input_only = self.input_only;
        let head = self.head()?;
        match input_only {
            true => head.backward_input(mb, dloss),
            false => head.backward(mb, dloss),
        }
    }

    fn head_discard(&mut self, mb: MicroBatch) -> Result<()> {
        self.head()?.discard_saved(mb)
    }
}
