//! Small descriptions of kernel launches. They carry sizes and hyper-parameters only;
//! buffers are passed separately so that the borrow checker sees which are written.

use crate::{Error, Result};
use std::ops::Range;

/// `C[b] = alpha * op(A[b]) · op(B[b]) + beta * C[b]` for `b` in `0..batch`.
///
/// All matrices are row-major and dense. `C[b]` is `m × n`. `A[b]` is stored `m × k`,
/// or `k × m` when `trans_a` (so `op(A) = Aᵀ`); `B[b]` is stored `k × n`, or `n × k`
/// when `trans_b`. Matrix `b` of A starts at element `b * stride_a` (likewise B and C);
/// a stride of 0 reuses one matrix for the whole batch (a weight shared across a batch).
///
/// Each operand may start part-way into its buffer: matrix `b` of A starts at element
/// `offset_a + b * stride_a` (likewise B and C). This is candle's `start_offset` and a
/// pointer offset in BLAS: a parameter or gradient that lives in a flat buffer beside
/// others (a DDP bucket, a ZeRO shard, llm.c's one `params_memory`) is used in place,
/// without a copy. The offsets are 0 unless set with [`GemmSpec::offsets`].
///
/// `beta = 1` accumulates into C, which is how parameter gradients add up over
/// micro-batches without an extra kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmSpec {
    /// Number of independent products.
    pub batch: usize,
    /// Rows of `op(A)` and of C.
    pub m: usize,
    /// Columns of `op(B)` and of C.
    pub n: usize,
    /// The contracted dimension: columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// A is stored transposed (`k × m`) and used as `Aᵀ`.
    pub trans_a: bool,
    /// B is stored transposed (`n × k`) and used as `Bᵀ`.
    pub trans_b: bool,
    /// Factor on the product.
    pub alpha: f32,
    /// Factor on C's previous contents: 0 overwrites C, 1 accumulates into it.
    pub beta: f32,
    /// Elements between consecutive matrices of A (0: one A for the whole batch).
    pub stride_a: usize,
    /// Elements between consecutive matrices of B (0: one B for the whole batch).
    pub stride_b: usize,
    /// Elements between consecutive matrices of C.
    pub stride_c: usize,
    /// Element where A's first matrix starts in its buffer.
    pub offset_a: usize,
    /// Element where B's first matrix starts in its buffer.
    pub offset_b: usize,
    /// Element where C's first matrix starts in its buffer.
    pub offset_c: usize,
}

impl GemmSpec {
    /// A single `m × k` by `k × n` product, `alpha = 1`, `beta = 0`.
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        GemmSpec {
            batch: 1,
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
            alpha: 1.0,
            beta: 0.0,
            // Saturating: an overflowing size is reported by `required_lens`, not here.
            stride_a: m.saturating_mul(k),
            stride_b: k.saturating_mul(n),
            stride_c: m.saturating_mul(n),
            offset_a: 0,
            offset_b: 0,
            offset_c: 0,
        }
    }

    /// `batch` independent products with densely packed operands.
    pub fn batched(batch: usize, m: usize, n: usize, k: usize) -> Self {
        GemmSpec {
            batch,
            ..GemmSpec::new(m, n, k)
        }
    }

    /// Sets [`GemmSpec::trans_a`] (strides are unchanged: `m × k` elements either way).
    pub fn trans_a(mut self, t: bool) -> Self {
        self.trans_a = t;
        self
    }
    /// Sets [`GemmSpec::trans_b`] (strides are unchanged: `k × n` elements either way).
    pub fn trans_b(mut self, t: bool) -> Self {
        self.trans_b = t;
        self
    }
    /// Sets the factor on the product.
    pub fn alpha(mut self, a: f32) -> Self {
        self.alpha = a;
        self
    }
    /// Sets the factor on C's previous contents (1 to accumulate).
    pub fn beta(mut self, b: f32) -> Self {
        self.beta = b;
        self
    }
    /// Where A, B and C start in their buffers (elements).
    pub fn offsets(mut self, a: usize, b: usize, c: usize) -> Self {
        self.offset_a = a;
        self.offset_b = b;
        self.offset_c = c;
        self
    }

    /// Floating-point operations: one multiply and one add per term. An error when the
    /// count does not fit a `u64` (the sizes come from callers; a wrapped count would
    /// report a tiny GEMM).
    pub fn flops(&self) -> Result<u64> {
        const OP: &str = "gemm";
        let terms = [self.batch, self.m, self.n, self.k]
            .into_iter()
            .try_fold(2u64, |acc, d| acc.checked_mul(d as u64));
        terms.ok_or_else(|| {
            Error::invalid(
                OP,
                format!(
                    "flop count 2 × batch {} × m {} × n {} × k {} overflows u64",
                    self.batch, self.m, self.n, self.k
                ),
            )
        })
    }

    /// Elements each operand (A, B, C) must hold: `offset + (batch - 1) * stride +
    /// rows * cols`, or 0 when the batch or the matrix is empty (an empty operand is never
    /// touched, wherever it starts). Checked: the spec comes from the caller, and a
    /// wrapped length would pass every backend's length check and let a kernel read or
    /// write out of bounds, so an overflow is an error naming the operand.
    pub fn required_lens(&self) -> Result<(usize, usize, usize)> {
        let (a, b, c) = self.operand_ranges()?;
        Ok((a.end, b.end, c.end))
    }

    /// The elements of each buffer (A, B, C) the product reads or writes, from the
    /// first matrix's start to one past the last one's end (`0..0` when empty); checked
    /// as [`GemmSpec::required_lens`].
    pub fn operand_ranges(&self) -> Result<(Range<usize>, Range<usize>, Range<usize>)> {
        Ok((
            self.operand_range("A", self.offset_a, self.stride_a, self.m, self.k)?,
            self.operand_range("B", self.offset_b, self.stride_b, self.k, self.n)?,
            self.operand_range("C", self.offset_c, self.stride_c, self.m, self.n)?,
        ))
    }

    fn operand_range(
        &self,
        operand: &str,
        offset: usize,
        stride: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Range<usize>> {
        const OP: &str = "gemm";
        let size = rows.checked_mul(cols).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("{operand} is {rows} × {cols} elements, which overflows usize"),
            )
        })?;
        if self.batch == 0 || size == 0 {
            return Ok(0..0);
        }
        let end = (self.batch - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(size))
            .and_then(|x| x.checked_add(offset))
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "{operand}: offset {offset} + batch {} × stride {stride} + {size} \
                         elements overflows usize",
                        self.batch
                    ),
                )
            })?;
        Ok(offset..end)
    }
}

/// Element-wise functions of one input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    /// `-x`.
    Neg,
    /// `e^x`.
    Exp,
    /// Natural logarithm `ln x` (`-inf` at 0, NaN below).
    Log,
    /// `√x`.
    Sqrt,
    /// `1 / √x`.
    Rsqrt,
    /// `|x|`.
    Abs,
    /// `x²`.
    Square,
    /// `1 / x`.
    Recip,
    /// `max(x, 0)`.
    Relu,
    /// `tanh x`.
    Tanh,
    /// The logistic function `1 / (1 + e^-x)`.
    Sigmoid,
    /// `x * mul + add`.
    Affine {
        /// Factor on `x`.
        mul: f32,
        /// Added after the multiplication.
        add: f32,
    },
    /// `min(max(x, lo), hi)`.
    Clamp {
        /// Lower bound.
        lo: f32,
        /// Upper bound; should be `>= lo`.
        hi: f32,
    },
}

impl UnaryOp {
    /// The reference definition, in f64. Every backend must agree with it.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Abs => x.abs(),
            UnaryOp::Square => x * x,
            UnaryOp::Recip => 1.0 / x,
            UnaryOp::Relu => x.max(0.0),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Affine { mul, add } => x * f64::from(mul) + f64::from(add),
            UnaryOp::Clamp { lo, hi } => x.max(f64::from(lo)).min(f64::from(hi)),
        }
    }
}

/// Element-wise functions of two inputs (broadcast by their layouts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// The larger of `a` and `b`.
    Max,
    /// The smaller of `a` and `b`.
    Min,
}

impl BinaryOp {
    /// The reference definition, in f64. Every backend must agree with it.
    pub fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Max => a.max(b),
            BinaryOp::Min => a.min(b),
        }
    }
}

/// Reductions over the middle axis of a contiguous `[outer, n, inner]` view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum of the `n` elements (0 when `n = 0`).
    Sum,
    /// Sum divided by `n`.
    Mean,
    /// Largest element.
    Max,
    /// Smallest element.
    Min,
}

/// Row-wise softmax of a contiguous `[rows, cols]` matrix:
/// `y = softmax(scale * x)` along each row.
///
/// With `causal`, the matrix is a stack of `cols × cols` attention score blocks and
/// row `r` may only see columns `j <= r % cols` (the others get probability 0): the
/// mask of a decoder (Vaswani et al. 2017, §3.2.3), applied inside the kernel so no
/// mask tensor is ever stored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftmaxSpec {
    /// Number of rows; with `causal`, normally a multiple of `cols` (whole score
    /// blocks), since row `r`'s query position is `r % cols`.
    pub rows: usize,
    /// Row length: the axis the softmax normalises over.
    pub cols: usize,
    /// Factor applied to `x` before the softmax (`1/sqrt(head_dim)` for attention
    /// scores); 1 for a plain softmax.
    pub scale: f32,
    /// Apply the causal mask described above.
    pub causal: bool,
}

/// The document mask of packed sequences, on top of a causal [`SoftmaxSpec`]
/// (`rows = batch · heads · cols`, blocks of `cols × cols` scores ordered batch-major).
///
/// Row `r` is query `i = r % cols` of block `r / cols`, which belongs to sequence
/// `b = r / cols / heads`; it may see column `j` only if `j <= i` and
/// `segments[b·cols + j] == segments[b·cols + i]` (`segments` is u32 `[batch, cols]`,
/// one id per token, equal within a document). A token therefore never attends across a
/// document boundary of a packed row. The mask is applied inside the kernel from the
/// `batch · cols` ids; the `[cols, cols]` mask itself is never stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentMask {
    /// Attention heads per sequence: consecutive score blocks of one sequence.
    pub heads: usize,
}

impl SegmentMask {
    /// Checks the sizes against `spec`; returns the number of sequences (`batch`).
    /// An [`Error::Invalid`] when `spec` is not causal or its rows are not whole
    /// `heads × cols × cols` blocks (including `heads` or `cols` of 0).
    pub fn sequences(&self, spec: &SoftmaxSpec) -> crate::Result<usize> {
        let op = "softmax_segmented";
        if !spec.causal {
            return Err(crate::Error::invalid(
                op,
                "the document mask needs a causal spec",
            ));
        }
        let block = spec.cols.checked_mul(self.heads).filter(|&b| b > 0);
        match block {
            Some(b) if spec.rows.is_multiple_of(b) => Ok(spec.rows / b),
            _ => Err(crate::Error::invalid(
                op,
                format!(
                    "{} rows are not whole [heads={}, T={}, T] score blocks",
                    spec.rows, self.heads, spec.cols
                ),
            )),
        }
    }
}

/// LayerNorm over the last axis of a contiguous `[rows, cols]` matrix
/// (Ba et al. 2016): `y = (x - mean) * rstd * gamma + beta`, `rstd = 1/sqrt(var + eps)`.
///
/// `gamma` is elements `gamma_offset .. gamma_offset + cols` of its buffer and `beta`
/// elements `beta_offset ..` of its own, so both can be views into one flat parameter
/// buffer (0 and 0 for buffers of their own). The backward writes `dgamma` and `dbeta`
/// at the same offsets in theirs: gradients laid out like the parameters, as llm.c's
/// flat buffers are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNormSpec {
    /// Number of rows (tokens), each normalised on its own.
    pub rows: usize,
    /// Row length (the model width): the axis of the mean and variance, and the length
    /// of `gamma` and `beta`.
    pub cols: usize,
    /// Added to the variance before the square root, for stability (GPT-2 uses 1e-5).
    pub eps: f32,
    /// Element where `gamma` (and `dgamma`) starts in its buffer.
    pub gamma_offset: usize,
    /// Element where `beta` (and `dbeta`) starts in its buffer.
    pub beta_offset: usize,
}

impl LayerNormSpec {
    /// `gamma` and `beta` at the start of their buffers.
    pub fn new(rows: usize, cols: usize, eps: f32) -> Self {
        LayerNormSpec {
            rows,
            cols,
            eps,
            gamma_offset: 0,
            beta_offset: 0,
        }
    }

    /// `gamma` (and `dgamma`) at `gamma`, `beta` (and `dbeta`) at `beta`, in elements.
    pub fn params_at(mut self, gamma: usize, beta: usize) -> Self {
        self.gamma_offset = gamma;
        self.beta_offset = beta;
        self
    }

    /// The elements `gamma` and `beta` occupy in their buffers (`dgamma` and `dbeta`
    /// likewise); an error naming `op` when an end overflows.
    pub fn param_ranges(&self, op: &'static str) -> Result<(Range<usize>, Range<usize>)> {
        let gamma = ElemRange::new(self.gamma_offset, self.cols);
        let beta = ElemRange::new(self.beta_offset, self.cols);
        Ok((gamma.offset..gamma.end(op)?, beta.offset..beta.end(op)?))
    }
}

/// An embedding lookup's table ([`Backend::embedding`]): `dim` columns, in the whole
/// buffer (`table: None`, whose length must be whole rows) or in elements
/// `table.offset .. table.offset + table.len` of it (a view into a flat parameter
/// buffer; `table.len` must be whole rows). The backward's `dtable` has the same layout.
///
/// [`Backend::embedding`]: crate::Backend::embedding
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddingSpec {
    /// Elements per row (the embedding width); must be positive.
    pub dim: usize,
    /// Where the table lies in its buffer: `None` for the whole buffer.
    pub table: Option<ElemRange>,
}

impl EmbeddingSpec {
    /// A table that is the whole buffer.
    pub fn new(dim: usize) -> Self {
        EmbeddingSpec { dim, table: None }
    }

    /// A table of `rows` rows starting at element `offset` of its buffer.
    pub fn table_at(mut self, offset: usize, rows: usize) -> Self {
        self.table = Some(ElemRange::new(offset, rows.saturating_mul(self.dim)));
        self
    }

    /// The table's elements in a buffer of `buffer_len` elements and its number of
    /// rows, checked: `dim > 0`, whole rows, inside the buffer. Errors name `op`.
    pub fn table_range(
        &self,
        op: &'static str,
        buffer_len: usize,
    ) -> Result<(Range<usize>, usize)> {
        if self.dim == 0 {
            return Err(Error::invalid(op, "dim must be positive"));
        }
        let range = match self.table {
            None => 0..buffer_len,
            Some(r) => r.offset..r.end(op)?,
        };
        let len = range.len();
        if !len.is_multiple_of(self.dim) {
            return Err(Error::shape(
                op,
                format!(
                    "the table has {len} elements, not a whole number of rows of dim {}",
                    self.dim
                ),
            ));
        }
        if range.end > buffer_len {
            return Err(Error::shape(
                op,
                format!(
                    "the table ends at element {} of a buffer of {buffer_len}",
                    range.end
                ),
            ));
        }
        Ok((range, len / self.dim))
    }
}

/// Where `axpy` adds into `y` ([`Backend::axpy`]): all of `y` (`None`; `x` holds at
/// least as many elements) or `x_len` elements of `y` from `offset` (`Some(offset)`,
/// one part of a flat gradient buffer). Returns the range of `y`, checked against
/// `y_len`; element `i` of the range adds `x[i]`.
///
/// [`Backend::axpy`]: crate::Backend::axpy
pub fn axpy_range(
    op: &'static str,
    x_len: usize,
    y_len: usize,
    y_offset: Option<usize>,
) -> Result<Range<usize>> {
    let range = match y_offset {
        None => {
            Error::check_len(op, y_len, x_len)?;
            0..y_len
        }
        Some(o) => o..ElemRange::new(o, x_len).end(op)?,
    };
    if range.end > y_len {
        return Err(Error::shape(
            op,
            format!(
                "{} elements at offset {} reach past y's {y_len}",
                x_len, range.start
            ),
        ));
    }
    Ok(range)
}

/// Causal multi-head self-attention as one op ([`Backend::attention`]), on GPT-2's
/// fused projection output.
///
/// Reference semantics, with `B = batch`, `T = seq`, `H = heads`, `D = head_dim`:
///
/// ```text
/// qkv: [B, T, 3, H, D]   (q, k, v of every head, as c_attn writes them)
/// s[b,h,i,j] = scale · Σ_d q[b,i,h,d] · k[b,j,h,d]      for j <= i (causal)
/// lse[b,i,h] = ln Σ_{j<=i} exp(s[b,h,i,j])               f32 [B, T, H]
/// y[b,i,h,:] = Σ_{j<=i} exp(s[b,h,i,j] - lse[b,i,h]) · v[b,j,h,:]   [B, T, H, D]
/// ```
///
/// `lse` is what the backward needs to recompute the softmax row by row without the
/// `[T, T]` matrix ever being stored (FlashAttention, Dao et al. 2022, §3.1).
///
/// [`Backend::attention`]: crate::Backend::attention
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionSpec {
    /// Sequences, `B`.
    pub batch: usize,
    /// Attention heads, `H`.
    pub heads: usize,
    /// Tokens per sequence, `T`.
    pub seq: usize,
    /// Elements per head, `D` (the model width is `H · D`).
    pub head_dim: usize,
    /// The factor on `q·kᵀ`, usually `1/sqrt(head_dim)`.
    pub scale: f32,
}

impl AttentionSpec {
    /// Element counts of `(qkv, y, lse)`, checked: an error names the sizes when a
    /// count does not fit a `usize` or the scale is not finite.
    pub fn lens(&self, op: &'static str) -> crate::Result<(usize, usize, usize)> {
        if !self.scale.is_finite() {
            return Err(crate::Error::invalid(
                op,
                format!("scale {} is not finite", self.scale),
            ));
        }
        let rows = self.batch.checked_mul(self.seq);
        let y = rows
            .and_then(|r| r.checked_mul(self.heads))
            .and_then(|r| r.checked_mul(self.head_dim));
        let qkv = y.and_then(|y| y.checked_mul(3));
        let lse = rows.and_then(|r| r.checked_mul(self.heads));
        match (qkv, y, lse) {
            (Some(qkv), Some(y), Some(lse)) => Ok((qkv, y, lse)),
            _ => Err(crate::Error::invalid(
                op,
                format!(
                    "[B={}, T={}, 3, H={}, D={}] has more elements than usize can count",
                    self.batch, self.seq, self.heads, self.head_dim
                ),
            )),
        }
    }
}

/// One AdamW update (Loshchilov & Hutter 2019, Algorithm 2), decoupled weight decay:
///
/// ```text
/// g  = grad * grad_scale
/// m  = beta1*m + (1-beta1)*g
/// v  = beta2*v + (1-beta2)*g²
/// m̂  = m / (1 - beta1^step),  v̂ = v / (1 - beta2^step)
/// p  = p - lr * (m̂ / (sqrt(v̂) + eps) + weight_decay * p)
/// ```
///
/// `step` counts from 1. `grad_scale` folds in host-known factors (such as gradient
/// clipping); a device-side factor (the AMP inverse loss scale) is a separate buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWParams {
    /// Learning rate for this step (schedules are applied by the caller).
    pub lr: f32,
    /// Decay of the first-moment average `m`.
    pub beta1: f32,
    /// Decay of the second-moment average `v`.
    pub beta2: f32,
    /// Added to `sqrt(v̂)` in the denominator.
    pub eps: f32,
    /// Decoupled weight decay, multiplied by `lr` (0 for parameters that are not
    /// decayed, such as biases and LayerNorm gains).
    pub weight_decay: f32,
    /// The step number for bias correction, counting from 1 (0 would divide by 0, and
    /// the CPU backend refuses it with an [`Error::Invalid`]).
    pub step: u32,
    /// Host-known factor on the gradient, such as a clip coefficient; 1 for none.
    pub grad_scale: f32,
    /// Which elements to update. `None` (the default): all of `param`, every other
    /// buffer at least as long. `Some(r)`: elements `r` of every buffer alike (`param`,
    /// `grad`, `m`, `v`, and in `adamw_master` the master and its compute copy), the
    /// rest untouched: one parameter's segment of flat buffers, as llm.c updates
    /// parameters inside its one `params_memory` and a ZeRO shard holds several
    /// parameters' segments. Each buffer must hold [`ElemRange::end`] elements.
    pub range: Option<ElemRange>,
}

impl AdamWParams {
    /// The elements an update touches for a `param` of `param_len` elements (see
    /// [`AdamWParams::range`]); an error naming `op` when the range's end overflows.
    pub fn elements(&self, op: &'static str, param_len: usize) -> Result<Range<usize>> {
        match self.range {
            None => Ok(0..param_len),
            Some(r) => Ok(r.offset..r.end(op)?),
        }
    }
}

/// Elements `offset .. offset + len` of a buffer: one part of a flat buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElemRange {
    /// First element.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

impl ElemRange {
    /// Elements `offset .. offset + len`; nothing is checked until [`ElemRange::end`].
    pub fn new(offset: usize, len: usize) -> Self {
        ElemRange { offset, len }
    }

    /// One past the last element: the length a buffer must have. Checked: a range
    /// comes from the caller, and a wrapped end would pass a length check.
    pub fn end(&self, op: &'static str) -> Result<usize> {
        self.offset.checked_add(self.len).ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "range of {} elements at offset {} overflows usize (its end is past usize::MAX)",
                    self.len, self.offset
                ),
            )
        })
    }
}

impl Default for AdamWParams {
    /// PyTorch's `torch.optim.AdamW` defaults.
    fn default() -> Self {
        AdamWParams {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            step: 1,
            grad_scale: 1.0,
            range: None,
        }
    }
}

/// One parameter of a [`Backend::multi_tensor_adamw`](crate::Backend::multi_tensor_adamw)
/// call: the buffers
/// [`Backend::adamw`](crate::Backend::adamw) (no `master`) or
/// [`Backend::adamw_master`](crate::Backend::adamw_master) (with one) takes for it,
/// and whether it decays.
pub struct AdamWTensors<'a, Buf> {
    /// The parameter: updated in place, or, beside a master, its compute copy.
    pub param: &'a mut Buf,
    /// The f32 master copy that takes the update, when the parameter has one.
    pub master: Option<&'a mut Buf>,
    /// The gradient: the parameter's dtype, or f32 beside a master.
    pub grad: &'a Buf,
    /// First moment, f32.
    pub m: &'a mut Buf,
    /// Second moment, f32.
    pub v: &'a mut Buf,
    /// Whether [`AdamWParams::weight_decay`] applies to it (0 is used when not).
    pub decay: bool,
}

/// Dynamic loss-scale update, with the semantics of PyTorch's `_amp_update_scale_`:
/// on an overflow multiply the scale by `backoff_factor` and reset the growth tracker;
/// otherwise count the clean step, and after `growth_interval` of them multiply the
/// scale by `growth_factor` (only if the grown scale is finite).
///
/// Two options as Megatron-LM's `DynamicGradScaler` has them
/// (`megatron/core/optimizer/grad_scaler.py`): `hysteresis` overflows are tolerated
/// before the scale backs off (the step is skipped either way), the count restarting
/// when the scale grows; and the scale never falls below `min_scale`. The defaults
/// (`hysteresis = 1`, `min_scale = 0`) are exactly PyTorch's rule. With
/// `hysteresis > 1` the growth-tracker buffer holds two i32: the clean steps in a row,
/// then the overflows since the scale last grew.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaleUpdateParams {
    /// Factor on the scale after `growth_interval` clean steps in a row (> 1).
    pub growth_factor: f32,
    /// Factor on the scale when it backs off after an overflow (< 1).
    pub backoff_factor: f32,
    /// Clean (all-finite) steps in a row before the scale grows.
    pub growth_interval: u32,
    /// Overflows that back the scale off: the `hysteresis`-th since the last growth
    /// (and every one after it). 0 and 1 both mean every overflow.
    pub hysteresis: u32,
    /// The scale's floor after a backoff.
    pub min_scale: f32,
}

impl ScaleUpdateParams {
    /// How many i32 the growth-tracker buffer needs: 2 with hysteresis, else 1.
    pub fn tracker_len(&self) -> usize {
        if self.hysteresis > 1 { 2 } else { 1 }
    }
}

impl Default for ScaleUpdateParams {
    /// `torch.amp.GradScaler` defaults.
    fn default() -> Self {
        ScaleUpdateParams {
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            hysteresis: 1,
            min_scale: 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_lens_of_ordinary_specs() {
        let s = GemmSpec::batched(3, 4, 5, 6);
        assert_eq!(s.required_lens().unwrap(), (72, 90, 60));
        assert_eq!(s.flops().unwrap(), 2 * 3 * 4 * 5 * 6);
        // A shared operand (stride 0) needs one matrix; an empty batch needs nothing.
        let shared = GemmSpec {
            stride_b: 0,
            ..GemmSpec::batched(4, 2, 3, 5)
        };
        assert_eq!(shared.required_lens().unwrap(), (40, 15, 24));
        assert_eq!(
            GemmSpec::batched(0, 4, 5, 6).required_lens().unwrap(),
            (0, 0, 0)
        );
        assert_eq!(GemmSpec::new(0, 5, 6).required_lens().unwrap(), (0, 30, 0));
    }

    #[test]
    fn offsets_move_each_operand() {
        let s = GemmSpec::batched(3, 4, 5, 6).offsets(10, 20, 30);
        assert_eq!(s.required_lens().unwrap(), (82, 110, 90));
        let (a, b, c) = s.operand_ranges().unwrap();
        assert_eq!((a, b, c), (10..82, 20..110, 30..90));
        // An empty product touches nothing, wherever its operands would start.
        let empty = GemmSpec::new(0, 5, 6).offsets(7, 8, 9);
        assert_eq!(empty.operand_ranges().unwrap(), (0..0, 8..38, 0..0));
        let wraps = GemmSpec::new(2, 2, 2).offsets(0, usize::MAX - 3, 0);
        let e = wraps.required_lens().unwrap_err().to_string();
        assert!(e.contains("B") && e.contains("offset"), "{e}");
    }

    #[test]
    fn overflowing_specs_are_errors_naming_the_op() {
        let big = 1usize << 40;
        let batch = GemmSpec {
            batch: big,
            stride_a: big,
            ..GemmSpec::new(1, 1, 1)
        };
        let e = batch.required_lens().unwrap_err().to_string();
        assert!(
            e.contains("gemm") && e.contains("A") && e.contains("overflows"),
            "{e}"
        );
        // (batch - 1) * stride + size wraps to 0 in unchecked arithmetic.
        let wraps = GemmSpec {
            batch: 2,
            stride_c: usize::MAX,
            ..GemmSpec::new(1, 1, 1)
        };
        assert!(wraps.required_lens().unwrap_err().to_string().contains("C"));
        let mk = GemmSpec::new(1 << 63, 1, 2);
        assert!(mk.required_lens().is_err());
        // The size is checked even when another dimension is 0.
        assert!(GemmSpec::new(0, 1 << 33, 1 << 33).required_lens().is_err());
        assert!(
            GemmSpec::batched(1 << 20, 1 << 20, 1 << 20, 1 << 20)
                .flops()
                .is_err()
        );
    }
}
