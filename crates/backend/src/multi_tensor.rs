//! The reference semantics of the multi-tensor ops ([`Backend::multi_tensor_fill`],
//! [`Backend::multi_tensor_sum_squares`], [`Backend::multi_tensor_adamw`]): the
//! one-buffer op on each buffer of the list, in order. The trait's defaults call these;
//! a backend that batches the list may call them too (to compare, or to turn batching
//! off).

use crate::{AdamWParams, AdamWTensors, Backend, DType, Error, ReduceOp, Result, UnaryOp};

/// [`Backend::fill`] on each buffer.
pub fn fill_each<B: Backend>(b: &B, bufs: &mut [&mut B::Buffer], value: f64) -> Result<()> {
    for buf in bufs.iter_mut() {
        b.fill(buf, value)?;
    }
    Ok(())
}

/// Each buffer's sum of squares into a one-element f32, added to `out[0]` (zeroed
/// first) in list order: `0 + s₀` is `s₀` exactly, so this is the running sum that
/// starts from the first buffer's. A buffer's sum is [`Backend::sum_squares`] where the
/// backend fuses it, else the buffer widened to f32, squared and reduced
/// ([`UnaryOp::Square`], [`ReduceOp::Sum`]), as `Tensor::sum_squares` does it.
pub fn sum_squares_each<B: Backend>(b: &B, xs: &[&B::Buffer], out: &mut B::Buffer) -> Result<()> {
    const OP: &str = "multi_tensor_sum_squares";
    if b.dtype(out) != DType::F32 || b.len(out) == 0 {
        return Err(Error::invalid(
            OP,
            "out must be f32 with at least one element",
        ));
    }
    b.fill(out, 0.0)?;
    let mut one = b.alloc(DType::F32, 1)?;
    for x in xs {
        let n = b.len(x);
        if n == 0 {
            continue;
        }
        if b.has_fused_sum_squares() {
            b.sum_squares(x, 0, n, &mut one)?;
        } else {
            let mut wide = b.alloc(DType::F32, n)?;
            b.cast(x, &mut wide)?;
            let mut squares = b.alloc(DType::F32, n)?;
            b.unary(UnaryOp::Square, &wide, &mut squares)?;
            b.reduce(ReduceOp::Sum, &squares, 1, n, 1, &mut one)?;
        }
        b.axpy(1.0, &one, out, Some(0))?;
    }
    Ok(())
}

/// [`Backend::adamw`], or [`Backend::adamw_master`] for a parameter with a master, on
/// each parameter, with the weight decay zeroed where it does not decay.
pub fn adamw_each<B: Backend>(
    b: &B,
    params: &AdamWParams,
    tensors: &mut [AdamWTensors<'_, B::Buffer>],
    inv_scale: Option<&B::Buffer>,
    found_inf: Option<&B::Buffer>,
) -> Result<()> {
    if params.range.is_some() {
        return Err(Error::invalid(
            "multi_tensor_adamw",
            "a range selects part of one buffer; the list takes whole buffers",
        ));
    }
    for t in tensors.iter_mut() {
        let hp = AdamWParams {
            weight_decay: if t.decay { params.weight_decay } else { 0.0 },
            ..*params
        };
        match &mut t.master {
            None => b.adamw(&hp, t.param, t.grad, t.m, t.v, inv_scale, found_inf)?,
            Some(master) => {
                b.adamw_master(&hp, master, t.param, t.grad, t.m, t.v, inv_scale, found_inf)?
            }
        }
    }
    Ok(())
}

/// One chunk of a multi-tensor launch: elements `start .. start + len` of buffer
/// `buffer` of the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorChunk {
    /// Which buffer of the list.
    pub buffer: usize,
    /// Its first element.
    pub start: usize,
    /// Elements in the chunk, `1..=chunk`.
    pub len: usize,
}

/// How a backend that batches a list cuts it into work: every buffer into chunks of
/// `chunk` elements (its last one shorter), numbered in list order; an empty buffer has
/// none. brrr-cuda's multi-tensor kernels hand chunk `c` to a block, which finds its
/// buffer from the table of each buffer's first chunk number (apex's
/// `multi_tensor_apply` cuts the same way). `chunk` must be at least 1.
pub fn chunks(lens: &[usize], chunk: usize) -> Result<Vec<TensorChunk>> {
    if chunk == 0 {
        return Err(Error::invalid(
            "multi_tensor::chunks",
            "chunk must be at least 1",
        ));
    }
    let mut out = Vec::new();
    for (buffer, &n) in lens.iter().enumerate() {
        out.extend((0..n).step_by(chunk).map(|start| TensorChunk {
            buffer,
            start,
            len: chunk.min(n - start),
        }));
    }
    Ok(out)
}
