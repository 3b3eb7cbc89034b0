use crate::region::Region;
use crate::{
    Block, Embedding, LayerNorm, MicroBatch, Module, Param, Stash, backward_blocks,
    backward_weight_blocks, forward_blocks,
};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_tensor::Tensor;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// The shape of a GPT.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GptConfig {
    /// Rows of the token embedding, and width of the logits.
    pub vocab_size: usize,
    /// Context length: the longest sequence the positional table covers.
    pub block_size: usize,
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Attention heads per block; must divide `n_embd`.
    pub n_head: usize,
    /// Width `C` of the residual stream (the embeddings).
    pub n_embd: usize,
}

impl GptConfig {
    /// GPT-2 small (124M parameters) with the vocabulary padded from 50257 to 50304,
    /// a multiple of 64, so that the head's GEMM tiles evenly (padding rows are never
    /// targets, so they only cost memory).
    pub fn gpt2_124m() -> Self {
        GptConfig {
            vocab_size: 50304,
            block_size: 1024,
            n_layer: 12,
            n_head: 12,
            n_embd: 768,
        }
    }

    /// Checks that the shape makes sense.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::invalid("GptConfig", msg));
        if self.vocab_size == 0 || self.block_size == 0 || self.n_layer == 0 || self.n_head == 0 {
            return bad(format!("all sizes must be positive: {self:?}"));
        }
        if self.n_embd == 0 || !self.n_embd.is_multiple_of(self.n_head) {
            return bad(format!(
                "n_embd {} must be a positive multiple of n_head {}",
                self.n_embd, self.n_head
            ));
        }
        Ok(())
    }

    /// Parameter count: embeddings `(V + T)·C`, per layer `12·C² + 13·C`
    /// (attention 4C² + 4C, MLP 8C² + 5C, two LayerNorms 4C), final LayerNorm 2C.
    /// The head is tied to the token embedding and adds nothing.
    pub fn num_params(&self) -> usize {
        let c = self.n_embd;
        (self.vocab_size + self.block_size) * c + self.n_layer * (12 * c * c + 13 * c) + 2 * c
    }

    /// FLOPs of one training token, forward and backward, as PaLM's MFU counts them
    /// (Chowdhery et al. 2022, App. B): `6·N + 12·L·T·C`. `N` excludes the positional
    /// table (a lookup, no matmul) and counts the tied head once; the second term is
    /// attention's two `T × T` products (causal masking not discounted).
    pub fn flops_per_token(&self, seq_len: usize) -> f64 {
        let n_matmul = self.num_params() - self.block_size * self.n_embd;
        6.0 * n_matmul as f64 + 12.0 * (self.n_layer * seq_len * self.n_embd) as f64
    }
}

/// A GPT-2 style decoder: token + position embeddings, `n_layer` pre-norm blocks, a
/// final LayerNorm, and an output head that reuses the token embedding matrix
/// (weight tying, Press & Wolf 2017).
///
/// Several micro-batches may be in flight: [`Gpt::forward_loss_mb`] saves under a
/// [`MicroBatch`] id and [`Gpt::backward_mb`] of the same id uses those activations.
/// [`Gpt::forward_loss`] and [`Gpt::backward`] are micro-batch 0.
pub struct Gpt<B: Backend> {
    /// The shape it was built with.
    pub config: GptConfig,
    /// Token embedding `[vocab_size, n_embd]`, also the output head (tied).
    pub wte: Embedding<B>,
    /// Learned positional embedding `[block_size, n_embd]`.
    pub wpe: Embedding<B>,
    /// The blocks, `h.0` to `h.{n_layer-1}`, input first.
    pub h: Vec<Block<B>>,
    /// The final LayerNorm before the head.
    pub ln_f: LayerNorm<B>,
    saved: Stash<HeadSaved<B>>,
}

impl<B: Backend> Gpt<B> {
    /// A freshly initialised model, as GPT-2 does it: weights `N(0, 0.02²)`, biases 0,
    /// LayerNorm `γ = 1, β = 0`, and the two residual projections per block scaled by
    /// `1/sqrt(2·n_layer)` (Radford et al. 2019, §2.3).
    pub fn new(backend: &B, config: GptConfig, dtype: DType, rng: &mut impl Rng) -> Result<Self> {
        config.validate()?;
        let c = config.n_embd;
        let proj_std = 0.02 / ((2 * config.n_layer) as f64).sqrt();
        let wte = Embedding::new(backend, "wte", config.vocab_size, c, 0.02, dtype, rng)?;
        let wpe = Embedding::new(backend, "wpe", config.block_size, c, 0.02, dtype, rng)?;
        let h = (0..config.n_layer)
            .map(|i| {
                Block::new(
                    backend,
                    &format!("h.{i}"),
                    c,
                    config.n_head,
                    proj_std,
                    dtype,
                    rng,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let ln_f = LayerNorm::new(backend, "ln_f", c, dtype)?;
        Ok(Gpt {
            config,
            wte,
            wpe,
            h,
            ln_f,
            saved: Stash::new(),
        })
    }

    /// The parameters' dtype.
    pub fn dtype(&self) -> DType {
        self.wte.weight.value.dtype()
    }

    /// Token ids `[B, T]` (u32) to logits `[B, T, V]`, as micro-batch 0.
    pub fn forward(&mut self, ids: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_mb(MicroBatch::default(), ids)
    }

    /// Token ids `[B, T]` (u32) to logits `[B, T, V]`, saving under `mb`.
    pub fn forward_mb(&mut self, mb: MicroBatch, ids: &Tensor<B>) -> Result<Tensor<B>> {
        let x = self.hidden_mb(mb, ids, None)?;
        self.logits_mb(mb, &x)
    }

    /// The last block's output `[B, T, C]` for token ids `[B, T]` (u32) at `positions`
    /// (u32 `[B, T]`; `None`: `0..T` in every row), saving under `mb`: the model without
    /// its head, for a caller that wants some rows' logits only (serving: each
    /// sequence's last token, through [`Gpt::logits_mb`]).
    pub fn hidden_mb(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        positions: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        let block_size = self.config.block_size;
        let x = embed(
            &mut self.wte,
            &mut self.wpe,
            block_size,
            mb,
            ids,
            positions,
            "Gpt::forward",
        )?;
        forward_blocks(&mut self.h, mb, x, None)
    }

    /// The head on `x` `[B, T, C]`: final LayerNorm and the tied projection, logits
    /// `[B, T, V]`, saving under `mb`.
    pub fn logits_mb(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        head_forward(
            &mut self.ln_f,
            &self.wte.weight.value,
            &mut self.saved,
            mb,
            x,
        )
    }

    /// Forward pass plus per-position cross-entropy `[B, T]` against i32 `targets`, as
    /// micro-batch 0. The logits are kept for [`Gpt::backward`].
    pub fn forward_loss(&mut self, ids: &Tensor<B>, targets: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_loss_mb(MicroBatch::default(), ids, targets)
    }

    /// [`Gpt::forward_loss`] for micro-batch `mb`; [`Gpt::backward_mb`] of the same
    /// `mb` consumes what it saved.
    pub fn forward_loss_mb(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        let logits = self.forward_mb(mb, ids)?;
        head_loss(&mut self.saved, mb, logits, targets)
    }

    /// Runs every block's attention core as the backend's fused kernel where it applies
    /// ([`CausalSelfAttention::fused`](crate::CausalSelfAttention::fused)), or not.
    pub fn set_fused_attention(&mut self, on: bool) {
        for block in &mut self.h {
            block.attn.fused = on;
        }
    }

    /// [`Gpt::forward_loss_mb`] on packed rows: several documents per row, each with
    /// its own `positions` (u32 `[B, T]`, restarting at 0 at each document) and its
    /// `segments` id (u32 `[B, T]`), so that attention never crosses a document
    /// boundary. The backward is [`Gpt::backward_mb`], unchanged.
    pub fn forward_loss_packed_mb(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        targets: &Tensor<B>,
        positions: &Tensor<B>,
        segments: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        let block_size = self.config.block_size;
        let x = embed(
            &mut self.wte,
            &mut self.wpe,
            block_size,
            mb,
            ids,
            Some(positions),
            "Gpt::forward_loss_packed_mb",
        )?;
        let x = forward_blocks(&mut self.h, mb, x, Some(segments))?;
        let logits = head_forward(
            &mut self.ln_f,
            &self.wte.weight.value,
            &mut self.saved,
            mb,
            &x,
        )?;
        head_loss(&mut self.saved, mb, logits, targets)
    }

    /// Backward of micro-batch 0 from the loss `Σ losses · dloss`, accumulating into
    /// every parameter's gradient. For the mean over `n` positions pass `dloss = 1/n`;
    /// for gradient accumulation over `k` micro-batches pass `1/(n·k)` on each.
    pub fn backward(&mut self, dloss: f32) -> Result<()> {
        self.backward_mb(MicroBatch::default(), dloss)
    }

    /// [`Gpt::backward`] of micro-batch `mb`, using the activations its
    /// [`Gpt::forward_loss_mb`] saved. An error if that micro-batch has no forward in
    /// flight.
    pub fn backward_mb(&mut self, mb: MicroBatch, dloss: f32) -> Result<()> {
        let dx = head_backward(
            &mut self.ln_f,
            &mut self.wte.weight,
            &mut self.saved,
            mb,
            dloss,
        )?;
        let dx = backward_blocks(&mut self.h, mb, dx, false)?;
        embed_backward(&mut self.wte, &mut self.wpe, mb, &dx)
    }

    /// [`Gpt::backward_mb`] with the blocks' projection weight gradients deferred to
    /// [`Gpt::backward_weight_mb`] (the zero-bubble "B"; Qi et al., "Zero Bubble
    /// Pipeline Parallelism", 2023). Everything else is accumulated here: the
    /// LayerNorms and embeddings are cheap row reductions and scatter-adds, and the
    /// tied head's `dwte` shares its gradient with the token embedding's scatter-add,
    /// so deferring only one of the two would change the order of the additions.
    /// B then W gives bitwise the gradients of [`Gpt::backward_mb`].
    pub fn backward_input_mb(&mut self, mb: MicroBatch, dloss: f32) -> Result<()> {
        let dx = head_backward(
            &mut self.ln_f,
            &mut self.wte.weight,
            &mut self.saved,
            mb,
            dloss,
        )?;
        let dx = backward_blocks(&mut self.h, mb, dx, true)?;
        embed_backward(&mut self.wte, &mut self.wpe, mb, &dx)
    }

    /// The blocks' projection weight gradients of micro-batch `mb` (the zero-bubble
    /// "W"), after its [`Gpt::backward_input_mb`]; frees what B kept for them. An error
    /// naming the layer if B of `mb` has not run.
    pub fn backward_weight_mb(&mut self, mb: MicroBatch) -> Result<()> {
        backward_weight_blocks(&mut self.h, mb)
    }

    /// Token plus position embeddings of `ids` for micro-batch `mb`, `[B, T, C]`: the
    /// first part of [`Gpt::forward_mb`], for a caller that runs the blocks itself
    /// (activation recomputation in `brrr-checkpoint`). The parts `embed_mb`, each
    /// block's `forward`, [`Gpt::head_loss_mb`], then [`Gpt::head_backward_mb`], each
    /// block's `backward`, [`Gpt::embed_backward_mb`] launch exactly the kernels of
    /// `forward_loss_mb` and `backward_mb`.
    pub fn embed_mb(&mut self, mb: MicroBatch, ids: &Tensor<B>) -> Result<Tensor<B>> {
        self.embed_packed_mb(mb, ids, None)
    }

    /// [`Gpt::embed_mb`] at `positions` (u32 `[B, T]`, restarting at each packed
    /// document; `None` is `0..T`), the embeddings of [`Gpt::forward_loss_packed_mb`].
    pub fn embed_packed_mb(
        &mut self,
        mb: MicroBatch,
        ids: &Tensor<B>,
        positions: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        let block_size = self.config.block_size;
        embed(
            &mut self.wte,
            &mut self.wpe,
            block_size,
            mb,
            ids,
            positions,
            "Gpt::embed_mb",
        )
    }

    /// Masks every block's attention by the documents of `segments` (u32 `[B, T]`), or
    /// unmasks it (`None`): for a caller that walks the blocks one by one over packed
    /// rows; [`Gpt::forward_loss_packed_mb`] does it itself.
    pub fn set_segments(&mut self, segments: Option<&Tensor<B>>) {
        for block in &mut self.h {
            block.attn.segments = segments.cloned();
        }
    }

    /// The head on the last block's output `x`: final LayerNorm, tied projection and
    /// per-position cross-entropy `[B, T]`, saving under `mb`.
    pub fn head_loss_mb(
        &mut self,
        mb: MicroBatch,
        x: &Tensor<B>,
        targets: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        let logits = head_forward(
            &mut self.ln_f,
            &self.wte.weight.value,
            &mut self.saved,
            mb,
            x,
        )?;
        head_loss(&mut self.saved, mb, logits, targets)
    }

    /// Drops what [`Gpt::head_loss_mb`] saved for `mb`.
    pub fn discard_head(&mut self, mb: MicroBatch) -> Result<()> {
        self.saved.discard(mb);
        self.ln_f.discard_saved(mb)
    }

    /// The head's backward from `Σ losses · dloss`: the gradient of the last block's
    /// output.
    pub fn head_backward_mb(&mut self, mb: MicroBatch, dloss: f32) -> Result<Tensor<B>> {
        head_backward(
            &mut self.ln_f,
            &mut self.wte.weight,
            &mut self.saved,
            mb,
            dloss,
        )
    }

    /// The embeddings' backward from the gradient of the first block's input.
    pub fn embed_backward_mb(&mut self, mb: MicroBatch, dx: &Tensor<B>) -> Result<()> {
        embed_backward(&mut self.wte, &mut self.wpe, mb, dx)
    }

    /// The micro-batches whose forward ran and whose backward has not (in increasing
    /// order): what a schedule still owes, or what to `clear_saved` after evaluation.
    pub fn in_flight(&self) -> Vec<MicroBatch> {
        self.saved.micro_batches()
    }
}

/// What the head keeps per micro-batch between its forward and backward.
pub(crate) struct HeadSaved<B: Backend> {
    /// Input of the tied projection (after ln_f), `[B·T, C]`.
    x_final: Tensor<B>,
    logits: Option<Tensor<B>>,
    targets: Option<Tensor<B>>,
    bt: (usize, usize),
}

/// Token plus position embeddings of ids `[B, T]`: `[B, T, C]`. Shared by [`Gpt`] and
/// the embedding stage so that both launch the same kernels in the same order.
pub(crate) fn embed<B: Backend>(
    wte: &mut Embedding<B>,
    wpe: &mut Embedding<B>,
    block_size: usize,
    mb: MicroBatch,
    ids: &Tensor<B>,
    positions: Option<&Tensor<B>>,
    op: &'static str,
) -> Result<Tensor<B>> {
    if ids.rank() != 2 {
        return Err(Error::shape(
            op,
            format!("ids must be [B, T], got {}", ids.shape()),
        ));
    }
    let (b, t) = (ids.dims()[0], ids.dims()[1]);
    // With explicit positions a row may hold several sequences (packed documents, a
    // serving batch flattened into one row): each position must lie in `wpe`, which
    // the embedding lookup checks, not the row's length.
    if positions.is_none() && t > block_size {
        return Err(Error::shape(
            op,
            format!("sequence length {t} exceeds block_size {block_size}"),
        ));
    }
    let _region = Region::open(ids.backend(), || "embedding forward".into());
    let pos = match positions {
        // Packed documents: each token's position inside its own document.
        Some(p) if p.dims() == ids.dims() => p.clone(),
        Some(p) => {
            return Err(Error::shape(
                op,
                format!("positions {} differ from ids {}", p.shape(), ids.shape()),
            ));
        }
        None => {
            let positions: Vec<u32> = (0..b).flat_map(|_| 0..t as u32).collect();
            Tensor::from_u32(ids.backend(), &positions, [b, t])?
        }
    };
    wte.forward(mb, ids)?.add(&wpe.forward(mb, &pos)?)
}

/// The embeddings' backward from the gradient of the first block's input: position
/// embedding, then token embedding (the order every path keeps).
pub(crate) fn embed_backward<B: Backend>(
    wte: &mut Embedding<B>,
    wpe: &mut Embedding<B>,
    mb: MicroBatch,
    dx: &Tensor<B>,
) -> Result<()> {
    let _region = Region::open(dx.backend(), || "embedding backward".into());
    wpe.backward(mb, dx)?;
    wte.backward(mb, dx)
}

/// The head's forward: `ln_f`, then the tied projection `logits = x · wteᵀ`,
/// `[B, T, C] -> [B, T, V]`. Saves ln_f's output under `mb`.
pub(crate) fn head_forward<B: Backend>(
    ln_f: &mut LayerNorm<B>,
    wte: &Tensor<B>,
    saved: &mut Stash<HeadSaved<B>>,
    mb: MicroBatch,
    x: &Tensor<B>,
) -> Result<Tensor<B>> {
    if x.rank() != 3 {
        return Err(Error::shape(
            "Gpt head",
            format!("expected [B, T, C], got {}", x.shape()),
        ));
    }
    let (b, t, c) = (x.dims()[0], x.dims()[1], x.dims()[2]);
    let vocab = wte.dims()[0];
    let _region = Region::open(x.backend(), || "head forward".into());
    let x_final = ln_f.forward(mb, x)?.reshape([b * t, c])?;
    // Tied head: logits = x · wteᵀ (the transpose is a view).
    let logits = x_final.matmul(&wte.transpose(0, 1)?)?;
    saved.put(
        mb,
        HeadSaved {
            x_final,
            logits: None,
            targets: None,
            bt: (b, t),
        },
    );
    logits.reshape([b, t, vocab])
}

/// Per-position cross-entropy of the logits `head_forward` just returned for `mb`;
/// keeps logits and targets for the backward.
pub(crate) fn head_loss<B: Backend>(
    saved: &mut Stash<HeadSaved<B>>,
    mb: MicroBatch,
    logits: Tensor<B>,
    targets: &Tensor<B>,
) -> Result<Tensor<B>> {
    let losses = {
        let _region = Region::open(targets.backend(), || "loss forward".into());
        logits.cross_entropy(targets)?
    };
    let s = saved
        .get_mut(mb)
        .ok_or_else(|| Error::invalid("Gpt head", format!("no forward saved for {mb}")))?;
    s.logits = Some(logits);
    s.targets = Some(targets.clone());
    Ok(losses)
}

/// The head's backward from `Σ losses · dloss`: `dwte += dlogitsᵀ · x`, and the
/// gradient of the head's input, `[B, T, C]`.
pub(crate) fn head_backward<B: Backend>(
    ln_f: &mut LayerNorm<B>,
    wte: &mut Param<B>,
    saved: &mut Stash<HeadSaved<B>>,
    mb: MicroBatch,
    dloss: f32,
) -> Result<Tensor<B>> {
    // A clone: the region outlives the mutable borrows of `wte` below.
    let be = wte.value.backend().clone();
    let _region = Region::open(&be, || "head backward".into());
    let (dlogits, x_final, (b, t)) = head_dlogits(wte, saved, mb, dloss)?;
    let (v, c) = (wte.value.dims()[0], wte.value.dims()[1]);
    debug_assert_eq!(dlogits.dims(), [b * t, v]);
    // Tied head: dwte += dlogitsᵀ · x, dx = dlogits · wte.
    Tensor::matmul_into(&mut wte.grad, &dlogits.transpose(0, 1)?, &x_final, 1.0, 1.0)?;
    let dx = dlogits.matmul(&wte.value)?.reshape([b, t, c])?;
    ln_f.backward(mb, &dx)
}

/// What the head's W needs: the logits' gradient `[B·T, V]` and the projection's input
/// `[B·T, C]`.
pub(crate) type HeadPendingW<B> = (Tensor<B>, Tensor<B>);

/// The head's gradient of the logits, its saved input, and `(B, T)`.
type HeadGrads<B> = (Tensor<B>, Tensor<B>, (usize, usize));

/// The head's backward without the tied projection's weight gradient (the zero-bubble
/// "B"): returns the gradient of the head's input and `(dlogits [B·T, V], x_final
/// [B·T, C])` for [`head_backward_weight`]. The same kernels as [`head_backward`].
pub(crate) fn head_backward_input<B: Backend>(
    ln_f: &mut LayerNorm<B>,
    wte: &Param<B>,
    saved: &mut Stash<HeadSaved<B>>,
    mb: MicroBatch,
    dloss: f32,
) -> Result<(Tensor<B>, HeadPendingW<B>)> {
    let _region = Region::open(wte.value.backend(), || "head backward_input".into());
    let (dlogits, x_final, (b, t)) = head_dlogits(wte, saved, mb, dloss)?;
    let c = wte.value.dims()[1];
    let dx = dlogits.matmul(&wte.value)?.reshape([b, t, c])?;
    Ok((ln_f.backward(mb, &dx)?, (dlogits, x_final)))
}

/// The tied projection's weight gradient from what [`head_backward_input`] returned:
/// `dwte += dlogitsᵀ · x` (the zero-bubble "W").
pub(crate) fn head_backward_weight<B: Backend>(
    wte: &mut Param<B>,
    (dlogits, x_final): (Tensor<B>, Tensor<B>),
) -> Result<()> {
    Tensor::matmul_into(&mut wte.grad, &dlogits.transpose(0, 1)?, &x_final, 1.0, 1.0)
}

/// The gradient of the logits `[B·T, V]` from `Σ losses · dloss`, with the head's saved
/// input `[B·T, C]` and `(B, T)`; frees the saved logits.
fn head_dlogits<B: Backend>(
    wte: &Param<B>,
    saved: &mut Stash<HeadSaved<B>>,
    mb: MicroBatch,
    dloss: f32,
) -> Result<HeadGrads<B>> {
    let saved = saved.take(mb, "Gpt")?;
    let (logits, targets) = match (saved.logits, saved.targets) {
        (Some(l), Some(t)) => (l, t),
        _ => {
            return Err(Error::invalid(
                "Gpt::backward",
                format!("call forward_loss before backward ({mb} ran forward only)"),
            ));
        }
    };
    let (b, t) = saved.bt;
    let v = wte.value.dims()[0];
    let loss_dtype = if wte.value.dtype() == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let dlosses = Tensor::full(logits.backend(), [b, t], loss_dtype, f64::from(dloss))?;
    let dlogits = logits
        .cross_entropy_backward(&targets, &dlosses)?
        .reshape([b * t, v])?;
    drop(logits);
    Ok((dlogits, saved.x_final, (b, t)))
}

impl<B: Backend> Module<B> for Gpt<B> {
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
