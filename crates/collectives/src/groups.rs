//! The sub-groups of 3D parallelism. Ranks are laid out tensor-parallel fastest, then
//! data-parallel, then pipeline-parallel (Megatron-LM's order: Narayanan et al.,
//! "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
//! SC 2021): the `tp` ranks of one tensor-parallel group are neighbours, so on a node
//! they share the fastest links, which their per-layer all-reduces need most.

use crate::communicator::Communicator;
use crate::error::{CollError, Result};

/// Degrees of data, tensor and pipeline parallelism; their product is the world size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParallelLayout {
    /// Data-parallel degree.
    pub dp: usize,
    /// Tensor-parallel degree.
    pub tp: usize,
    /// Pipeline-parallel degree.
    pub pp: usize,
}

impl ParallelLayout {
    /// `(dp, tp, pp)` coordinates of world rank `rank`.
    pub fn coords(&self, rank: usize) -> (usize, usize, usize) {
        let tp = rank % self.tp;
        let dp = (rank / self.tp) % self.dp;
        let pp = rank / (self.tp * self.dp);
        (dp, tp, pp)
    }

    /// The world rank at coordinates `(dp, tp, pp)`.
    pub fn rank(&self, dp: usize, tp: usize, pp: usize) -> usize {
        (pp * self.dp + dp) * self.tp + tp
    }
}

/// This rank's three groups.
#[derive(Debug)]
pub struct ParallelGroups {
    /// Ranks holding the same model shard: gradients are all-reduced here.
    pub dp: Communicator,
    /// Ranks splitting one layer's matrices.
    pub tp: Communicator,
    /// The stages of one pipeline.
    pub pp: Communicator,
    /// The layout.
    pub layout: ParallelLayout,
}

impl ParallelGroups {
    /// Splits `world` into this rank's data-, tensor- and pipeline-parallel groups
    /// (collective over `world`).
    pub fn new(world: &Communicator, layout: ParallelLayout) -> Result<Self> {
        let n = layout
            .dp
            .checked_mul(layout.tp)
            .and_then(|x| x.checked_mul(layout.pp));
        if n != Some(world.world_size()) || n == Some(0) {
            return Err(CollError::invalid(
                "parallel groups",
                format!(
                    "dp {} × tp {} × pp {} != world size {}",
                    layout.dp,
                    layout.tp,
                    layout.pp,
                    world.world_size()
                ),
            ));
        }
        let (dp, tp, pp) = layout.coords(world.rank());
        let color = |a: usize, b: usize| (a * world.world_size() + b) as u32;
        Ok(ParallelGroups {
            // Same (tp, pp): ordered by dp.
            dp: world.split(color(tp, pp), dp as u32)?,
            // Same (dp, pp): ordered by tp.
            tp: world.split(color(dp, pp), tp as u32)?,
            // Same (dp, tp): ordered by pp.
            pp: world.split(color(dp, tp), pp as u32)?,
            layout,
        })
    }
}
