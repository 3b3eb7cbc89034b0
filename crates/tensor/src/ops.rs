//! Element-wise, reduction and matrix ops.

use crate::Tensor;
use brrr_backend::{Backend, BinaryOp, DType, Error, GemmSpec, ReduceOp, Result, Shape, UnaryOp};

impl<B: Backend> Tensor<B> {
    fn same_dtype(&self, op: &'static str, other: &Tensor<B>) -> Result<()> {
        Error::check_dtype(op, self.dtype, other.dtype)
    }

    // ---- element-wise -------------------------------------------------------------

    /// `op(x)` element by element.
    pub fn unary(&self, op: UnaryOp) -> Result<Self> {
        let x = self.contiguous()?;
        let mut out = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        self.backend.unary(op, x.buffer()?, out.buffer_mut()?)?;
        Ok(out)
    }

    /// `e^x` element by element.
    pub fn exp(&self) -> Result<Self> {
        self.unary(UnaryOp::Exp)
    }
    /// Natural logarithm element by element (`ln 0 = -inf`, negatives give NaN).
    pub fn log(&self) -> Result<Self> {
        self.unary(UnaryOp::Log)
    }
    /// Square root element by element (negatives give NaN).
    pub fn sqrt(&self) -> Result<Self> {
        self.unary(UnaryOp::Sqrt)
    }
    /// `x²` element by element.
    pub fn square(&self) -> Result<Self> {
        self.unary(UnaryOp::Square)
    }
    /// `-x` element by element.
    pub fn neg(&self) -> Result<Self> {
        self.unary(UnaryOp::Neg)
    }
    /// `self * mul + add`.
    pub fn affine(&self, mul: f32, add: f32) -> Result<Self> {
        self.unary(UnaryOp::Affine { mul, add })
    }
    /// `self * s` element by element.
    pub fn scale(&self, s: f32) -> Result<Self> {
        self.affine(s, 0.0)
    }

    /// `self op other` with NumPy broadcasting.
    pub fn binary(&self, op: BinaryOp, other: &Tensor<B>) -> Result<Self> {
        let name = binary_name(op);
        self.same_dtype(name, other)?;
        let shape = Shape::broadcast(name, self.shape(), other.shape())?;
        let la = self.layout.broadcast_to(name, &shape)?;
        let lb = other.layout.broadcast_to(name, &shape)?;
        la.validate(name)?;
        let mut out = Tensor::alloc(&self.backend, shape, self.dtype)?;
        self.backend
            .binary(op, &self.buf, &la, &other.buf, &lb, out.buffer_mut()?)?;
        Ok(out)
    }

    /// `self + o` element by element, with NumPy broadcasting.
    pub fn add(&self, o: &Tensor<B>) -> Result<Self> {
        self.binary(BinaryOp::Add, o)
    }
    /// `self - o` element by element, with NumPy broadcasting.
    pub fn sub(&self, o: &Tensor<B>) -> Result<Self> {
        self.binary(BinaryOp::Sub, o)
    }
    /// `self * o` element by element (not a matrix product: see [`Tensor::matmul`]), with NumPy broadcasting.
    pub fn mul(&self, o: &Tensor<B>) -> Result<Self> {
        self.binary(BinaryOp::Mul, o)
    }
    /// `self / o` element by element, with NumPy broadcasting.
    pub fn div(&self, o: &Tensor<B>) -> Result<Self> {
        self.binary(BinaryOp::Div, o)
    }
    /// The larger of `self` and `o` element by element, with NumPy broadcasting.
    pub fn maximum(&self, o: &Tensor<B>) -> Result<Self> {
        self.binary(BinaryOp::Max, o)
    }
    /// The smaller of `self` and `o` element by element, with NumPy broadcasting.
    pub fn minimum(&self, o: &Tensor<B>) -> Result<Self> {
        self.binary(BinaryOp::Min, o)
    }

    /// Converts to another dtype.
    pub fn to_dtype(&self, dtype: DType) -> Result<Self> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        let x = self.contiguous()?;
        let mut out = Tensor::alloc(&self.backend, self.shape().clone(), dtype)?;
        self.backend.cast(x.buffer()?, out.buffer_mut()?)?;
        Ok(out)
    }

    // ---- in place ---------------------------------------------------------------------

    /// Sets every element to `value`. The view must be contiguous; it may sit part-way
    /// into its buffer (a part lent by a [`FlatBuffer`](crate::FlatBuffer)), and then
    /// only its elements change.
    pub fn fill_(&mut self, value: f64) -> Result<()> {
        let backend = self.backend.clone();
        if self.is_dense() {
            return backend.fill(self.buffer_mut()?, value);
        }
        if !self.layout.is_contiguous() {
            return Err(Error::invalid(
                "fill_",
                format!(
                    "view {:?} of shape {} is not contiguous",
                    self.layout.strides, self.layout.shape
                ),
            ));
        }
        // The backend's fill covers a whole buffer; a part of one is written by copying
        // one element, broadcast to the view's shape, into the view where it lies.
        let one = Tensor::from_f64(&backend, &[value], [1], self.dtype)?
            .broadcast_as(self.shape().clone())?;
        let dst = self.layout.clone();
        one.copy_into_view(self, &dst)
    }

    /// `self += alpha * x` (same shape and dtype).
    pub fn axpy_(&mut self, alpha: f32, x: &Tensor<B>) -> Result<()> {
        if x.shape() != self.shape() {
            return Err(Error::shape(
                "axpy",
                format!("cannot add {} into {}", x.shape(), self.shape()),
            ));
        }
        self.same_dtype("axpy", x)?;
        // x's elements alone (axpy adds as many as x's buffer holds), into this view
        // where it sits in its buffer (a gradient inside a flat buffer is updated there).
        let x = x.exact()?;
        let backend = self.backend.clone();
        let (y, offset) = self.contiguous_buffer_mut("axpy")?;
        backend.axpy(alpha, x.buffer()?, y, Some(offset))
    }

    /// `self += x`.
    pub fn add_(&mut self, x: &Tensor<B>) -> Result<()> {
        self.axpy_(1.0, x)
    }

    // ---- reductions -------------------------------------------------------------------

    fn reduce_dim(&self, op: ReduceOp, dim: isize, keepdim: bool) -> Result<Self> {
        let d = self.shape().resolve_dim(dim)?;
        let dims = self.dims();
        let outer: usize = dims[..d].iter().product();
        let n = dims[d];
        let inner: usize = dims[d + 1..].iter().product();
        if n == 0 {
            return Err(Error::shape(
                "reduce",
                format!("cannot reduce empty dimension {d} of {}", self.shape()),
            ));
        }
        let x = self.contiguous()?;
        let mut out_dims = dims.to_vec();
        if keepdim {
            out_dims[d] = 1;
        } else {
            out_dims.remove(d);
        }
        let mut out = Tensor::alloc(&self.backend, out_dims, self.dtype)?;
        self.backend
            .reduce(op, x.buffer()?, outer, n, inner, out.buffer_mut()?)?;
        Ok(out)
    }

    /// Sum over dimension `dim` (negative counts from the end); `keepdim` keeps it
    /// with size 1, otherwise it is removed. An empty dimension is an error.
    pub fn sum_dim(&self, dim: isize, keepdim: bool) -> Result<Self> {
        self.reduce_dim(ReduceOp::Sum, dim, keepdim)
    }
    /// Mean over dimension `dim`, shaped as in [`Tensor::sum_dim`].
    pub fn mean_dim(&self, dim: isize, keepdim: bool) -> Result<Self> {
        self.reduce_dim(ReduceOp::Mean, dim, keepdim)
    }
    /// Maximum over dimension `dim`, shaped as in [`Tensor::sum_dim`].
    pub fn max_dim(&self, dim: isize, keepdim: bool) -> Result<Self> {
        self.reduce_dim(ReduceOp::Max, dim, keepdim)
    }
    /// Minimum over dimension `dim`, shaped as in [`Tensor::sum_dim`].
    pub fn min_dim(&self, dim: isize, keepdim: bool) -> Result<Self> {
        self.reduce_dim(ReduceOp::Min, dim, keepdim)
    }

    /// Sum of all elements, as a one-element tensor of shape `[1]`.
    pub fn sum_all(&self) -> Result<Self> {
        self.reshape([self.elem_count()])?.sum_dim(0, true)
    }
    /// `Σ x²` over all elements, each widened to f32 before it is squared, as an f32
    /// tensor of shape `[1]` (0 for an empty tensor): bit for bit
    /// `self.to_dtype(DType::F32)?.square()?.sum_all()`. On a backend with a fused
    /// [`Backend::sum_squares`](brrr_backend::Backend::sum_squares) no temporary the size
    /// of `self` is made, and a contiguous view into a larger buffer (a parameter's
    /// gradient in a flat buffer) is read in place: for a gradient norm that temporary
    /// would be the size of the largest gradient.
    pub fn sum_squares(&self) -> Result<Self> {
        if self.elem_count() == 0 {
            return Tensor::zeros(&self.backend, [1], DType::F32);
        }
        let fused = self.backend.has_fused_sum_squares()
            && matches!(self.dtype, DType::F32 | DType::F16 | DType::BF16);
        if !fused {
            return self.to_dtype(DType::F32)?.square()?.sum_all();
        }
        let (x, offset) = self.contiguous_at()?;
        let mut out = Tensor::alloc(&self.backend, [1], DType::F32)?;
        self.backend
            .sum_squares(&x.buf, offset, x.elem_count(), out.buffer_mut()?)?;
        Ok(out)
    }
    /// Mean of all elements, shape `[1]`.
    pub fn mean_all(&self) -> Result<Self> {
        self.reshape([self.elem_count()])?.mean_dim(0, true)
    }

    // ---- matrix product -----------------------------------------------------------

    /// Matrix product over the last two dimensions, batched over the leading ones
    /// (`[..., m, k] @ [..., k, n]`). A right-hand side of rank 2 is shared by the whole
    /// batch (a weight). Transposed views are passed to the GEMM as transpose flags,
    /// so `a.matmul(&w.transpose(0, 1)?)` copies nothing.
    pub fn matmul(&self, rhs: &Tensor<B>) -> Result<Self> {
        let (batch_dims, m, n) = matmul_out_dims(self, rhs)?;
        let mut out_dims = batch_dims;
        out_dims.extend([m, n]);
        let mut out = Tensor::alloc(&self.backend, out_dims, self.dtype)?;
        Tensor::matmul_into(&mut out, self, rhs, 1.0, 0.0)?;
        Ok(out)
    }

    /// `out = alpha * a @ b + beta * out`, writing into an existing dense tensor.
    /// With `beta = 1` this accumulates (how parameter gradients add up). `out` has the
    /// operands' dtype, or is f32 for f16/bf16 operands (mixed precision: a bf16 product
    /// accumulated into an f32 gradient, unrounded).
    pub fn matmul_into(
        out: &mut Tensor<B>,
        a: &Tensor<B>,
        b: &Tensor<B>,
        alpha: f32,
        beta: f32,
    ) -> Result<()> {
        a.same_dtype("matmul", b)?;
        let mixed = matches!(a.dtype(), DType::F16 | DType::BF16) && out.dtype() == DType::F32;
        if !mixed {
            a.same_dtype("matmul", out)?;
        }
        let (batch_dims, m, n) = matmul_out_dims(a, b)?;
        let mut want = batch_dims.clone();
        want.extend([m, n]);
        if out.dims() != want.as_slice() {
            return Err(Error::shape(
                "matmul",
                format!(
                    "output is {} but {} @ {} is {:?}",
                    out.shape(),
                    a.shape(),
                    b.shape(),
                    want
                ),
            ));
        }
        let batch: usize = batch_dims.iter().product();
        let k = a.dims()[a.rank() - 1];
        let (a, ta, sa) = gemm_operand(a, batch)?;
        let (b, tb, sb) = gemm_operand(b, batch)?;
        // The output's device runs the product (as before offsets: one CPU instance's
        // thread pool, one GPU); its handle is cloned before the buffer is borrowed.
        let backend = out.backend.clone();
        let (out_buf, offset_c) = out.contiguous_buffer_mut("matmul")?;
        let spec = GemmSpec {
            batch,
            m,
            n,
            k,
            trans_a: ta,
            trans_b: tb,
            alpha,
            beta,
            stride_a: sa,
            stride_b: sb,
            stride_c: m.checked_mul(n).ok_or_else(|| {
                Error::shape("matmul", format!("output of {m} × {n} overflows usize"))
            })?,
            offset_a: a.layout.offset,
            offset_b: b.layout.offset,
            offset_c,
        };
        backend.gemm(&spec, &a.buf, &b.buf, out_buf)
    }
}

fn binary_name(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "add",
        BinaryOp::Sub => "sub",
        BinaryOp::Mul => "mul",
        BinaryOp::Div => "div",
        BinaryOp::Max => "maximum",
        BinaryOp::Min => "minimum",
    }
}

/// Checks `[..., m, k] @ [..., k, n]` and returns the batch dims, m and n.
fn matmul_out_dims<B: Backend>(a: &Tensor<B>, b: &Tensor<B>) -> Result<(Vec<usize>, usize, usize)> {
    if a.rank() < 2 || b.rank() < 2 {
        return Err(Error::shape(
            "matmul",
            format!(
                "operands need rank >= 2, got {} and {}",
                a.shape(),
                b.shape()
            ),
        ));
    }
    let (ad, bd) = (a.dims(), b.dims());
    let (m, k) = (ad[ad.len() - 2], ad[ad.len() - 1]);
    let (k2, n) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    let a_batch = &ad[..ad.len() - 2];
    let b_batch = &bd[..bd.len() - 2];
    if k != k2 || !(b_batch.is_empty() || b_batch == a_batch) {
        return Err(Error::shape(
            "matmul",
            format!("cannot multiply {} by {}", a.shape(), b.shape()),
        ));
    }
    Ok((a_batch.to_vec(), m, n))
}

/// How a GEMM reads an operand: the tensor to pass (its layout's offset is where the
/// GEMM starts reading: a view into a flat buffer is read in place), whether its
/// matrices are stored transposed, and the element stride between batch entries (0 =
/// shared). Layouts a GEMM cannot read directly are made contiguous first.
fn gemm_operand<B: Backend>(t: &Tensor<B>, batch: usize) -> Result<(Tensor<B>, bool, usize)> {
    let r = t.rank();
    let (rows, cols) = (t.dims()[r - 2], t.dims()[r - 1]);
    let (rs, cs) = (t.layout.strides[r - 2], t.layout.strides[r - 1]);
    let mat = rows * cols;
    let row_major = cs == 1 || cols == 1;
    let row_major = row_major && (rs == cols || rows == 1);
    let col_major = (rs == 1 || rows == 1) && (cs == rows || cols == 1) && !row_major;
    // Batch dims must step by whole matrices, packed in order.
    let batch_ok = |expected_stride: usize| {
        let mut acc = expected_stride;
        for i in (0..r - 2).rev() {
            let d = t.dims()[i];
            if d != 1 && t.layout.strides[i] != acc {
                return false;
            }
            acc *= d;
        }
        true
    };
    // A rank-2 operand of a batched product is one matrix shared by the whole batch.
    let stride = if r == 2 && batch > 1 { 0 } else { mat };
    if (row_major || col_major) && batch_ok(mat) {
        return Ok((t.clone(), col_major, stride));
    }
    Ok((t.deep_clone()?, false, stride))
}
