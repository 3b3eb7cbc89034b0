//! Walking strided views: the index arithmetic behind `copy_strided` and broadcasting
//! binary ops.
//!
//! Dimensions of size 1 are dropped and neighbours that are contiguous with each other
//! in *every* operand are merged (NumPy's iterator does the same), so a contiguous
//! tensor becomes one long run and a `[rows, cols] + [cols]` bias add becomes rows of
//! `cols` elements: the inner loops then run over long stretches with fixed strides.

use brrr_backend::{Error, Layout, Result};

/// `N` operand views of one shape, with merged dimensions.
pub(crate) struct Walk<const N: usize> {
    /// Sizes after merging, outermost first; never empty.
    dims: Vec<usize>,
    /// Per operand, the stride of each merged dimension.
    strides: [Vec<usize>; N],
    offsets: [usize; N],
}

impl<const N: usize> Walk<N> {
    /// Plans a walk over `layouts`, which must all have the same shape.
    pub(crate) fn new(layouts: [&Layout; N]) -> Self {
        let shape = layouts[0].shape.dims();
        let mut dims: Vec<usize> = Vec::with_capacity(shape.len());
        let mut strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::new());
        for (ax, &d) in shape.iter().enumerate() {
            if d == 1 {
                continue; // contributes no offsets
            }
            // Merge into the previous (outer) dimension when, for every operand, stepping
            // the outer one equals stepping this one `d` times.
            let mergeable = !dims.is_empty()
                && (0..N).all(|k| strides[k].last() == Some(&(layouts[k].strides[ax] * d)));
            if mergeable {
                *dims.last_mut().expect("dims is not empty") *= d;
                for k in 0..N {
                    *strides[k].last_mut().expect("same length as dims") = layouts[k].strides[ax];
                }
            } else {
                dims.push(d);
                for k in 0..N {
                    strides[k].push(layouts[k].strides[ax]);
                }
            }
        }
        if dims.is_empty() {
            dims.push(1);
            for s in &mut strides {
                s.push(0);
            }
        }
        Walk {
            dims,
            strides,
            offsets: std::array::from_fn(|k| layouts[k].offset),
        }
    }

    /// Calls `f(pos, offsets, strides, len)` for consecutive runs that cover the flat
    /// (row-major) positions `start..end` of the view: `len` elements starting at flat
    /// position `pos`, where operand `k`'s elements are at `offsets[k] + i * strides[k]`.
    /// Runs are at most `max_run` long and never cross the innermost dimension.
    /// (`inline(always)` so that, called inside the SIMD dispatch, `f` is compiled for
    /// the dispatched instruction set too.)
    #[inline(always)]
    pub(crate) fn runs(
        &self,
        start: usize,
        end: usize,
        max_run: usize,
        mut f: impl FnMut(usize, [usize; N], [usize; N], usize),
    ) {
        let rank = self.dims.len();
        let inner = self.dims[rank - 1];
        let inner_strides: [usize; N] = std::array::from_fn(|k| self.strides[k][rank - 1]);
        let mut pos = start;
        while pos < end {
            let (mut row, col) = (pos / inner, pos % inner);
            let len = (inner - col).min(end - pos).min(max_run.max(1));
            let mut offs: [usize; N] =
                std::array::from_fn(|k| self.offsets[k] + col * inner_strides[k]);
            for ax in (0..rank - 1).rev() {
                let i = row % self.dims[ax];
                row /= self.dims[ax];
                for (o, s) in offs.iter_mut().zip(&self.strides) {
                    *o += i * s[ax];
                }
            }
            f(pos, offs, inner_strides, len);
            pos += len;
        }
    }
}

/// Checks a layout for `op`: rank and strides consistent, shape `expected`, and every
/// element it addresses inside a buffer of `buf_len` elements.
pub(crate) fn check_layout(
    op: &'static str,
    what: &str,
    layout: &Layout,
    expected: &[usize],
    buf_len: usize,
) -> Result<()> {
    layout.validate(op)?;
    if layout.shape.dims() != expected {
        return Err(Error::shape(
            op,
            format!("{what} has shape {}, expected {:?}", layout.shape, expected),
        ));
    }
    // Checked: a wrapped span would pass the length check.
    let span = layout
        .span(op)
        .map_err(|e| Error::invalid(op, format!("{what}: {e}")))?;
    Error::check_len(op, span, buf_len)
}
