//! The fused kernels layers are made of, with their shape checks.

use crate::Tensor;
use brrr_backend::{
    AttentionSpec, Backend, DType, EmbeddingSpec, Error, LayerNormSpec, Result, SoftmaxSpec,
};

/// Splits a shape into (rows, last dimension).
fn rows_cols<B: Backend>(op: &'static str, t: &Tensor<B>) -> Result<(usize, usize)> {
    let cols = *t
        .dims()
        .last()
        .ok_or_else(|| Error::shape(op, "expected rank >= 1, got a scalar"))?;
    Ok((t.elem_count() / cols.max(1), cols))
}

fn same_shape<B: Backend>(op: &'static str, a: &Tensor<B>, b: &Tensor<B>) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(Error::shape(op, format!("{} vs {}", a.shape(), b.shape())));
    }
    Ok(())
}

/// Saved LayerNorm statistics (f32, one per row) for the backward pass.
pub struct LayerNormStats<B: Backend> {
    /// Each row's mean, f32 `[rows]` (rows = every dimension but the last, flattened).
    pub mean: Tensor<B>,
    /// Each row's reciprocal standard deviation `1 / sqrt(var + eps)`, f32 `[rows]`.
    pub rstd: Tensor<B>,
}

/// The sizes of a fused attention on `qkv` (`[B, T, 3·H·D]`), checked.
fn attention_spec<B: Backend>(
    op: &'static str,
    qkv: &Tensor<B>,
    heads: usize,
    scale: f32,
) -> Result<AttentionSpec> {
    let dims = qkv.dims();
    let width = match dims {
        [_, _, w] => *w,
        _ => {
            return Err(Error::shape(
                op,
                format!("expected qkv [B, T, 3·H·D], got {}", qkv.shape()),
            ));
        }
    };
    if heads == 0 || !width.is_multiple_of(3 * heads) {
        return Err(Error::shape(
            op,
            format!("qkv width {width} is not q, k, v of {heads} heads"),
        ));
    }
    Ok(AttentionSpec {
        batch: dims[0],
        heads,
        seq: dims[1],
        head_dim: width / (3 * heads),
        scale,
    })
}

/// What a fused attention's backward needs besides `qkv`: its output and the f32
/// log-sum-exp of every row (`[B, T, H]`).
#[derive(Clone, Debug)]
pub struct AttentionOut<B: Backend> {
    /// `[B, T, H·D]`.
    pub y: Tensor<B>,
    /// f32 `[B, T, H]`.
    pub lse: Tensor<B>,
}

impl<B: Backend> Tensor<B> {
    /// Fused causal self-attention ([`Backend::attention`]) of `heads` heads on `self`,
    /// GPT-2's `c_attn` output `[B, T, 3·H·D]` (q, k, v, each head-major). Returns
    /// `y: [B, T, H·D]` and the log-sum-exp its backward needs. Only backends with
    /// [`Backend::has_fused_attention`] run it.
    pub fn attention(&self, heads: usize, scale: f32) -> Result<AttentionOut<B>> {
        let spec = attention_spec("attention", self, heads, scale)?;
        let (b, t) = (spec.batch, spec.seq);
        let qkv = self.contiguous()?;
        let mut y = Tensor::alloc(&self.backend, [b, t, heads * spec.head_dim], self.dtype)?;
        let mut lse = Tensor::alloc(&self.backend, [b, t, heads], DType::F32)?;
        self.backend
            .attention(&spec, qkv.buffer()?, y.buffer_mut()?, lse.buffer_mut()?)?;
        Ok(AttentionOut { y, lse })
    }

    /// Gradient of [`Tensor::attention`] with respect to `self` (`qkv`), from the
    /// forward's outputs and `dy: [B, T, H·D]`.
    pub fn attention_backward(
        &self,
        heads: usize,
        scale: f32,
        out: &AttentionOut<B>,
        dy: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        const OP: &str = "attention_backward";
        let spec = attention_spec(OP, self, heads, scale)?;
        same_shape(OP, &out.y, dy)?;
        if dy.dims() != [spec.batch, spec.seq, heads * spec.head_dim] {
            return Err(Error::shape(
                OP,
                format!("dy {} does not match qkv {}", dy.shape(), self.shape()),
            ));
        }
        let (qkv, y, lse, dy) = (
            self.contiguous()?,
            out.y.contiguous()?,
            out.lse.contiguous()?,
            dy.contiguous()?,
        );
        let mut dqkv = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        self.backend.attention_backward(
            &spec,
            qkv.buffer()?,
            y.buffer()?,
            lse.buffer()?,
            dy.buffer()?,
            dqkv.buffer_mut()?,
        )?;
        Ok(dqkv)
    }

    /// `softmax(scale * x)` along the last dimension; with `causal` the last two
    /// dimensions must be square and position `i` sees only `j <= i`.
    pub fn softmax(&self, scale: f32, causal: bool) -> Result<Self> {
        let (rows, cols) = rows_cols("softmax", self)?;
        if causal && (self.rank() < 2 || self.dims()[self.rank() - 2] != cols) {
            return Err(Error::shape(
                "softmax",
                format!(
                    "causal softmax needs square [.., T, T] scores, got {}",
                    self.shape()
                ),
            ));
        }
        let spec = SoftmaxSpec {
            rows,
            cols,
            scale,
            causal,
        };
        let x = self.contiguous()?;
        let mut y = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        self.backend.softmax(&spec, x.buffer()?, y.buffer_mut()?)?;
        Ok(y)
    }

    /// Causal softmax of attention scores `[B·H, T, T]` with a document mask: `segments`
    /// (u32 `[B, T]`, one id per token) lets a token attend only to earlier tokens of its
    /// own document ([`brrr_backend::SegmentMask`]). Its gradient is
    /// [`Tensor::softmax_backward`].
    pub fn softmax_segmented(
        &self,
        scale: f32,
        segments: &Tensor<B>,
        heads: usize,
    ) -> Result<Self> {
        let op = "softmax_segmented";
        let (rows, cols) = rows_cols(op, self)?;
        let t = segments.dims().last().copied().unwrap_or(0);
        if self.rank() != 3 || self.dims()[1] != cols || segments.rank() != 2 || t != cols {
            return Err(Error::shape(
                op,
                format!(
                    "expected scores [B·H, T, T] and segments [B, T], got {} and {}",
                    self.shape(),
                    segments.shape()
                ),
            ));
        }
        if segments.dims()[0].checked_mul(heads) != Some(self.dims()[0]) {
            return Err(Error::shape(
                op,
                format!(
                    "{} score blocks are not {} sequences × {heads} heads",
                    self.dims()[0],
                    segments.dims()[0]
                ),
            ));
        }
        let spec = SoftmaxSpec {
            rows,
            cols,
            scale,
            causal: true,
        };
        let (x, seg) = (self.contiguous()?, segments.contiguous()?);
        let mut y = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        self.backend.softmax_segmented(
            &spec,
            &brrr_backend::SegmentMask { heads },
            seg.buffer()?,
            x.buffer()?,
            y.buffer_mut()?,
        )?;
        Ok(y)
    }

    /// Gradient of [`Tensor::softmax`] with respect to its input, from its output `y`
    /// (`self`) and the output gradient `dy`.
    pub fn softmax_backward(&self, dy: &Tensor<B>, scale: f32) -> Result<Self> {
        same_shape("softmax_backward", self, dy)?;
        let (rows, cols) = rows_cols("softmax_backward", self)?;
        let spec = SoftmaxSpec {
            rows,
            cols,
            scale,
            causal: false,
        };
        let (y, dy) = (self.contiguous()?, dy.contiguous()?);
        let mut dx = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        self.backend
            .softmax_backward(&spec, y.buffer()?, dy.buffer()?, dx.buffer_mut()?)?;
        Ok(dx)
    }

    /// LayerNorm over the last dimension with affine `gamma`, `beta` of shape `[C]`.
    pub fn layernorm(
        &self,
        gamma: &Tensor<B>,
        beta: &Tensor<B>,
        eps: f32,
    ) -> Result<(Self, LayerNormStats<B>)> {
        let (rows, cols) = rows_cols("layernorm", self)?;
        for p in [gamma, beta] {
            if p.dims() != [cols] {
                return Err(Error::shape(
                    "layernorm",
                    format!(
                        "parameters must be [{cols}] for input {}, got {}",
                        self.shape(),
                        p.shape()
                    ),
                ));
            }
        }
        // gamma and beta are read where they are: views into a flat buffer, in place.
        let (gamma, g_at) = gamma.contiguous_at()?;
        let (beta, b_at) = beta.contiguous_at()?;
        let spec = LayerNormSpec::new(rows, cols, eps).params_at(g_at, b_at);
        let x = self.contiguous()?;
        let mut y = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        let mut mean = Tensor::alloc(&self.backend, [rows], DType::F32)?;
        let mut rstd = Tensor::alloc(&self.backend, [rows], DType::F32)?;
        self.backend.layernorm(
            &spec,
            x.buffer()?,
            &gamma.buf,
            &beta.buf,
            y.buffer_mut()?,
            mean.buffer_mut()?,
            rstd.buffer_mut()?,
        )?;
        Ok((y, LayerNormStats { mean, rstd }))
    }

    /// LayerNorm backward: returns `dx`; accumulates into `dgamma` and `dbeta`.
    pub fn layernorm_backward(
        &self,
        dy: &Tensor<B>,
        gamma: &Tensor<B>,
        stats: &LayerNormStats<B>,
        eps: f32,
        dgamma: &mut Tensor<B>,
        dbeta: &mut Tensor<B>,
    ) -> Result<Self> {
        same_shape("layernorm_backward", self, dy)?;
        let (rows, cols) = rows_cols("layernorm_backward", self)?;
        for (what, g) in [("dgamma", &*dgamma), ("dbeta", &*dbeta)] {
            if g.dims() != [cols] {
                return Err(Error::shape(
                    "layernorm_backward",
                    format!("{what} must be [{cols}], got {}", g.shape()),
                ));
            }
        }
        let (x, dy) = (self.contiguous()?, dy.contiguous()?);
        let mut dx = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        let backend = self.backend.clone();
        // The kernel reads gamma and writes dgamma at one offset (gradients laid out
        // like their parameters). When they are not, the gradients go through zeroed
        // temporaries that are then added where they belong.
        let (gamma, g_at) = gamma.contiguous_at()?;
        let in_place = dgamma.layout().is_contiguous()
            && dgamma.layout().offset == g_at
            && dbeta.layout().is_contiguous();
        if !in_place {
            let gamma = gamma.exact()?;
            let mut tg = Tensor::zeros(&self.backend, [cols], dgamma.dtype())?;
            let mut tb = Tensor::zeros(&self.backend, [cols], dbeta.dtype())?;
            backend.layernorm_backward(
                &LayerNormSpec::new(rows, cols, eps),
                dy.buffer()?,
                x.buffer()?,
                gamma.buffer()?,
                stats.mean.buffer()?,
                stats.rstd.buffer()?,
                dx.buffer_mut()?,
                tg.buffer_mut()?,
                tb.buffer_mut()?,
            )?;
            dgamma.add_(&tg)?;
            dbeta.add_(&tb)?;
            return Ok(dx);
        }
        let (dgamma, dg_at) = dgamma.contiguous_buffer_mut("layernorm_backward")?;
        let (dbeta, db_at) = dbeta.contiguous_buffer_mut("layernorm_backward")?;
        backend.layernorm_backward(
            &LayerNormSpec::new(rows, cols, eps).params_at(dg_at, db_at),
            dy.buffer()?,
            x.buffer()?,
            &gamma.buf,
            stats.mean.buffer()?,
            stats.rstd.buffer()?,
            dx.buffer_mut()?,
            dgamma,
            dbeta,
        )?;
        Ok(dx)
    }

    /// GELU (tanh approximation, as GPT-2).
    pub fn gelu(&self) -> Result<Self> {
        let x = self.contiguous()?;
        let mut y = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        self.backend.gelu(x.buffer()?, y.buffer_mut()?)?;
        Ok(y)
    }

    /// `dy * gelu'(x)` with `x = self`.
    pub fn gelu_backward(&self, dy: &Tensor<B>) -> Result<Self> {
        same_shape("gelu_backward", self, dy)?;
        let (x, dy) = (self.contiguous()?, dy.contiguous()?);
        let mut dx = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        self.backend
            .gelu_backward(x.buffer()?, dy.buffer()?, dx.buffer_mut()?)?;
        Ok(dx)
    }

    /// Rows of `table` (`[rows, dim]`) selected by the ids in `self` (u32 or i32, any
    /// shape); the result has shape `ids.shape + [dim]`.
    pub fn embedding(&self, table: &Tensor<B>) -> Result<Self> {
        if !matches!(self.dtype, DType::U32 | DType::I32) {
            return Err(Error::DType {
                op: "embedding",
                expected: DType::U32,
                got: self.dtype,
            });
        }
        if table.rank() != 2 {
            return Err(Error::shape(
                "embedding",
                format!("table must be [rows, dim], got {}", table.shape()),
            ));
        }
        let dim = table.dims()[1];
        let mut dims = self.dims().to_vec();
        dims.push(dim);
        let ids = self.contiguous()?;
        let rows = table.dims()[0];
        // The table is read where it is (a view into a flat buffer, in place).
        let (table, at) = table.contiguous_at()?;
        let spec = EmbeddingSpec::new(dim).table_at(at, rows);
        let mut out = Tensor::alloc(&self.backend, dims, table.dtype)?;
        self.backend
            .embedding(&spec, ids.buffer()?, &table.buf, out.buffer_mut()?)?;
        Ok(out)
    }

    /// `dtable[ids[i]] += dout[i]` with `ids = self`.
    pub fn embedding_backward(&self, dout: &Tensor<B>, dtable: &mut Tensor<B>) -> Result<()> {
        if dtable.rank() != 2 {
            return Err(Error::shape(
                "embedding_backward",
                format!("table must be [rows, dim], got {}", dtable.shape()),
            ));
        }
        let dim = dtable.dims()[1];
        if dout.elem_count() != self.elem_count() * dim {
            return Err(Error::shape(
                "embedding_backward",
                format!(
                    "gradient {} does not match ids {} with dim {dim}",
                    dout.shape(),
                    self.shape()
                ),
            ));
        }
        let (ids, dout) = (self.contiguous()?, dout.contiguous()?);
        let rows = dtable.dims()[0];
        let backend = self.backend.clone();
        // Scattered into the table where it is (a gradient inside a flat buffer).
        let (dtable, at) = dtable.contiguous_buffer_mut("embedding_backward")?;
        let spec = EmbeddingSpec::new(dim).table_at(at, rows);
        backend.embedding_backward(&spec, ids.buffer()?, dout.buffer()?, dtable)
    }

    /// `table[ids[i]] = rows[i]` with `ids = self` (distinct ids): the embedding's
    /// inverse, written into the table in place (a paged KV cache stores a step's new
    /// keys and values with one of these per layer).
    pub fn scatter_rows(&self, rows: &Tensor<B>, table: &mut Tensor<B>) -> Result<()> {
        const OP: &str = "scatter_rows";
        if table.rank() != 2 {
            return Err(Error::shape(
                OP,
                format!("table must be [rows, dim], got {}", table.shape()),
            ));
        }
        let dim = table.dims()[1];
        if rows.elem_count() != self.elem_count() * dim {
            return Err(Error::shape(
                OP,
                format!(
                    "rows {} do not match ids {} with dim {dim}",
                    rows.shape(),
                    self.shape()
                ),
            ));
        }
        let (ids, rows) = (self.contiguous()?, rows.contiguous()?);
        let n_rows = table.dims()[0];
        let backend = self.backend.clone();
        let (table, at) = table.contiguous_buffer_mut(OP)?;
        let spec = EmbeddingSpec::new(dim).table_at(at, n_rows);
        backend.scatter_rows(&spec, ids.buffer()?, rows.buffer()?, table)
    }

    /// Per-row cross-entropy (f32) of logits `self` (`[.., V]`) against i32 targets
    /// with the leading shape; negative targets are ignored.
    pub fn cross_entropy(&self, targets: &Tensor<B>) -> Result<Self> {
        let (rows, vocab) = rows_cols("cross_entropy", self)?;
        check_targets(self, targets, rows)?;
        let (x, t) = (self.contiguous()?, targets.contiguous()?);
        let loss_dtype = if self.dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let mut losses = Tensor::alloc(&self.backend, targets.shape().clone(), loss_dtype)?;
        self.backend
            .cross_entropy(x.buffer()?, t.buffer()?, vocab, losses.buffer_mut()?)?;
        Ok(losses)
    }

    /// `dlogits = (softmax(logits) - onehot) * dlosses` with `logits = self`.
    pub fn cross_entropy_backward(&self, targets: &Tensor<B>, dlosses: &Tensor<B>) -> Result<Self> {
        let (rows, vocab) = rows_cols("cross_entropy_backward", self)?;
        check_targets(self, targets, rows)?;
        same_shape("cross_entropy_backward", targets, dlosses)?;
        let (x, t, dl) = (
            self.contiguous()?,
            targets.contiguous()?,
            dlosses.contiguous()?,
        );
        let mut dx = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        self.backend.cross_entropy_backward(
            x.buffer()?,
            t.buffer()?,
            dl.buffer()?,
            vocab,
            dx.buffer_mut()?,
        )?;
        Ok(dx)
    }
}

fn check_targets<B: Backend>(logits: &Tensor<B>, targets: &Tensor<B>, rows: usize) -> Result<()> {
    if targets.dtype() != DType::I32 {
        return Err(Error::DType {
            op: "cross_entropy",
            expected: DType::I32,
            got: targets.dtype(),
        });
    }
    if targets.elem_count() != rows || targets.dims() != &logits.dims()[..logits.rank() - 1] {
        return Err(Error::shape(
            "cross_entropy",
            format!(
                "targets {} do not match logits {}",
                targets.shape(),
                logits.shape()
            ),
        ));
    }
    Ok(())
}
