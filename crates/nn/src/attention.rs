use crate::{Linear, LinearLayer, MicroBatch, Module, Param, Stash};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_tensor::{AttentionOut, Tensor};
use rand::Rng;

/// Causal multi-head self-attention (Vaswani et al. 2017, §3.2), GPT-2 layout: one
/// fused `c_attn` projection to q, k, v, and an output projection `c_proj`.
///
/// Built from parts: batched GEMMs and a causal softmax kernel. The `[T, T]` attention
/// matrix of every head is materialised and saved for the backward; that quadratic
/// memory is exactly what FlashAttention avoids. With [`CausalSelfAttention::fused`]
/// set, a backend that has one runs the whole core as one kernel instead
/// ([`Tensor::attention`]): q, k and v are read in place from `c_attn`'s output and
/// only a log-sum-exp per row is saved.
///
/// The number of heads is read from the projections: `c_attn` produces q, k and v of
/// `c_attn.out_features() / (3·head_dim)` heads. A layer built from shards of the
/// projections (a column-parallel `c_attn` holding some heads' q, k, v rows and a
/// row-parallel `c_proj` holding their input columns) therefore computes exactly those
/// heads, and the shards' outputs sum to the full layer's (Megatron-LM, Shoeybi et al.
/// 2019, §3).
pub struct CausalSelfAttention<B: Backend> {
    /// `[.., C] -> [.., 3·H·D]`: q, k, v of this layer's `H` heads, in that order.
    pub c_attn: Box<dyn LinearLayer<B>>,
    /// `[.., H·D] -> [.., C]`.
    pub c_proj: Box<dyn LinearLayer<B>>,
    /// Width `D` of one head.
    pub head_dim: usize,
    /// The dtype of the attention core (`q·kᵀ`, softmax, `att·v`, and their backward)
    /// when it differs from the activations' (mixed precision: an f32 core inside an
    /// f16 model); `None` computes in the activations' dtype.
    pub core_dtype: Option<DType>,
    /// What each micro-batch in flight saved for the backward.
    pub saved: Stash<AttentionSaved<B>>,
    /// Selective activation recomputation (Korthikanti et al. 2022, §4.2): when set,
    /// the forward does not keep the `[B·H, T, T]` softmax, and the backward recomputes
    /// it from the saved q and k with the same kernels (so bit for bit the same).
    pub recompute_scores: bool,
    /// Segment ids (u32 `[B, T]`) of packed rows: while set, forwards mask attention so
    /// no token attends across a document boundary ([`Tensor::softmax_segmented`]).
    /// `None`: the plain causal mask.
    pub segments: Option<Tensor<B>>,
    /// Run the core as the backend's fused kernel ([`Backend::attention`]) where it
    /// applies: the backend has one ([`Backend::has_fused_attention`]), the core
    /// computes in f32, and no document mask is set. Elsewhere the composite path runs.
    /// The two agree to f32 rounding; bit-identical results are not promised (the
    /// backward sums in another order), though at small sizes the forwards often are.
    pub fused: bool,
    /// Inference over a KV cache ([`CachedAttention`]): while set, forwards attend
    /// through it and save nothing for a backward. `None`: training's attention.
    pub cache: Option<Box<dyn CachedAttention<B>>>,
}

/// Attention over a cache of earlier tokens' keys and values, for inference (serving):
/// a layer whose [`CausalSelfAttention::cache`] is set hands it this forward's q, k and
/// v and takes back the heads' output instead of attending within the forward's own
/// tokens. The cache decides which earlier tokens each new token sees (brrr-serve's
/// paged KV cache: a batch of sequences, each with its own context); brrr-nn only
/// provides the seam, so the model is walked by the same `Block::forward` in training
/// and in serving (as vLLM's attention layers read their context from the forward's
/// metadata while the model code stays the training code).
pub trait CachedAttention<B: Backend>: brrr_backend::WasmNotSendSync {
    /// `qkv`: `c_attn`'s output `[B, T, 3·H·D]` for this forward's tokens (each token's
    /// q, k and v of `heads` heads side by side, the layout the fused kernel reads);
    /// returns `[B, T, H·D]`, each query's softmax-weighted sum of the values it may
    /// see (scores scaled by `scale`), heads side by side as `c_proj` reads them.
    fn attend(&self, qkv: &Tensor<B>, heads: usize, scale: f32) -> Result<Tensor<B>>;
}

/// What a forward saved for its backward, by the path it took.
pub enum AttentionSaved<B: Backend> {
    /// The composite path (GEMMs and a softmax kernel).
    Composite(CompositeSaved<B>),
    /// The fused kernel: `c_attn`'s output `[B, T, 3·H·D]` and the kernel's outputs.
    Fused {
        /// `c_attn`'s output `[B, T, 3·H·D]`, which the kernel read q, k and v from.
        qkv: Tensor<B>,
        /// The kernel's output `y` and its per-row log-sum-exp.
        out: AttentionOut<B>,
    },
}

/// q, k, v as `[B·H, T, D]` and the softmax output `[B·H, T, T]` (`None` under
/// selective recomputation, see [`CausalSelfAttention::recompute_scores`]).
pub struct CompositeSaved<B: Backend> {
    /// Queries `[B·H, T, D]`, in the core's dtype.
    pub q: Tensor<B>,
    /// Keys `[B·H, T, D]`, in the core's dtype.
    pub k: Tensor<B>,
    /// Values `[B·H, T, D]`, in the core's dtype.
    pub v: Tensor<B>,
    /// The attention probabilities `[B·H, T, T]`; `None` when
    /// [`CausalSelfAttention::recompute_scores`] was set, and the backward recomputes
    /// them from `q` and `k`.
    pub att: Option<Tensor<B>>,
    /// The segment ids the forward masked with, so a recomputation masks the same.
    pub segments: Option<Tensor<B>>,
    /// `(B, T)`.
    pub bt: (usize, usize),
}

impl<B: Backend> CausalSelfAttention<B> {
    /// `proj_std` is the output projection's init std (GPT-2 scales it by
    /// `1/sqrt(2·n_layer)` so the residual stream's variance does not grow with depth).
    pub fn new(
        backend: &B,
        name: &str,
        n_embd: usize,
        n_head: usize,
        proj_std: f64,
        dtype: DType,
        rng: &mut impl Rng,
    ) -> Result<Self> {
        if n_head == 0 || !n_embd.is_multiple_of(n_head) {
            return Err(Error::invalid(
                "CausalSelfAttention",
                format!("n_embd {n_embd} is not divisible by n_head {n_head}"),
            ));
        }
        let c_attn = Linear::new(
            backend,
            &format!("{name}.c_attn"),
            n_embd,
            3 * n_embd,
            true,
            0.02,
            dtype,
            rng,
        )?;
        let c_proj = Linear::new(
            backend,
            &format!("{name}.c_proj"),
            n_embd,
            n_embd,
            true,
            proj_std,
            dtype,
            rng,
        )?;
        Self::from_parts(Box::new(c_attn), Box::new(c_proj), n_embd / n_head)
    }

    /// Attention over the heads that `c_attn` projects to, `head_dim` wide each. Checks
    /// that `c_attn`'s output is q, k, v of whole heads and that `c_proj` reads their
    /// concatenation.
    pub fn from_parts(
        c_attn: Box<dyn LinearLayer<B>>,
        c_proj: Box<dyn LinearLayer<B>>,
        head_dim: usize,
    ) -> Result<Self> {
        let qkv = c_attn.out_features();
        if head_dim == 0 || qkv == 0 || !qkv.is_multiple_of(3 * head_dim) {
            return Err(Error::invalid(
                "CausalSelfAttention::from_parts",
                format!("c_attn's {qkv} outputs are not q, k, v of heads of width {head_dim}"),
            ));
        }
        if c_proj.in_features() != qkv / 3 {
            return Err(Error::invalid(
                "CausalSelfAttention::from_parts",
                format!(
                    "c_proj reads {} features but the heads produce {}",
                    c_proj.in_features(),
                    qkv / 3
                ),
            ));
        }
        Ok(CausalSelfAttention {
            c_attn,
            c_proj,
            head_dim,
            core_dtype: None,
            saved: Stash::new(),
            recompute_scores: false,
            segments: None,
            fused: false,
            cache: None,
        })
    }

    /// The number of heads this layer computes (all of them, or a shard's).
    pub fn n_head(&self) -> usize {
        self.c_attn.out_features() / (3 * self.head_dim)
    }

    /// `[B, T, C] -> [B, T, C]`, saving under `mb`.
    pub fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        if x.rank() != 3 {
            return Err(Error::shape(
                "CausalSelfAttention::forward",
                format!("expected [B, T, C], got {}", x.shape()),
            ));
        }
        let (b, t) = (x.dims()[0], x.dims()[1]);
        let (h, d) = (self.n_head(), self.head_dim);
        let qkv = self.c_attn.forward(mb, x)?; // [B, T, 3·H·D]
        let scale = 1.0 / (d as f32).sqrt();
        if let Some(cache) = &self.cache {
            let y = cache.attend(&qkv, h, scale)?.to_dtype(x.dtype())?;
            return self.c_proj.forward(mb, &y);
        }
        if self.uses_fused(x) {
            let out = qkv.attention(h, scale)?;
            let y = out.y.clone();
            self.saved.put(mb, AttentionSaved::Fused { qkv, out });
            return self.c_proj.forward(mb, &y);
        }
        let (mut q, mut k, mut v) = split_qkv(&qkv, h)?;
        if let Some(dt) = self.core_dtype.filter(|&dt| dt != x.dtype()) {
            (q, k, v) = (q.to_dtype(dt)?, k.to_dtype(dt)?, v.to_dtype(dt)?);
        }
        let att = attention_probs(&q, &k, scale, self.segments.as_ref(), h)?; // [BH, T, T]
        let y = merge_heads(&att.matmul(&v)?.to_dtype(x.dtype())?, b, h)?;
        self.saved.put(
            mb,
            AttentionSaved::Composite(CompositeSaved {
                q,
                k,
                v,
                att: (!self.recompute_scores).then_some(att),
                segments: self.segments.clone(),
                bt: (b, t),
            }),
        );
        self.c_proj.forward(mb, &y)
    }

    /// Whether a forward on `x` takes the fused kernel (see [`CausalSelfAttention::fused`]).
    fn uses_fused(&self, x: &Tensor<B>) -> bool {
        let core = self.core_dtype.unwrap_or(x.dtype());
        self.fused
            && self.segments.is_none()
            && core == DType::F32
            && x.dtype() == DType::F32
            && x.backend().has_fused_attention()
    }

    /// `dout: [B, T, C] -> dx: [B, T, C]` for micro-batch `mb`.
    pub fn backward(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        self.backward_parts(mb, dout, false)
    }

    /// [`CausalSelfAttention::backward`] without the projections' weight gradients
    /// (the zero-bubble "B"): they wait in `c_proj` and `c_attn` for
    /// [`CausalSelfAttention::backward_weight`]. The attention core has no weights.
    pub fn backward_input(&mut self, mb: MicroBatch, dout: &Tensor<B>) -> Result<Tensor<B>> {
        self.backward_parts(mb, dout, true)
    }

    /// The projections' weight gradients of micro-batch `mb` (the zero-bubble "W").
    pub fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        self.c_proj.backward_weight(mb)?;
        self.c_attn.backward_weight(mb)
    }

    /// The backward, with the projections' weight gradients deferred when `split`.
    fn backward_parts(
        &mut self,
        mb: MicroBatch,
        dout: &Tensor<B>,
        split: bool,
    ) -> Result<Tensor<B>> {
        let saved = self.saved.take(mb, "CausalSelfAttention")?;
        let (h, d) = (self.n_head(), self.head_dim);
        let scale = 1.0 / (d as f32).sqrt();
        let dy = if split {
            self.c_proj.backward_input(mb, dout)?
        } else {
            self.c_proj.backward(mb, dout)?
        }; // [B, T, H·D]
        let dqkv = match saved {
            AttentionSaved::Fused { qkv, out } => qkv.attention_backward(h, scale, &out, &dy)?,
            AttentionSaved::Composite(s) => composite_backward(s, &dy, h, d)?,
        };
        if split {
            self.c_attn.backward_input(mb, &dqkv)
        } else {
            self.c_attn.backward(mb, &dqkv)
        }
    }
}

/// The composite path's backward, from the output gradient `[B, T, H·D]` to the
/// gradient of `c_attn`'s output `[B, T, 3·H·D]`.
fn composite_backward<B: Backend>(
    s: CompositeSaved<B>,
    dy: &Tensor<B>,
    h: usize,
    d: usize,
) -> Result<Tensor<B>> {
    let (b, t) = s.bt;
    let dy = dy
        .reshape([b, t, h, d])?
        .permute(&[0, 2, 1, 3])?
        .reshape([b * h, t, d])?;
    let scale = 1.0 / (d as f32).sqrt();
    let att = match s.att {
        Some(att) => att,
        // The forward's own ops on the same q and k: the same bits.
        None => attention_probs(&s.q, &s.k, scale, s.segments.as_ref(), h)?,
    };
    // The backward runs in the dtype the forward's core ran in.
    let dy_core = dy.to_dtype(s.v.dtype())?;
    let datt = dy_core.matmul(&s.v.transpose(-1, -2)?)?; // [BH, T, T]
    let dv = att.transpose(-1, -2)?.matmul(&dy_core)?; // [BH, T, D]
    let dscores = att.softmax_backward(&datt, scale)?;
    let dq = dscores.matmul(&s.k)?;
    let dk = dscores.transpose(-1, -2)?.matmul(&s.q)?;
    // Write dq, dk, dv into one [B, T, 3, H, D] gradient through the same permuted
    // view the forward read them from. The three views cover every element, so the
    // buffer need not be zeroed first.
    let mut dqkv = Tensor::alloc(dy.backend(), [b, t, 3, h, d], dy.dtype())?;
    for (i, g) in [dq, dk, dv].iter().enumerate() {
        let view = dqkv
            .permute(&[2, 0, 3, 1, 4])?
            .narrow(0, i, 1)?
            .layout()
            .clone();
        g.to_dtype(dy.dtype())?
            .reshape([1, b, h, t, d])?
            .copy_into_view(&mut dqkv, &view)?;
    }
    dqkv.reshape([b, t, 3 * h * d])
}

/// The composite path's head split: `c_attn`'s output `[B, T, 3·H·D]` as q, k and v,
/// each a dense `[B·H, T, D]` copy (`[B, T, 3, H, D]` permuted to `[3, B, H, T, D]`).
pub fn split_qkv<B: Backend>(
    qkv: &Tensor<B>,
    heads: usize,
) -> Result<(Tensor<B>, Tensor<B>, Tensor<B>)> {
    let dims = qkv.dims();
    if dims.len() != 3 || heads == 0 || !dims[2].is_multiple_of(3 * heads) {
        return Err(Error::shape(
            "split_qkv",
            format!(
                "expected [B, T, 3·H·D] with H = {heads}, got {}",
                qkv.shape()
            ),
        ));
    }
    let (b, t, d) = (dims[0], dims[1], dims[2] / (3 * heads));
    let qkv = qkv
        .reshape([b, t, 3, heads, d])?
        .permute(&[2, 0, 3, 1, 4])?;
    let part = |i: usize| qkv.narrow(0, i, 1)?.reshape([b * heads, t, d]);
    Ok((part(0)?, part(1)?, part(2)?))
}

/// The inverse of [`split_qkv`] for the output: `[B·H, T, D]` -> `[B, T, H·D]`.
pub fn merge_heads<B: Backend>(y: &Tensor<B>, batch: usize, heads: usize) -> Result<Tensor<B>> {
    let dims = y.dims();
    if dims.len() != 3 || dims[0] != batch * heads {
        return Err(Error::shape(
            "merge_heads",
            format!(
                "expected [B·H, T, D] with B = {batch}, H = {heads}, got {}",
                y.shape()
            ),
        ));
    }
    let (t, d) = (dims[1], dims[2]);
    y.reshape([batch, heads, t, d])?
        .permute(&[0, 2, 1, 3])?
        .reshape([batch, t, heads * d])
}

/// `softmax(q·kᵀ · scale)` under the causal mask, and with `segments` (u32 `[B, T]`
/// ids of packed documents) also masked across document boundaries.
pub fn attention_probs<B: Backend>(
    q: &Tensor<B>,
    k: &Tensor<B>,
    scale: f32,
    segments: Option<&Tensor<B>>,
    heads: usize,
) -> Result<Tensor<B>> {
    let scores = q.matmul(&k.transpose(-1, -2)?)?;
    match segments {
        Some(seg) => scores.softmax_segmented(scale, seg, heads),
        None => scores.softmax(scale, true),
    }
}

impl<B: Backend> Module<B> for CausalSelfAttention<B> {
    fn clear_saved(&mut self) {
        self.saved.clear();
        self.c_attn.clear_saved();
        self.c_proj.clear_saved();
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.saved.discard(mb);
        self.c_attn.discard_saved(mb)?;
        self.c_proj.discard_saved(mb)
    }
    fn params(&self) -> Vec<&Param<B>> {
        let mut v = self.c_attn.params();
        v.extend(self.c_proj.params());
        v
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = self.c_attn.params_mut();
        v.extend(self.c_proj.params_mut());
        v
    }
}
