use crate::quant8::QuantizedMoments;
use crate::{
    AdamWParams, AdamWTensors, AttentionSpec, BinaryOp, DType, DeviceLocation, EmbeddingSpec,
    GemmSpec, HostData, LayerNormSpec, Layout, MemoryStats, ReduceOp, Result, ScaleUpdateParams,
    SegmentMask, SoftmaxSpec, UnaryOp, WasmNotSendSync,
};
use std::future::Future;

/// What a backend says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendInfo {
    /// Short name: `cpu`, `wgpu`, `cuda`.
    pub name: &'static str,
    /// The device as `NAME (details)`: the name the driver gives it (or the CPU model),
    /// then brrr's details in parentheses. Callers that look the device up by name
    /// (`brrr train`'s MFU) take the part before the first `" ("`.
    pub device: String,
    /// Float dtypes its kernels compute in.
    pub dtypes: Vec<DType>,
}

/// A device and the kernels that run on it.
///
/// Conventions shared by every method:
/// - Buffers are flat and know their dtype and length ([`Backend::dtype`],
///   [`Backend::len`]). Sizes come in the spec; the backend checks that every buffer is
///   long enough and of the right dtype, and returns an [`Error`](crate::Error) if not.
/// - Float kernels accept f16, bf16, f32 (and f64 where the device has it). Low-precision
///   data is stored as such and computed in f32, as tensor-core hardware does.
/// - Outputs are overwritten, except where a method says it *accumulates* (`+=`):
///   GEMM with `beta`, `axpy`, the embedding backward and LayerNorm's parameter gradients.
///   Accumulating kernels are what make gradient accumulation free.
/// - Calls enqueue work and return. Only [`Backend::read`] (and [`Backend::synchronize`])
///   wait, and they are `async`.
/// - Natively a backend and its buffers are `Send + Sync` ([`WasmNotSendSync`]): one
///   thread per device drives its own backend. In the browser they are not.
pub trait Backend: Clone + WasmNotSendSync + 'static {
    /// A flat device buffer that knows its dtype and length (in elements). Dropping it
    /// frees the memory (or gives it back to the backend's cache).
    type Buffer: std::fmt::Debug + WasmNotSendSync + 'static;

    /// The backend's name, the device and its float dtypes.
    fn info(&self) -> BackendInfo;

    // ---- device identity ------------------------------------------------------------

    /// Which device this handle drives. The default, `NAME:0` from [`Backend::info`],
    /// suits a backend with one device; backends with several override it.
    fn location(&self) -> DeviceLocation {
        DeviceLocation::new(self.info().name, 0)
    }

    /// Whether `other` drives the same device, so that buffers of one can be passed to
    /// the other's kernels. Default: the locations are equal.
    fn same_device(&self, other: &Self) -> bool {
        self.location() == other.location()
    }

    /// A copy of `src` (a buffer of this backend) in a new buffer on `dst`, another
    /// instance of the same backend (another GPU, another simulated CPU device, or the
    /// same device). The default goes through the host: read, then upload. Backends
    /// override it with a direct copy where they have one.
    fn copy_to_device(
        &self,
        src: &Self::Buffer,
        dst: &Self,
    ) -> impl Future<Output = Result<Self::Buffer>> {
        async move {
            let host = self.read(src).await?;
            dst.upload(&host)
        }
    }

    /// Whether kernels accept this dtype (indices i32/u32 are always accepted where an
    /// op takes indices).
    fn supports(&self, dtype: DType) -> bool;

    /// The dtype `buf` was created with.
    fn dtype(&self, buf: &Self::Buffer) -> DType;
    /// Number of elements (not bytes) in `buf`.
    fn len(&self, buf: &Self::Buffer) -> usize;

    // ---- memory -------------------------------------------------------------------

    /// A zero-filled buffer.
    fn zeros(&self, dtype: DType, len: usize) -> Result<Self::Buffer>;
    /// A buffer whose contents are unspecified: for outputs that a kernel overwrites
    /// completely, so that no time goes into zeroing them first. Never read it before
    /// writing it. The default is [`Backend::zeros`].
    fn alloc(&self, dtype: DType, len: usize) -> Result<Self::Buffer> {
        self.zeros(dtype, len)
    }
    /// Copies host data to a new device buffer.
    fn upload(&self, data: &HostData) -> Result<Self::Buffer>;
    /// Overwrites an existing buffer with host data of the same dtype and length.
    fn write(&self, buf: &mut Self::Buffer, data: &HostData) -> Result<()>;
    /// Reads a buffer back. This is the one call that waits for the device.
    fn read(&self, buf: &Self::Buffer) -> impl Future<Output = Result<HostData>>;
    /// Waits until all enqueued work is done (for timing).
    fn synchronize(&self) -> impl Future<Output = Result<()>>;

    /// Bytes held by this device's live buffers, their peak and their number. A backend
    /// that does not count returns zeros (the default).
    fn memory_stats(&self) -> MemoryStats {
        MemoryStats::default()
    }
    /// Starts a new peak: [`MemoryStats::peak_bytes`] becomes the bytes in use now.
    fn reset_peak_memory(&self) {}

    /// Whether this backend records named regions ([`Backend::begin_region`]); callers
    /// ask first so that they build a region's name only when it is kept. The default
    /// is `false`: only a profiling wrapper records them.
    fn records_regions(&self) -> bool {
        false
    }
    /// Opens a named region of work (a layer's forward or backward) on this backend's
    /// timeline, as PyTorch's `record_function` or an NVTX range does; the ops issued
    /// until the matching [`Backend::end_region`] belong to it. Regions nest. The
    /// default does nothing.
    fn begin_region(&self, name: &str) {
        let _ = name;
    }
    /// Closes the region opened last by [`Backend::begin_region`]. The default does
    /// nothing.
    fn end_region(&self) {}

    /// Sets every element to `value` (converted to the buffer's dtype).
    fn fill(&self, buf: &mut Self::Buffer, value: f64) -> Result<()>;
    /// Copies the view `src_layout` of `src` into the view `dst_layout` of `dst` (same
    /// dtype, same shape), element by element in row-major order of the shape. With a
    /// contiguous `dst_layout` this makes a transpose or a broadcast real; with a strided
    /// one it writes into part of a larger tensor (concatenation, assembling the fused
    /// q/k/v gradient). `dst_layout` must not map two elements to one place.
    fn copy_strided(
        &self,
        src: &Self::Buffer,
        src_layout: &Layout,
        dst: &mut Self::Buffer,
        dst_layout: &Layout,
    ) -> Result<()>;
    /// Converts `src` into `dst`'s dtype, element by element: to a float dtype with
    /// round-to-nearest-even, to an integer dtype truncating toward zero and saturating.
    fn cast(&self, src: &Self::Buffer, dst: &mut Self::Buffer) -> Result<()>;

    // ---- dense algebra ------------------------------------------------------------

    /// Batched GEMM; see [`GemmSpec`]. A and B share one dtype; C has that dtype too, or
    /// is f32 when A and B are f16 or bf16 (a low-precision product accumulated into an
    /// f32 gradient or master buffer, with `beta`). Accumulation is f32 (f64 for f64)
    /// either way; a 16-bit C is rounded once at the end, an f32 C not at all. Sizes are
    /// checked with [`GemmSpec::required_lens`], so a spec whose extents overflow is an
    /// error.
    fn gemm(
        &self,
        spec: &GemmSpec,
        a: &Self::Buffer,
        b: &Self::Buffer,
        c: &mut Self::Buffer,
    ) -> Result<()>;

    // ---- element-wise ---------------------------------------------------------------

    /// `out[i] = op(x[i])` for the first `out.len()` elements.
    fn unary(&self, op: UnaryOp, x: &Self::Buffer, out: &mut Self::Buffer) -> Result<()>;
    /// `out = a op b` where both layouts already have `out`'s shape (broadcast
    /// dimensions carry stride 0). `out` is contiguous.
    fn binary(
        &self,
        op: BinaryOp,
        a: &Self::Buffer,
        a_layout: &Layout,
        b: &Self::Buffer,
        b_layout: &Layout,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// `y += alpha * x` over the whole of `y` (`y_offset = None`), or over `x.len()`
    /// elements of `y` from `y_offset` (a part of a flat buffer); see [`axpy_range`].
    ///
    /// [`axpy_range`]: crate::axpy_range
    fn axpy(
        &self,
        alpha: f32,
        x: &Self::Buffer,
        y: &mut Self::Buffer,
        y_offset: Option<usize>,
    ) -> Result<()>;

    // ---- reductions -------------------------------------------------------------------

    /// `out[o, i] = op_r x[o, r, i]` for a contiguous `[outer, n, inner]` view of `x`.
    fn reduce(
        &self,
        op: ReduceOp,
        x: &Self::Buffer,
        outer: usize,
        n: usize,
        inner: usize,
        out: &mut Self::Buffer,
    ) -> Result<()>;

    /// Whether [`Backend::sum_squares`] is implemented. Callers that ask (the gradient
    /// norm) otherwise square into a temporary and [`Backend::reduce`] it.
    fn has_fused_sum_squares(&self) -> bool {
        false
    }
    /// `out[0] = Σ x[offset + i]²` over `len` elements, each widened to f32 before it
    /// is squared; `out` is f32 with at least one element, an empty range sums to 0.
    /// Bitwise what squaring `x` into a temporary and reducing it with
    /// [`ReduceOp::Sum`] gives on the same backend, without the temporary (which for a
    /// gradient norm is the size of the largest gradient). The default is an error.
    fn sum_squares(
        &self,
        x: &Self::Buffer,
        offset: usize,
        len: usize,
        out: &mut Self::Buffer,
    ) -> Result<()> {
        let _ = (x, offset, len, out);
        Err(not_implemented(self, "sum_squares"))
    }

    // ---- neural-network kernels ---------------------------------------------------

    /// Row-wise (optionally causal, scaled) softmax; see [`SoftmaxSpec`].
    fn softmax(&self, spec: &SoftmaxSpec, x: &Self::Buffer, y: &mut Self::Buffer) -> Result<()>;
    /// Causal softmax with a document mask ([`SegmentMask`]): packed documents do not
    /// attend to each other. `segments` is u32 `[batch, cols]`. Its gradient is
    /// [`Backend::softmax_backward`] unchanged, since masked entries have `y = 0`.
    /// Every backend of this workspace implements it; the default is an error.
    fn softmax_segmented(
        &self,
        spec: &SoftmaxSpec,
        mask: &SegmentMask,
        segments: &Self::Buffer,
        x: &Self::Buffer,
        y: &mut Self::Buffer,
    ) -> Result<()> {
        let _ = (spec, mask, segments, x, y);
        Err(not_implemented(self, "softmax_segmented"))
    }
    /// Gradient of [`Backend::softmax`] with respect to its input `x`, from its output `y`:
    /// `dx = scale * y ⊙ (dy - Σ_j dy_j y_j)`. Masked entries have `y = 0` and get 0.
    fn softmax_backward(
        &self,
        spec: &SoftmaxSpec,
        y: &Self::Buffer,
        dy: &Self::Buffer,
        dx: &mut Self::Buffer,
    ) -> Result<()>;

    /// Whether [`Backend::attention`] and [`Backend::attention_backward`] are
    /// implemented. Layers ask before choosing them over the composite path (GEMMs and
    /// a softmax kernel).
    fn has_fused_attention(&self) -> bool {
        false
    }
    /// Fused causal self-attention, see [`AttentionSpec`]: reads `qkv` (`[B, T, 3, H, D]`)
    /// in place, overwrites `y` (`[B, T, H, D]`, `qkv`'s dtype) and `lse` (f32
    /// `[B, T, H]`). No `[T, T]` matrix is stored. The default is an error.
    fn attention(
        &self,
        spec: &AttentionSpec,
        qkv: &Self::Buffer,
        y: &mut Self::Buffer,
        lse: &mut Self::Buffer,
    ) -> Result<()> {
        let _ = (spec, qkv, y, lse);
        Err(not_implemented(self, "attention"))
    }
    /// Gradient of [`Backend::attention`]: from the forward's `qkv`, `y`, `lse` and the
    /// output gradient `dy` (`[B, T, H, D]`), overwrites `dqkv` (`[B, T, 3, H, D]`) with
    /// the gradients of q, k and v. The softmax is recomputed from `lse`. The default is
    /// an error.
    fn attention_backward(
        &self,
        spec: &AttentionSpec,
        qkv: &Self::Buffer,
        y: &Self::Buffer,
        lse: &Self::Buffer,
        dy: &Self::Buffer,
        dqkv: &mut Self::Buffer,
    ) -> Result<()> {
        let _ = (spec, qkv, y, lse, dy, dqkv);
        Err(not_implemented(self, "attention_backward"))
    }

    /// LayerNorm forward; also writes per-row `mean` and `rstd` (f32) for the backward.
    #[allow(clippy::too_many_arguments)]
    fn layernorm(
        &self,
        spec: &LayerNormSpec,
        x: &Self::Buffer,
        gamma: &Self::Buffer,
        beta: &Self::Buffer,
        y: &mut Self::Buffer,
        mean: &mut Self::Buffer,
        rstd: &mut Self::Buffer,
    ) -> Result<()>;
    /// LayerNorm backward: overwrites `dx`, *accumulates* into `dgamma` and `dbeta`.
    #[allow(clippy::too_many_arguments)]
    fn layernorm_backward(
        &self,
        spec: &LayerNormSpec,
        dy: &Self::Buffer,
        x: &Self::Buffer,
        gamma: &Self::Buffer,
        mean: &Self::Buffer,
        rstd: &Self::Buffer,
        dx: &mut Self::Buffer,
        dgamma: &mut Self::Buffer,
        dbeta: &mut Self::Buffer,
    ) -> Result<()>;

    /// GELU, tanh approximation as in GPT-2 (Hendrycks & Gimpel 2016, eq. in §2):
    /// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
    fn gelu(&self, x: &Self::Buffer, y: &mut Self::Buffer) -> Result<()>;
    /// `dx = dy * gelu'(x)`.
    fn gelu_backward(
        &self,
        x: &Self::Buffer,
        dy: &Self::Buffer,
        dx: &mut Self::Buffer,
    ) -> Result<()>;

    /// `out[i, :] = table[ids[i], :]` for `ids` (u32 or i32) and a `[rows, dim]` table
    /// where `spec` puts it (the whole buffer, or a part of a flat one).
    /// An id out of range is an error (checked where the backend can; on a GPU the
    /// kernel writes zeros instead and the tensor layer checks ids on upload).
    fn embedding(
        &self,
        spec: &EmbeddingSpec,
        ids: &Self::Buffer,
        table: &Self::Buffer,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// `table[ids[i], :] = rows[i, :]`: each row written where its id says, the inverse
    /// of [`Backend::embedding`]. A paged KV cache stores a step's new keys and values
    /// this way, one launch for the whole batch. `table` is laid out as `spec` says;
    /// rows of the table no id names are untouched. Ids must be distinct (a repeated id
    /// is an error where the backend can check; on a GPU which row lands is unspecified)
    /// and in range (an error where the backend can check; a GPU skips the row).
    fn scatter_rows(
        &self,
        spec: &EmbeddingSpec,
        ids: &Self::Buffer,
        rows: &Self::Buffer,
        table: &mut Self::Buffer,
    ) -> Result<()>;
    /// `dtable[ids[i], :] += dout[i, :]`: a scatter-add, since an id may repeat.
    /// `dtable` is laid out as `spec` says the table is.
    fn embedding_backward(
        &self,
        spec: &EmbeddingSpec,
        ids: &Self::Buffer,
        dout: &Self::Buffer,
        dtable: &mut Self::Buffer,
    ) -> Result<()>;

    /// Per-row cross-entropy of `[rows, vocab]` logits against i32 `targets`:
    /// `loss[r] = logsumexp(logits[r]) - logits[r, t]`. A negative target is ignored
    /// (loss 0), which is how padding is masked. `losses` (and `dlosses` in the
    /// backward) are f32, or f64 when the logits are f64 (for gradient checks): a loss
    /// is never stored in 16 bits.
    fn cross_entropy(
        &self,
        logits: &Self::Buffer,
        targets: &Self::Buffer,
        vocab: usize,
        losses: &mut Self::Buffer,
    ) -> Result<()>;
    /// `dlogits[r] = (softmax(logits[r]) - onehot(t_r)) * dlosses[r]` (0 for ignored rows).
    fn cross_entropy_backward(
        &self,
        logits: &Self::Buffer,
        targets: &Self::Buffer,
        dlosses: &Self::Buffer,
        vocab: usize,
        dlogits: &mut Self::Buffer,
    ) -> Result<()>;

    // ---- optimizer and mixed precision --------------------------------------------

    /// One fused AdamW step on a parameter, in place; see [`AdamWParams`]. `m` and `v`
    /// are f32. `inv_scale` (f32, one element), when given, multiplies the gradient on
    /// device; `found_inf` (f32, one element), when given and non-zero, skips the update
    /// entirely, as a GradScaler-managed step does, without a host round trip.
    #[allow(clippy::too_many_arguments)]
    fn adamw(
        &self,
        params: &AdamWParams,
        param: &mut Self::Buffer,
        grad: &Self::Buffer,
        m: &mut Self::Buffer,
        v: &mut Self::Buffer,
        inv_scale: Option<&Self::Buffer>,
        found_inf: Option<&Self::Buffer>,
    ) -> Result<()>;

    /// AdamW on an f32 master copy of a parameter that also exists in a lower compute
    /// precision, as llm.c keeps it (its `adamw_update`; llm.c rounds the copy
    /// stochastically, brrr to nearest even, so runs stay deterministic): `master` (f32)
    /// is updated exactly
    /// as [`Backend::adamw`] updates an f32 parameter, and the new value, rounded once to
    /// `param_copy`'s dtype (f16, bf16 or f32, round-to-nearest-even), is written to
    /// `param_copy` in the same pass, so the compute copy never drifts from the master.
    /// `grad` is f32 or `param_copy`'s dtype; `m`, `v`, `inv_scale` and `found_inf` are
    /// as in [`Backend::adamw`]. A step skipped by `found_inf` writes nothing at all.
    #[allow(clippy::too_many_arguments)]
    fn adamw_master(
        &self,
        params: &AdamWParams,
        master: &mut Self::Buffer,
        param_copy: &mut Self::Buffer,
        grad: &Self::Buffer,
        m: &mut Self::Buffer,
        v: &mut Self::Buffer,
        inv_scale: Option<&Self::Buffer>,
        found_inf: Option<&Self::Buffer>,
    ) -> Result<()>;

    /// AdamW with 8-bit block-wise quantised moments (Dettmers et al. 2022; see
    /// [`crate::quant8`]). For each block of [`Q8_BLOCK`](crate::quant8::Q8_BLOCK)
    /// values: decode the block's `m` and `v` (`map[code] · absmax`), update them and the
    /// parameter exactly as [`Backend::adamw`] does (in f32; the parameter moves with
    /// the unquantised new moments), then store each moment's new block absmax (the
    /// largest magnitude) and re-encode every value to its nearest code
    /// ([`crate::quant8::encode`]). `param` and `grad` are f16, bf16 or f32 of one dtype;
    /// `params.range` selects their elements as in [`Backend::adamw`], while the state
    /// describes only those elements (its element `j` is the range's `j`-th): a segment
    /// of a flat buffer has a state of its own. Codes past the range's end in the last
    /// word are written as the code of 0. `inv_scale` and `found_inf` are as in
    /// [`Backend::adamw`]. A backend that does not implement it returns an error.
    fn adamw_8bit(
        &self,
        params: &AdamWParams,
        param: &mut Self::Buffer,
        grad: &Self::Buffer,
        state: &mut QuantizedMoments<'_, Self::Buffer>,
        inv_scale: Option<&Self::Buffer>,
        found_inf: Option<&Self::Buffer>,
    ) -> Result<()> {
        let _ = (params, param, grad, state, inv_scale, found_inf);
        Err(not_implemented(self, "adamw_8bit"))
    }

    /// The clip factor of `torch.nn.utils.clip_grad_norm_`, without a host read: from the
    /// one-element f32 sum of squared gradients `sumsq`, writes `norm = sqrt(sumsq)` and
    /// `coef = min(1, max_norm / (norm + 1e-6))`, both one-element f32. A NaN norm gives
    /// `coef = 1` (the non-NaN operand of the `min`, as `f64::min` and C's `fmin` pick).
    /// brrr-cpu (and CUDA) compute in f64 from the f32 sum and round each result once;
    /// WGSL has no f64 and computes in f32. `coef` is meant as [`Backend::adamw`]'s
    /// `inv_scale`: with `grad_scale = 1` that is bitwise the same update as passing the
    /// factor as `grad_scale`. `max_norm` must be positive.
    fn clip_coefficient(
        &self,
        sumsq: &Self::Buffer,
        max_norm: f64,
        norm: &mut Self::Buffer,
        coef: &mut Self::Buffer,
    ) -> Result<()>;

    /// `grads *= inv_scale[0]` in place, and sets `found_inf[0] = 1.0` if any element
    /// is not finite (never clears it). PyTorch's
    /// `_amp_foreach_non_finite_check_and_unscale_`, one buffer at a time.
    fn unscale_check_finite(
        &self,
        grads: &mut Self::Buffer,
        inv_scale: &Self::Buffer,
        found_inf: &mut Self::Buffer,
    ) -> Result<()>;

    /// Updates the loss scale (f32, one element) and growth tracker (i32,
    /// [`ScaleUpdateParams::tracker_len`] elements: two with hysteresis) on device from
    /// `found_inf`; see [`ScaleUpdateParams`].
    fn update_loss_scale(
        &self,
        params: &ScaleUpdateParams,
        scale: &mut Self::Buffer,
        growth_tracker: &mut Self::Buffer,
        found_inf: &Self::Buffer,
    ) -> Result<()>;

    // ---- multi-tensor ops ---------------------------------------------------------

    // A model's parameters are many buffers (148 in GPT-2 124M), and the three optimizer
    // phases of a step (zeroing the gradients, their norm, AdamW) do the same small
    // amount of work on each: one kernel per buffer is then 148 launches per phase,
    // each costing more host time than the GPU spends on it. These take the whole list
    // and a backend may do each in one launch (apex's `multi_tensor_apply`, PyTorch's
    // `_foreach_` kernels). The defaults, `crate::multi_tensor`'s `*_each`, loop over
    // the one-buffer op and are the reference semantics.

    /// Sets every element of every buffer in `bufs` to `value`: [`Backend::fill`] on
    /// each (zeroing a model's gradients before a step).
    fn multi_tensor_fill(&self, bufs: &mut [&mut Self::Buffer], value: f64) -> Result<()> {
        crate::multi_tensor::fill_each(self, bufs, value)
    }

    /// `out[0] = Σ_t Σ_i xs[t][i]²` (f32, one element or more): the squared L2 norm of
    /// a list of float buffers, each widened to f32. Reference semantics: each buffer's
    /// sum of squares into a one-element f32 (fused or not, see
    /// [`crate::multi_tensor::sum_squares_each`]), added to the running total in list
    /// order; a backend that fuses the list may add in another (fixed) order, so results
    /// agree to rounding, not bitwise.
    fn multi_tensor_sum_squares(&self, xs: &[&Self::Buffer], out: &mut Self::Buffer) -> Result<()> {
        crate::multi_tensor::sum_squares_each(self, xs, out)
    }

    /// AdamW on a list of parameters: for each, [`Backend::adamw`] (or
    /// [`Backend::adamw_master`] when it has a master) with `params`, its weight decay
    /// zeroed where [`AdamWTensors::decay`] is false. `params.range` must be `None`
    /// (whole buffers). Bitwise the one-parameter ops: AdamW is elementwise.
    fn multi_tensor_adamw(
        &self,
        params: &AdamWParams,
        tensors: &mut [AdamWTensors<'_, Self::Buffer>],
        inv_scale: Option<&Self::Buffer>,
        found_inf: Option<&Self::Buffer>,
    ) -> Result<()> {
        crate::multi_tensor::adamw_each(self, params, tensors, inv_scale, found_inf)
    }
}

/// The error of an optional op's default: `op` is not implemented by `backend`.
fn not_implemented<B: Backend>(backend: &B, op: &'static str) -> crate::Error {
    crate::Error::invalid(
        op,
        format!("not implemented by the {} backend", backend.info().name),
    )
}
