//! [`FlatBuffer`]: many tensors in one device buffer, each written in place through a
//! view.

use crate::Tensor;
use brrr_backend::{Backend, DType, ElemRange, Error, Result, Shape};

/// One named part of a [`FlatBuffer`]: where it starts and its shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlatPart {
    /// The name it was given in [`FlatBuffer::zeros`] (looked up by
    /// [`FlatBuffer::index_of`]).
    pub name: String,
    /// Where the part starts in the buffer, in elements (not bytes).
    pub offset: usize,
    /// The part's shape; it occupies `shape.elem_count()` elements from `offset`.
    pub shape: Shape,
}

/// Tensors laid end to end in one buffer.
///
/// llm.c keeps every parameter in one `params_memory` and every gradient in one
/// `grads_memory`: one allocation, and a bucket of gradients is all-reduced where it
/// lies, without gathering it first (PyTorch's DDP does the same with
/// `gradient_as_bucket_view`). A [`Tensor`] writes in place only while it holds its
/// buffer alone, so that a view never changes behind another's back, and the views of
/// one flat buffer all share it. `FlatBuffer` is the owner that reconciles the two: it
/// keeps the buffer and lends one part at a time ([`FlatBuffer::with_part`]) as a view
/// that holds the buffer alone while it is lent. The kernels write into that view at its
/// offset (the backend's ops on part of a buffer: `GemmSpec`'s offsets,
/// `EmbeddingSpec::table_at`, `axpy`'s `y_offset`, ...), so nothing is copied.
///
/// ```
/// use brrr_cpu::CpuBackend;
/// use brrr_tensor::{DType, FlatBuffer, Tensor};
///
/// let cpu = CpuBackend::new();
/// let mut grads = FlatBuffer::zeros(&cpu, DType::F32, [("w", vec![2, 3]), ("b", vec![3])])?;
/// let x = Tensor::from_f32(&cpu, &[1.0, 2.0], [2, 1], DType::F32)?;
/// let dy = Tensor::from_f32(&cpu, &[1.0, 0.0, -1.0], [1, 3], DType::F32)?;
/// // dW += x · dy, written where "w" lives in the flat buffer.
/// grads.with_part(0, |w| Tensor::matmul_into(w, &x, &dy, 1.0, 1.0))?;
/// grads.with_part(1, |b| b.add_(&dy.reshape([3])?))?;
/// assert_eq!(grads.whole()?.to_vec_f32()?, [1.0, 0.0, -1.0, 2.0, 0.0, -2.0, 1.0, 0.0, -1.0]);
/// # Ok::<(), brrr_tensor::Error>(())
/// ```
pub struct FlatBuffer<B: Backend> {
    /// `None` only while a part is lent, or after a lending closure panicked.
    whole: Option<Tensor<B>>,
    parts: Vec<FlatPart>,
}

impl<B: Backend> FlatBuffer<B> {
    /// A zeroed buffer of `dtype` holding the named shapes end to end, in order.
    pub fn zeros<N, S>(
        backend: &B,
        dtype: DType,
        parts: impl IntoIterator<Item = (N, S)>,
    ) -> Result<Self>
    where
        N: Into<String>,
        S: Into<Shape>,
    {
        let mut laid = Vec::new();
        let mut offset = 0usize;
        for (name, shape) in parts {
            let shape = shape.into();
            laid.push(FlatPart {
                name: name.into(),
                offset,
                shape: shape.clone(),
            });
            offset = offset.checked_add(shape.elem_count()).ok_or_else(|| {
                Error::invalid("FlatBuffer::zeros", "the parts' total size overflows usize")
            })?;
        }
        let whole = Tensor::zeros(backend, [offset], dtype)?;
        Ok(FlatBuffer {
            whole: Some(whole),
            parts: laid,
        })
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[FlatPart] {
        &self.parts
    }

    /// The index of the part called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.parts.iter().position(|p| p.name == name)
    }

    /// Part `i`'s elements in the buffer, for ops that take a range
    /// ([`AdamWParams::range`](brrr_backend::AdamWParams::range)).
    pub fn range(&self, i: usize) -> Result<ElemRange> {
        let p = self.part(i)?;
        Ok(ElemRange::new(p.offset, p.shape.elem_count()))
    }

    /// The whole buffer as a 1-D tensor: for work on all of it at once (an all-reduce,
    /// a norm, the optimizer through ranges).
    pub fn whole(&self) -> Result<&Tensor<B>> {
        self.whole.as_ref().ok_or_else(lost)
    }

    /// The whole buffer, writable in place (while no [`FlatBuffer::view`] is alive).
    pub fn whole_mut(&mut self) -> Result<&mut Tensor<B>> {
        self.whole.as_mut().ok_or_else(lost)
    }

    /// Part `i` as a view for reading. While it lives the buffer is shared, so writes
    /// (through [`FlatBuffer::with_part`] or [`FlatBuffer::whole_mut`]) are refused.
    pub fn view(&self, i: usize) -> Result<Tensor<B>> {
        let p = self.part(i)?;
        self.whole()?
            .narrow(0, p.offset, p.shape.elem_count())?
            .reshape(p.shape.clone())
    }

    /// Lends part `i` to `f` as a view that holds the buffer alone, so in-place ops
    /// write into it where it lies; the buffer comes back when `f` returns, whatever it
    /// returns.
    pub fn with_part<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut Tensor<B>) -> Result<R>,
    ) -> Result<R> {
        let p = self.part(i)?.clone();
        let whole = self.whole.take().ok_or_else(lost)?;
        let view = whole
            .narrow(0, p.offset, p.shape.elem_count())
            .and_then(|v| v.reshape(p.shape.clone()));
        let mut view = match view {
            Ok(v) => v,
            Err(e) => {
                self.whole = Some(whole);
                return Err(e);
            }
        };
        // The view is now the buffer's only holder (unless a `view()` is still alive,
        // in which case the op inside `f` refuses to write and says so).
        drop(whole);
        let result = f(&mut view);
        self.whole = Some(view.whole_buffer());
        result
    }

    fn part(&self, i: usize) -> Result<&FlatPart> {
        self.parts.get(i).ok_or_else(|| {
            Error::invalid(
                "FlatBuffer",
                format!("part {i} of a buffer of {} parts", self.parts.len()),
            )
        })
    }
}

/// The error once the buffer is gone: only a `with_part` closure that panicked loses it.
fn lost() -> Error {
    Error::invalid(
        "FlatBuffer",
        "the buffer was lost: an earlier with_part closure panicked",
    )
}
