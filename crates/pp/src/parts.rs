//! The parts a [`crate::PipelineStage`] holds, built once at construction: brrr-nn's
//! whole layers, or brrr-tp's tensor-parallel shards of them (`--pp P --tp T`). Both
//! kinds implement brrr-nn's [`EmbeddingPart`], [`BlockPart`] and [`HeadPart`], so the
//! executor drives a stage the same way whichever it holds, through one walk.

use brrr_backend::{Backend, Result};
use brrr_collectives::Communicator;
use brrr_nn::{BlockPart, BlocksStage, EmbeddingPart, EmbeddingStage, HeadPart, HeadStage};
use brrr_tp::{TpEmbeddingStage, TpHeadStage, shard_blocks};
use std::sync::Arc;

/// A stage's embeddings, chunks of blocks and head, each boxed as its part.
pub(crate) type Parts<B> = (
    Box<dyn EmbeddingPart<B>>,
    Vec<BlocksStage<B, Box<dyn BlockPart<B>>>>,
    Box<dyn HeadPart<B>>,
);

/// The parts as they are (`tp` is `None`), or this tensor rank's shards of them over
/// the group `tp.0` (with sequence parallelism when `tp.1`).
pub(crate) fn stage_parts<B: Backend>(
    embedding: EmbeddingStage<B>,
    chunks: impl Iterator<Item = BlocksStage<B>>,
    head: HeadStage<B>,
    tp: &Option<(Arc<Communicator>, bool)>,
) -> Result<Parts<B>> {
    let Some((comm, sp)) = tp else {
        let chunks = chunks
            .map(|c| c.try_map(|b| Ok(Box::new(b) as Box<dyn BlockPart<B>>)))
            .collect::<Result<_>>()?;
        return Ok((Box::new(embedding), chunks, Box::new(head)));
    };
    let embedding = TpEmbeddingStage::from_stage(&embedding, comm.clone(), *sp)?;
    let chunks = chunks
        .map(|c| {
            shard_blocks(&c, comm.clone(), *sp)?
                .try_map(|b| Ok(Box::new(b) as Box<dyn BlockPart<B>>))
        })
        .collect::<Result<_>>()?;
    let head = TpHeadStage::from_stage(&head, comm.clone(), *sp)?;
    Ok((Box::new(embedding), chunks, Box::new(head)))
}
