//! Runs a [`Schedule`] on a GPT: the blocks and the head are the chain's segments.

use crate::chain::{Chain, GptShape};
use crate::schedule::{Mode, Op, Schedule};
use crate::segment_seed;
use brrr_backend::{Backend, Error, Result};
use brrr_nn::{Gpt, MicroBatch, Module, Segments};
use brrr_tensor::Tensor;
use std::collections::BTreeMap;
use std::ops::Range;

/// What one micro-batch holds between its forward and its backward.
struct InFlight<B: Backend, T> {
    /// Kept inputs `x_i` by segment (the range's first input always).
    inputs: BTreeMap<usize, Tensor<B>>,
    /// The head's targets, for a recomputed head (`None` if the range has no head).
    targets: Option<T>,
    /// The segments this walk runs (a pipeline stage runs its own part of the chain).
    range: Range<usize>,
}

/// Where a backward starts: the loss scale, when the walk ends with the head, or the
/// gradient of the walk's output (a pipeline stage before the last).
pub enum Seed<B: Backend> {
    /// `Σ losses · dloss`.
    Loss(f32),
    /// The gradient of the last segment's output.
    Grad(Tensor<B>),
}

/// Runs a schedule's forward sweep as a training step's forward and the rest (the
/// recomputations and backwards) as its backward, for any number of micro-batches in
/// flight. Segment `i < n_blocks` is block `h.i`, segment `n_blocks` is the head.
///
/// It walks any [`Segments`]: the one-device [`Gpt`] ([`Recompute::forward_loss`]
/// embeds too), brrr-tp's shard, or a data-parallel engine that gathers each block's
/// parameters around it (`T` is the head's targets, `Segments::Targets`).
///
/// Layers save into their stashes as always; a forward whose mode keeps less drops
/// them at once (`Module::discard_saved`), and a segment whose stash is needed again
/// is re-run from its kept input right before its backward. The kernels, their inputs
/// and their order within each segment are those of an ordinary step, so on a
/// deterministic backend the gradients are the same bits.
pub struct Recompute<B: Backend, T = Tensor<B>> {
    schedule: Schedule,
    forward_len: usize,
    n_segments: usize,
    step_seed: u64,
    in_flight: BTreeMap<MicroBatch, InFlight<B, T>>,
}

impl<B: Backend, T: Clone> Recompute<B, T> {
    /// An executor of `schedule` for a GPT of `n_layer` blocks (a chain of
    /// `n_layer + 1` segments). Errors if the schedule is not valid for such a chain.
    pub fn new(schedule: Schedule, chain: &Chain) -> Result<Self> {
        schedule
            .simulate(chain)
            .map_err(|e| Error::invalid("Recompute::new", e.to_string()))?;
        Ok(Recompute {
            forward_len: schedule.forward_len(),
            n_segments: chain.len(),
            schedule,
            step_seed: 0,
            in_flight: BTreeMap::new(),
        })
    }

    /// The schedule it runs.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Sets the seed of the coming step. brrr's GPT draws no random numbers in a
    /// forward (no dropout), so nothing consumes it yet; a layer that did would take its
    /// seed from [`Recompute::seed`], which is the same for a forward and its
    /// recomputation.
    pub fn set_step_seed(&mut self, seed: u64) {
        self.step_seed = seed;
    }

    /// The seed segment `seg` of micro-batch `mb` uses in every forward of this step.
    pub fn seed(&self, mb: MicroBatch, seg: usize) -> u64 {
        segment_seed(self.step_seed, mb.0, seg)
    }

    fn check_model<M: Segments<B>>(&self, model: &M) -> Result<()> {
        if model.n_blocks() + 1 != self.n_segments {
            return Err(Error::invalid(
                "Recompute",
                format!(
                    "the schedule is for {} segments, the model has {} blocks and a head",
                    self.n_segments,
                    model.n_blocks()
                ),
            ));
        }
        Ok(())
    }

    /// The forward of micro-batch `mb` from the first block's input `x0`: the
    /// schedule's first sweep, calling `after_op` after each op. Returns the
    /// per-position losses `[B, T]`.
    pub fn forward_loss_from<M: Segments<B, Targets = T>>(
        &mut self,
        model: &mut M,
        mb: MicroBatch,
        x0: Tensor<B>,
        targets: &T,
        after_op: &mut dyn FnMut(&Op),
    ) -> Result<Tensor<B>> {
        let all = 0..model.n_blocks() + 1;
        self.forward_range(model, mb, all, x0, Some(targets), after_op)
    }

    /// The forward of micro-batch `mb` over segments `range` only, from `x` (the input
    /// of `range.start`): the schedule's first sweep restricted to the range. Returns
    /// the losses if the range ends with the head (`targets` is then needed), else the
    /// output of its last block.
    ///
    /// The plan is the whole chain's, so a pipeline stage keeps and recomputes exactly
    /// what one device does in its blocks; a recomputation the plan starts before the
    /// range starts at the range's input instead, which the walk always keeps (a stage
    /// holds its input until its backward anyway).
    pub fn forward_range<M: Segments<B, Targets = T>>(
        &mut self,
        model: &mut M,
        mb: MicroBatch,
        range: Range<usize>,
        x: Tensor<B>,
        targets: Option<&T>,
        after_op: &mut dyn FnMut(&Op),
    ) -> Result<Tensor<B>> {
        self.check_model(model)?;
        let head = model.n_blocks();
        if range.is_empty() || range.end > head + 1 || (range.end == head + 1) != targets.is_some()
        {
            return Err(Error::invalid(
                "Recompute",
                format!(
                    "segments {range:?} of a chain of {}, with{} targets",
                    head + 1,
                    if targets.is_some() { "" } else { "out" }
                ),
            ));
        }
        let mut state = InFlight {
            inputs: BTreeMap::from([(range.start, x)]),
            targets: targets.cloned(),
            range: range.clone(),
        };
        let mut front = None;
        let mut losses = None;
        for op in &self.schedule.ops[..self.forward_len] {
            if let Op::Forward { seg, mode } = *op
                && range.contains(&seg)
            {
                losses = run_forward(model, mb, &mut state, &mut front, seg, mode)?.or(losses);
            }
            after_op(op);
        }
        self.in_flight.insert(mb, state);
        match (losses, front) {
            (Some(l), _) => Ok(l),
            (None, Some((i, y))) if i == range.end => Ok(y),
            _ => Err(Error::invalid(
                "Recompute",
                format!("the forward sweep never finished segments {range:?}"),
            )),
        }
    }

    /// The backward of micro-batch `mb` from `Σ losses · dloss`: the rest of the
    /// schedule, calling `after_op` after each op. Returns the gradient of the first
    /// block's input (for the embeddings' backward).
    pub fn backward_to_input<M: Segments<B, Targets = T>>(
        &mut self,
        model: &mut M,
        mb: MicroBatch,
        dloss: f32,
        after_op: &mut dyn FnMut(&Op),
    ) -> Result<Tensor<B>> {
        self.backward_range(model, mb, Seed::Loss(dloss), after_op)
    }

    /// The backward of micro-batch `mb` over the segments its forward ran, from
    /// `seed`: the rest of the schedule restricted to them. Returns the gradient of the
    /// range's input.
    pub fn backward_range<M: Segments<B, Targets = T>>(
        &mut self,
        model: &mut M,
        mb: MicroBatch,
        seed: Seed<B>,
        after_op: &mut dyn FnMut(&Op),
    ) -> Result<Tensor<B>> {
        self.check_model(model)?;
        let mut state = self.in_flight.remove(&mb).ok_or_else(|| {
            Error::invalid("Recompute", format!("backward of {mb} without its forward"))
        })?;
        let head = model.n_blocks();
        let range = state.range.clone();
        let (mut dloss, mut delta) = match seed {
            Seed::Loss(d) if range.end == head + 1 => (Some(d), None),
            Seed::Grad(dy) if range.end <= head => (None, Some(dy)),
            _ => {
                return Err(Error::invalid(
                    "Recompute",
                    format!("a backward of segments {range:?} seeded with the wrong kind"),
                ));
            }
        };
        let mut front: Option<(usize, Tensor<B>)> = None;
        for op in &self.schedule.ops[self.forward_len..] {
            match *op {
                Op::Forward { seg, mode } if range.contains(&seg) => {
                    run_forward(model, mb, &mut state, &mut front, seg, mode)?;
                }
                Op::Backward { seg } if range.contains(&seg) => {
                    front = None;
                    delta = Some(if seg == head {
                        let d = dloss.take().ok_or_else(|| {
                            Error::invalid("Recompute", "the head's backward ran twice")
                        })?;
                        model.head_backward(mb, d)?
                    } else {
                        let dy = delta.as_ref().ok_or_else(|| {
                            Error::invalid(
                                "Recompute",
                                format!("backward of h.{seg} before the head's"),
                            )
                        })?;
                        model.block_backward(mb, seg, dy)?
                    });
                    state.inputs.remove(&seg);
                }
                _ => {}
            }
            after_op(op);
        }
        drop(front);
        delta.ok_or_else(|| Error::invalid("Recompute", "the schedule has no backward"))
    }

    /// Drops every micro-batch in flight (after an error, or to start over).
    pub fn clear(&mut self) {
        self.in_flight.clear();
    }
}

impl<B: Backend> Recompute<B> {
    /// The forward of micro-batch `mb` on the one-device GPT: embeddings, then the
    /// schedule's first sweep. Returns the per-position losses `[B, T]`, like
    /// `Gpt::forward_loss_mb`.
    pub fn forward_loss(
        &mut self,
        model: &mut Gpt<B>,
        mb: MicroBatch,
        ids: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        self.forward_loss_observed(model, mb, ids, targets, &mut |_| {})
    }

    /// [`Recompute::forward_loss`], calling `after_op` after each op of the schedule
    /// (a trainer records the device's memory there: the curve of a step).
    pub fn forward_loss_observed(
        &mut self,
        model: &mut Gpt<B>,
        mb: MicroBatch,
        ids: &Tensor<B>,
        targets: &Tensor<B>,
        after_op: &mut dyn FnMut(&Op),
    ) -> Result<Tensor<B>> {
        self.check_model(model)?;
        let x0 = model.embed_mb(mb, ids)?;
        self.forward_loss_from(model, mb, x0, targets, after_op)
    }

    /// The backward of micro-batch `mb` from `Σ losses · dloss`: the rest of the
    /// schedule, then the embeddings. Gradients accumulate as in `Gpt::backward_mb`.
    pub fn backward(&mut self, model: &mut Gpt<B>, mb: MicroBatch, dloss: f32) -> Result<()> {
        self.backward_observed(model, mb, dloss, &mut |_| {})
    }

    /// [`Recompute::backward`], calling `after_op` after each op of the schedule.
    pub fn backward_observed(
        &mut self,
        model: &mut Gpt<B>,
        mb: MicroBatch,
        dloss: f32,
        after_op: &mut dyn FnMut(&Op),
    ) -> Result<()> {
        let dx = self.backward_to_input(model, mb, dloss, after_op)?;
        model.embed_backward_mb(mb, &dx)
    }
}

/// One forward of segment `seg` in `mode`, from the current output (`front`) or a kept
/// input. Returns the losses when `seg` is the head.
fn run_forward<B: Backend, M: Segments<B>>(
    model: &mut M,
    mb: MicroBatch,
    state: &mut InFlight<B, M::Targets>,
    front: &mut Option<(usize, Tensor<B>)>,
    seg: usize,
    mode: Mode,
) -> Result<Option<Tensor<B>>> {
    let input = match front.take() {
        Some((i, x)) if i == seg => x,
        _ => state.inputs.get(&seg).cloned().ok_or_else(|| {
            Error::invalid(
                "Recompute",
                format!("forward of segment {seg} without its input"),
            )
        })?,
    };
    if mode == Mode::SaveInput {
        state.inputs.insert(seg, input.clone());
    }
    let keep = matches!(mode, Mode::SaveAll | Mode::SaveSelective);
    if seg == model.n_blocks() {
        let targets = state
            .targets
            .as_ref()
            .ok_or_else(|| Error::invalid("Recompute", "the head's forward without its targets"))?;
        let losses = model.head_loss(mb, &input, targets)?;
        if !keep {
            model.head_discard(mb)?;
        }
        return Ok(Some(losses));
    }
    let out = model.block_forward(mb, seg, &input, mode == Mode::SaveSelective)?;
    if !keep {
        model.block_discard(mb, seg)?;
    }
    drop(input);
    *front = Some((seg + 1, out));
    Ok(None)
}

/// The GPT's chain with every byte count measured on `model`'s backend
/// (`Backend::memory_stats`) instead of counted: one forward and backward of block 0
/// and of the head on a batch of `ids` and `targets`, each stash, temporary and output
/// as the device saw it. Costs stay [`GptShape::chain`]'s FLOPs. Call it with no
/// micro-batch in flight: it clears every stash after. Leaves the model's gradients
/// changed (zero them after).
pub fn gpt_chain_measured<B: Backend>(
    model: &mut Gpt<B>,
    ids: &Tensor<B>,
    targets: &Tensor<B>,
) -> Result<Chain> {
    let (b, t) = (ids.dims()[0], ids.dims()[1]);
    let c = model.config.clone();
    let shape = GptShape {
        n_layer: c.n_layer,
        n_head: c.n_head,
        n_embd: c.n_embd,
        vocab_size: c.vocab_size,
        batch: b,
        seq_len: t,
        dtype_bytes: model.dtype().size_in_bytes() as u64,
    };
    let mut chain = shape.chain();
    let backend = ids.backend().clone();
    let in_use = || backend.memory_stats().bytes_in_use;
    let mb = MicroBatch(u32::MAX);
    let x = model.embed_mb(mb, ids)?;
    let x_bytes = in_use();
    // Block 0, forward.
    backend.reset_peak_memory();
    let y = model.h[0].forward(mb, &x)?;
    let (after, peak) = (in_use(), backend.memory_stats().peak_bytes);
    let out = tensor_bytes(&y);
    let stash = after - x_bytes - out;
    let fwd_extra = peak - after;
    // Block 0, backward from a gradient the size of its output.
    let dy = Tensor::zeros(&backend, y.dims().to_vec(), y.dtype())?;
    drop(y);
    let before = in_use();
    backend.reset_peak_memory();
    let dx = model.h[0].backward(mb, &dy)?;
    let bwd_extra = backend.memory_stats().peak_bytes - before - tensor_bytes(&dx);
    drop((dx, dy));
    for s in &mut chain.segments[..c.n_layer] {
        s.stash = stash;
        s.forward_extra = fwd_extra;
        s.backward_extra = bwd_extra;
        s.input = out;
    }
    // The head.
    let base = in_use();
    backend.reset_peak_memory();
    let losses = model.head_loss_mb(mb, &x, targets)?;
    let (after, peak) = (in_use(), backend.memory_stats().peak_bytes);
    let head = chain.segments.last_mut().expect("the head");
    head.stash = after - base - tensor_bytes(&losses);
    head.forward_extra = peak - after;
    chain.output = tensor_bytes(&losses);
    drop(losses);
    let before = in_use();
    backend.reset_peak_memory();
    let dx = model.head_backward_mb(mb, 1.0)?;
    head.backward_extra = backend.memory_stats().peak_bytes - before - tensor_bytes(&dx);
    drop(dx);
    model.clear_saved();
    Ok(chain)
}

fn tensor_bytes<B: Backend>(t: &Tensor<B>) -> u64 {
    t.size_in_bytes() as u64
}
