use brrr_backend::{Backend, DType, Error, HostData, Layout, Result, Shape};
use rand::Rng;
use rand_distr::{Distribution, Normal};
use std::sync::Arc;

/// An n-dimensional view of a buffer on backend `B`.
pub struct Tensor<B: Backend> {
    pub(crate) backend: B,
    pub(crate) buf: Arc<B::Buffer>,
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
}

impl<B: Backend> Clone for Tensor<B> {
    /// A new view of the same buffer (no copy). Use [`Tensor::deep_clone`] for a copy.
    fn clone(&self) -> Self {
        Tensor {
            backend: self.backend.clone(),
            buf: self.buf.clone(),
            layout: self.layout.clone(),
            dtype: self.dtype,
        }
    }
}

impl<B: Backend> std::fmt::Debug for Tensor<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor({}, {}, {})",
            self.layout.shape,
            self.dtype,
            self.backend.info().name
        )
    }
}

impl<B: Backend> Tensor<B> {
    // ---- construction -------------------------------------------------------------

    pub(crate) fn from_buffer(backend: &B, buf: B::Buffer, shape: Shape) -> Self {
        let dtype = backend.dtype(&buf);
        Tensor {
            backend: backend.clone(),
            buf: Arc::new(buf),
            layout: Layout::contiguous(shape),
            dtype,
        }
    }

    /// A zero-filled tensor.
    pub fn zeros(backend: &B, shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        let shape = shape.into();
        let buf = backend.zeros(dtype, shape.elem_count())?;
        Ok(Self::from_buffer(backend, buf, shape))
    }

    /// A tensor whose contents are unspecified ([`Backend::alloc`]): for an output that
    /// a kernel overwrites completely. Never read it before writing every element.
    pub fn alloc(backend: &B, shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        let shape = shape.into();
        let buf = backend.alloc(dtype, shape.elem_count())?;
        Ok(Self::from_buffer(backend, buf, shape))
    }

    /// A tensor filled with `value`.
    pub fn full(backend: &B, shape: impl Into<Shape>, dtype: DType, value: f64) -> Result<Self> {
        if value == 0.0 {
            return Self::zeros(backend, shape, dtype);
        }
        let mut t = Self::alloc(backend, shape, dtype)?;
        t.fill_(value)?;
        Ok(t)
    }

    /// Uploads host data; its length must equal the shape's element count.
    pub fn from_host(backend: &B, data: &HostData, shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        if data.len() != shape.elem_count() {
            return Err(Error::shape(
                "Tensor::from_host",
                format!(
                    "{} elements of {} cannot have shape {shape} ({} elements)",
                    data.len(),
                    data.dtype(),
                    shape.elem_count()
                ),
            ));
        }
        let buf = backend.upload(data)?;
        Ok(Self::from_buffer(backend, buf, shape))
    }

    /// Uploads f32 values converted to `dtype`.
    pub fn from_f32(backend: &B, v: &[f32], shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        Self::from_host(backend, &HostData::from_f32(dtype, v), shape)
    }

    /// Uploads f64 values converted to `dtype`.
    pub fn from_f64(backend: &B, v: &[f64], shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        Self::from_host(backend, &HostData::from_f64(dtype, v), shape)
    }

    /// Uploads u32 indices (token ids).
    pub fn from_u32(backend: &B, v: &[u32], shape: impl Into<Shape>) -> Result<Self> {
        Self::from_host(backend, &HostData::U32(v.to_vec()), shape)
    }

    /// Uploads i32 values (targets; negative = ignored by cross-entropy).
    pub fn from_i32(backend: &B, v: &[i32], shape: impl Into<Shape>) -> Result<Self> {
        Self::from_host(backend, &HostData::I32(v.to_vec()), shape)
    }

    /// Samples `N(mean, std²)` on the host from `rng` (so results depend only on the
    /// seed, never on the backend) and uploads.
    pub fn randn(
        backend: &B,
        shape: impl Into<Shape>,
        dtype: DType,
        mean: f64,
        std: f64,
        rng: &mut impl Rng,
    ) -> Result<Self> {
        let shape = shape.into();
        let normal = Normal::new(mean, std)
            .map_err(|e| Error::invalid("Tensor::randn", format!("std {std}: {e}")))?;
        let v: Vec<f64> = (0..shape.elem_count())
            .map(|_| normal.sample(rng))
            .collect();
        Self::from_f64(backend, &v, shape, dtype)
    }

    // ---- accessors ------------------------------------------------------------------

    /// The backend that owns the buffer (a cheap handle: clone it to make tensors on it).
    pub fn backend(&self) -> &B {
        &self.backend
    }
    /// The view's shape.
    pub fn shape(&self) -> &Shape {
        &self.layout.shape
    }
    /// The view's dimension sizes, outermost first.
    pub fn dims(&self) -> &[usize] {
        self.layout.shape.dims()
    }
    /// Number of dimensions (0 for a scalar).
    pub fn rank(&self) -> usize {
        self.layout.shape.rank()
    }
    /// Size of dimension `d` (negative counts from the end).
    pub fn dim(&self, d: isize) -> Result<usize> {
        self.layout.shape.dim(d)
    }
    /// Element type of the buffer.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Number of elements the view shows (the product of its dimensions; 1 for a
    /// scalar), which may be fewer than its buffer holds.
    pub fn elem_count(&self) -> usize {
        self.layout.shape.elem_count()
    }
    /// Shape, strides and offset (in elements) of this view into its buffer.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// Bytes of the elements this view shows (not of the whole shared buffer).
    pub fn size_in_bytes(&self) -> usize {
        self.elem_count() * self.dtype.size_in_bytes()
    }

    /// Dense, starting at the buffer's first element: what kernels take directly.
    pub fn is_dense(&self) -> bool {
        self.layout.offset == 0 && self.layout.is_contiguous()
    }

    /// The underlying buffer, for passing to a kernel. Fails on a non-dense view:
    /// call [`Tensor::contiguous`] first.
    pub fn buffer(&self) -> Result<&B::Buffer> {
        if !self.is_dense() {
            return Err(Error::invalid(
                "Tensor::buffer",
                format!(
                    "view {:?} of shape {} is not dense; call contiguous() first",
                    self.layout.strides, self.layout.shape
                ),
            ));
        }
        Ok(&self.buf)
    }

    /// The underlying buffer, writable. Fails if the view is not dense or the buffer is
    /// shared with another tensor (writing would change that tensor too).
    pub fn buffer_mut(&mut self) -> Result<&mut B::Buffer> {
        if !self.is_dense() {
            return Err(Error::invalid(
                "Tensor::buffer_mut",
                format!("view of shape {} is not dense", self.layout.shape),
            ));
        }
        let shared = Arc::strong_count(&self.buf);
        Arc::get_mut(&mut self.buf).ok_or_else(|| {
            Error::invalid(
                "Tensor::buffer_mut",
                format!(
                    "buffer is shared by {shared} tensors; writing in place would change the others \
                     (use deep_clone() for a private copy)"
                ),
            )
        })
    }

    /// The underlying buffer, writable, and where this view starts in it: for kernels
    /// that take an offset (as [`GemmSpec`](brrr_backend::GemmSpec) does), so a
    /// contiguous view part-way into a buffer is written in place. Fails if the view is
    /// not contiguous or the buffer is shared with another tensor. `op` names the caller
    /// in the error.
    pub fn contiguous_buffer_mut(&mut self, op: &'static str) -> Result<(&mut B::Buffer, usize)> {
        if !self.layout.is_contiguous() {
            return Err(Error::invalid(
                op,
                format!(
                    "output view {:?} of shape {} is not contiguous",
                    self.layout.strides, self.layout.shape
                ),
            ));
        }
        let offset = self.layout.offset;
        let shared = Arc::strong_count(&self.buf);
        let buf = Arc::get_mut(&mut self.buf).ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "the output's buffer is shared by {shared} tensors; writing in place would \
                     change the others (use deep_clone() for a private copy)"
                ),
            )
        })?;
        Ok((buf, offset))
    }

    // ---- to the host ---------------------------------------------------------------

    /// Reads the tensor back in row-major order. The one operation that waits.
    pub async fn to_host(&self) -> Result<HostData> {
        let dense = self.contiguous()?;
        let data = dense.backend.read(&dense.buf).await?;
        if data.len() == dense.elem_count() {
            Ok(data)
        } else {
            // A dense view of a longer buffer (possible after narrow on dim 0 at offset 0).
            Ok(truncate(data, dense.elem_count()))
        }
    }

    /// A copy on `dst`, another instance of the same backend (another GPU, another
    /// simulated CPU device, or the same one). The backend copies device to device where
    /// it can ([`Backend::copy_to_device`]); the result is dense and private.
    pub async fn to_device(&self, dst: &B) -> Result<Tensor<B>> {
        let dense = if self.is_dense() && self.backend.len(&self.buf) == self.elem_count() {
            self.clone()
        } else {
            // Only the elements of the view travel, never the rest of a shared buffer.
            self.deep_clone()?
        };
        let buf = dense.backend.copy_to_device(&dense.buf, dst).await?;
        Ok(Tensor::from_buffer(dst, buf, self.shape().clone()))
    }

    /// A copy on another backend (CPU to GPU, wgpu to CUDA, ...), through the host.
    pub async fn to_backend<B2: Backend>(&self, dst: &B2) -> Result<Tensor<B2>> {
        let host = self.to_host().await?;
        Tensor::from_host(dst, &host, self.shape().clone())
    }

    /// Blocking [`Tensor::to_host`] as f32 values (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn to_vec_f32(&self) -> Result<Vec<f32>> {
        Ok(brrr_backend::block_on(self.to_host())?.to_f32())
    }

    /// Blocking [`Tensor::to_host`] as f64 values (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn to_vec_f64(&self) -> Result<Vec<f64>> {
        Ok(brrr_backend::block_on(self.to_host())?.to_f64())
    }

    /// Blocking read of a one-element tensor (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn to_scalar_f64(&self) -> Result<f64> {
        if self.elem_count() != 1 {
            return Err(Error::shape(
                "Tensor::to_scalar",
                format!("expected one element, shape is {}", self.shape()),
            ));
        }
        Ok(self.to_vec_f64()?[0])
    }

    // ---- views ------------------------------------------------------------------------

    fn with_layout(&self, layout: Layout) -> Self {
        Tensor {
            backend: self.backend.clone(),
            buf: self.buf.clone(),
            layout,
            dtype: self.dtype,
        }
    }

    /// Same elements, new shape. Free for a contiguous view; copies otherwise.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        if shape.elem_count() != self.elem_count() {
            return Err(Error::shape(
                "reshape",
                format!(
                    "cannot reshape {} ({} elements) to {shape} ({} elements)",
                    self.shape(),
                    self.elem_count(),
                    shape.elem_count()
                ),
            ));
        }
        let base = if self.layout.is_contiguous() {
            self.clone()
        } else {
            self.contiguous()?
        };
        let mut layout = Layout::contiguous(shape);
        layout.offset = base.layout.offset;
        Ok(base.with_layout(layout))
    }

    /// Swaps two dimensions (a view).
    pub fn transpose(&self, d0: isize, d1: isize) -> Result<Self> {
        let a = self.shape().resolve_dim(d0)?;
        let b = self.shape().resolve_dim(d1)?;
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Reorders dimensions: result dimension `i` is input dimension `perm[i]` (a view).
    pub fn permute(&self, perm: &[usize]) -> Result<Self> {
        let r = self.rank();
        let mut seen = vec![false; r];
        if perm.len() != r
            || perm
                .iter()
                .any(|&p| p >= r || std::mem::replace(&mut seen[p], true))
        {
            return Err(Error::shape(
                "permute",
                format!(
                    "{perm:?} is not a permutation of the {r} dimensions of {}",
                    self.shape()
                ),
            ));
        }
        let dims: Vec<usize> = perm.iter().map(|&p| self.dims()[p]).collect();
        let strides: Vec<usize> = perm.iter().map(|&p| self.layout.strides[p]).collect();
        Ok(self.with_layout(Layout {
            shape: Shape::new(dims),
            strides,
            offset: self.layout.offset,
        }))
    }

    /// Elements `start..start+len` along `dim` (a view).
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Self> {
        let d = self.shape().resolve_dim(dim)?;
        let size = self.dims()[d];
        // Checked: `start + len` from a caller may wrap past usize::MAX and pass a
        // plain comparison.
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::shape(
                "narrow",
                format!(
                    "range {start}..{start}+{len} out of bounds for dimension {d} of {}",
                    self.shape()
                ),
            ));
        }
        let mut dims = self.dims().to_vec();
        dims[d] = len;
        Ok(self.with_layout(Layout {
            shape: Shape::new(dims),
            strides: self.layout.strides.clone(),
            offset: self.layout.offset + start * self.layout.strides[d],
        }))
    }

    /// Reads as if of shape `shape` by the broadcasting rule (a view with zero strides).
    pub fn broadcast_as(&self, shape: impl Into<Shape>) -> Result<Self> {
        let layout = self.layout.broadcast_to("broadcast_as", &shape.into())?;
        Ok(self.with_layout(layout))
    }

    /// A dense tensor with the same elements: `self` (shared) when already dense,
    /// otherwise a strided copy.
    pub fn contiguous(&self) -> Result<Self> {
        if self.is_dense() {
            return Ok(self.clone());
        }
        self.deep_clone()
    }

    /// A contiguous tensor with this view's elements and where they start in its
    /// buffer: the view itself when it is contiguous (a parameter inside a flat buffer
    /// is read in place, at its offset), else a dense copy at offset 0. For kernels that
    /// take an offset ([`GemmSpec`](brrr_backend::GemmSpec),
    /// [`LayerNormSpec`](brrr_backend::LayerNormSpec),
    /// [`EmbeddingSpec`](brrr_backend::EmbeddingSpec)).
    pub fn contiguous_at(&self) -> Result<(Self, usize)> {
        if self.layout.is_contiguous() {
            let offset = self.layout.offset;
            return Ok((self.clone(), offset));
        }
        Ok((self.deep_clone()?, 0))
    }

    /// This view's elements and nothing more, dense: the tensor itself when its buffer
    /// holds exactly them, else a copy (for kernels whose element count is the length
    /// of a buffer).
    pub fn exact(&self) -> Result<Self> {
        if self.is_dense() && self.backend.len(&self.buf) == self.elem_count() {
            return Ok(self.clone());
        }
        self.deep_clone()
    }

    /// The whole buffer this view lies in, as a 1-D tensor (sharing it): how
    /// [`FlatBuffer`](crate::FlatBuffer) gets its buffer back from a lent part.
    pub(crate) fn whole_buffer(&self) -> Self {
        let len = self.backend.len(&self.buf);
        self.with_layout(Layout::contiguous([len]))
    }

    /// A dense private copy.
    pub fn deep_clone(&self) -> Result<Self> {
        let mut out = Tensor::alloc(&self.backend, self.shape().clone(), self.dtype)?;
        let dst_layout = out.layout.clone();
        self.layout.validate("copy")?;
        self.backend
            .copy_strided(&self.buf, &self.layout, out.buffer_mut()?, &dst_layout)?;
        Ok(out)
    }

    /// Writes `self` into the view `dst_layout` of `dst`'s buffer (same shape). This is
    /// how parts of a larger tensor are filled in (see [`Tensor::cat`]).
    pub fn copy_into_view(&self, dst: &mut Tensor<B>, dst_layout: &Layout) -> Result<()> {
        if dst_layout.shape != *self.shape() {
            return Err(Error::shape(
                "copy_into_view",
                format!(
                    "source {} vs destination view {}",
                    self.shape(),
                    dst_layout.shape
                ),
            ));
        }
        if dst.dtype != self.dtype {
            return Err(Error::DType {
                op: "copy_into_view",
                expected: dst.dtype,
                got: self.dtype,
            });
        }
        self.layout.validate("copy_into_view")?;
        dst_layout.validate("copy_into_view")?;
        let dst_span = dst_layout.span("copy_into_view")?;
        let dst_buf = Arc::get_mut(&mut dst.buf).ok_or_else(|| {
            Error::invalid(
                "copy_into_view",
                "destination buffer is shared with another tensor",
            )
        })?;
        Error::check_len("copy_into_view", dst_span, dst.backend.len(dst_buf))?;
        self.backend
            .copy_strided(&self.buf, &self.layout, dst_buf, dst_layout)
    }

    /// Concatenates tensors of equal shape except along `dim`.
    pub fn cat(parts: &[&Tensor<B>], dim: usize) -> Result<Tensor<B>> {
        let first = parts
            .first()
            .ok_or_else(|| Error::invalid("cat", "no tensors to concatenate"))?;
        let r = first.rank();
        if dim >= r {
            return Err(Error::shape(
                "cat",
                format!("dim {dim} out of range for rank {r}"),
            ));
        }
        let mut total = 0;
        for p in parts {
            let ok = p.rank() == r
                && (0..r).all(|i| i == dim || p.dims()[i] == first.dims()[i])
                && p.dtype == first.dtype;
            if !ok {
                return Err(Error::shape(
                    "cat",
                    format!(
                        "{} ({}) does not match {} ({}) outside dimension {dim}",
                        p.shape(),
                        p.dtype,
                        first.shape(),
                        first.dtype
                    ),
                ));
            }
            total += p.dims()[dim];
        }
        let mut dims = first.dims().to_vec();
        dims[dim] = total;
        let mut out = Tensor::alloc(&first.backend, dims, first.dtype)?;
        let mut start = 0;
        for p in parts {
            let view = out
                .narrow(dim as isize, start, p.dims()[dim])?
                .layout
                .clone();
            p.copy_into_view(&mut out, &view)?;
            start += p.dims()[dim];
        }
        Ok(out)
    }
}

fn truncate(data: HostData, n: usize) -> HostData {
    match data {
        HostData::F16(mut v) => {
            v.truncate(n);
            HostData::F16(v)
        }
        HostData::BF16(mut v) => {
            v.truncate(n);
            HostData::BF16(v)
        }
        HostData::F32(mut v) => {
            v.truncate(n);
            HostData::F32(v)
        }
        HostData::F64(mut v) => {
            v.truncate(n);
            HostData::F64(v)
        }
        HostData::I32(mut v) => {
            v.truncate(n);
            HostData::I32(v)
        }
        HostData::U32(mut v) => {
            v.truncate(n);
            HostData::U32(v)
        }
    }
}
