//! The data-parallel engine as brrr-nn's [`Segments`] chain. The walks over the model
//! are brrr-nn's (the plain one, [`brrr_nn::walk`]) and brrr-checkpoint's (activation
//! recomputation's); this module only says what running a segment means here:
//!
//! - ZeRO-3: gather the segment's parameters before it runs and free them after (a
//!   recomputed block is gathered again, as in FSDP). On the walk's hint
//!   ([`Segments::prefetch`]) the next segment's gather starts as soon as this one's has
//!   landed, so it arrives while this one computes (`--prefetch`; without it, only once
//!   this one is done: one block gathered at a time). The plain walk gives hints;
//!   recomputation's does not (its order is the plan's), so it gathers on demand.
//! - Every stage: gradients that stages 2-3 dropped are zeroed before a backward
//!   accumulates into them, and after a segment's backward the collectives of the
//!   buckets it completed start (on the step's last micro-batch; `no_sync` on others).

use crate::engine::{DataParallel, Gathering, Pending};
use crate::model::ReplicaModel;
use brrr_backend::{Backend, Result};
use brrr_nn::{MicroBatch, SegmentId, Segments};
use brrr_tensor::Tensor;
use brrr_train::Batch;

/// The engine walked segment by segment, with the bucket launches of the step's last
/// micro-batch (`None` on the others).
pub(crate) struct Walk<'a, 'l, B: Backend, M: ReplicaModel<B>> {
    pub(crate) dp: &'a mut DataParallel<B, M>,
    pub(crate) launch: Option<(&'l mut Vec<Pending>, &'l mut Vec<bool>)>,
    /// The bucket of the segment the walk said runs next.
    next: Option<usize>,
    /// A gather started before the segment that needs it.
    in_flight: Option<Gathering<B>>,
}

impl<'a, 'l, B: Backend, M: ReplicaModel<B>> Walk<'a, 'l, B, M> {
    pub(crate) fn new(
        dp: &'a mut DataParallel<B, M>,
        launch: Option<(&'l mut Vec<Pending>, &'l mut Vec<bool>)>,
    ) -> Self {
        Walk {
            dp,
            launch,
            next: None,
            in_flight: None,
        }
    }

    /// The bucket a segment's parameters are in (the head's; its tied `wte` is the
    /// embeddings', which [`Walk::head_groups`] adds).
    fn group(&self, s: SegmentId) -> usize {
        match s {
            SegmentId::Block(l) => self.dp.block_group(l),
            SegmentId::Head => 0,
        }
    }

    /// The head's buckets: the embeddings' (the tied `wte`), then its own.
    fn head_groups(&self) -> [usize; 2] {
        [self.dp.groups.len() - 1, 0]
    }

    /// Makes bucket `g`'s parameters resident: lands its prefetched gather, or gathers
    /// it now unless it already is (the embeddings stay from the embedding to the head).
    fn land(&mut self, g: usize) -> Result<()> {
        if let Some(h) = self.in_flight.take_if(|(b, _)| *b == g) {
            return self.dp.land_gather(Some(h));
        }
        if self.dp.gathered.get(g).copied().unwrap_or(false) {
            return Ok(());
        }
        self.dp.gather_if_sharded(g)
    }

    /// Runs `f` with `groups` resident: lands them, starts the next segment's gather
    /// (with prefetching), runs, frees `free`, and starts the next gather now if it did
    /// not start before.
    fn run<T>(
        &mut self,
        groups: &[usize],
        free: &[usize],
        f: impl FnOnce(&mut DataParallel<B, M>) -> Result<T>,
    ) -> Result<T> {
        for &g in groups {
            self.land(g)?;
        }
        if let Some(n) = self.next {
            self.in_flight = self.dp.prefetch_start(n)?;
        }
        let out = f(self.dp);
        for &g in free {
            self.dp.free_if_sharded(g)?;
        }
        if let Some(n) = self.next.take() {
            self.in_flight = self.dp.late_start(self.in_flight.take(), n)?;
        }
        out
    }

    /// The embeddings of micro-batch `mb` (their bucket stays gathered for the head).
    pub(crate) fn embed(&mut self, mb: MicroBatch, batch: &Batch) -> Result<Tensor<B>> {
        let first = match self.dp.model.n_blocks() == 0 {
            true => SegmentId::Head,
            false => SegmentId::Block(0),
        };
        self.next = Some(self.group(first));
        let embed = self.head_groups()[0];
        self.run(&[embed], &[], |dp| {
            let tracer = dp.tracer.clone();
            let _s = tracer.span("forward embed");
            dp.embed(mb, batch)
        })
    }

    /// Starts the collectives of the buckets completed from parameter `from` on.
    fn launch_from(&mut self, from: usize) -> Result<()> {
        match &mut self.launch {
            Some((p, done)) => self.dp.launch_ready(from, p, done),
            None => Ok(()),
        }
    }

    /// The launches, back to the caller for the embeddings' backward.
    pub(crate) fn into_launch(self) -> Option<(&'l mut Vec<Pending>, &'l mut Vec<bool>)> {
        self.launch
    }
}

impl<B: Backend, M: ReplicaModel<B>> Segments<B> for Walk<'_, '_, B, M> {
    type Targets = M::Targets;

    fn n_blocks(&self) -> usize {
        self.dp.model.n_blocks()
    }

    fn block_forward(
        &mut self,
        mb: MicroBatch,
        l: usize,
        x: &Tensor<B>,
        selective: bool,
    ) -> Result<Tensor<B>> {
        let g = self.dp.block_group(l);
        self.run(&[g], &[g], |dp| {
            let tracer = dp.tracer.clone();
            let _s = tracer.span(format!("forward h.{l}"));
            dp.model.block_forward(mb, l, x, selective)
        })
    }

    fn block_backward(&mut self, mb: MicroBatch, l: usize, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let g = self.dp.block_group(l);
        let params = self.dp.pieces.blocks[l].clone();
        let dx = self.run(&[g], &[g], |dp| {
            dp.ensure_grads(params.clone())?;
            let tracer = dp.tracer.clone();
            let _s = tracer.span(format!("backward h.{l}"));
            dp.model.block_backward(mb, l, dy)
        })?;
        self.launch_from(params.start)?;
        Ok(dx)
    }

    fn block_discard(&mut self, mb: MicroBatch, l: usize) -> Result<()> {
        self.dp.model.block_discard(mb, l)
    }

    fn head_loss(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &M::Targets,
    ) -> Result<Tensor<B>> {
        let [embed, head] = self.head_groups();
        self.run(&[embed, head], &[head, embed], |dp| {
            let tracer = dp.tracer.clone();
            let _s = tracer.span("forward head");
            dp.model.head_loss(mb, x, targets)
        })
    }

    fn head_backward(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        let [embed, head] = self.head_groups();
        let (hp, ep) = (self.dp.pieces.head.clone(), self.dp.pieces.embed.clone());
        let dx = self.run(&[embed, head], &[head, embed], |dp| {
            dp.ensure_grads(hp.clone())?;
            dp.ensure_grads(ep)?;
            let tracer = dp.tracer.clone();
            let _s = tracer.span("backward head");
            dp.model.head_backward(mb, dloss)
        })?;
        self.launch_from(hp.start)?;
        Ok(dx)
    }

    fn head_discard(&mut self, mb: MicroBatch) -> Result<()> {
        self.dp.model.head_discard(mb)
    }

    fn prefetch(&mut self, next: SegmentId) -> Result<()> {
        self.next = Some(self.group(next));
        Ok(())
    }
}
