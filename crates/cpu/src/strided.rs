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
        if start >= end {
            return;
        }
        // Where `start` is: its index in every outer dimension and the offsets of its
        // row. Divisions happen once here; after that the index is advanced like an
        // odometer, rather than divided out again for every run (attention's heads are
        // runs of only `head_dim` elements).
        let (mut row, mut col) = (start / inner, start % inner);
        let mut index = vec![0usize; rank - 1];
        let mut base = self.offsets;
        for ax in (0..rank - 1).rev() {
            index[ax] = row % self.dims[ax];
            row /= self.dims[ax];
            for (b, s) in base.iter_mut().zip(&self.strides) {
                *b += index[ax] * s[ax];
            }
        }
        let mut pos = start;
        while pos < end {
            let len = (inner - col).min(end - pos).min(max_run.max(1));
            let offs: [usize; N] = std::array::from_fn(|k| base[k] + col * inner_strides[k]);
            f(pos, offs, inner_strides, len);
            pos += len;
            col += len;
            if col == inner {
                col = 0;
                self.next_row(&mut index, &mut base);
            }
        }
    }

    /// Advances `index` (and the row offsets `base`) to the next row: the last outer
    /// dimension steps by one, carrying into the ones before it.
    #[inline(always)]
    fn next_row(&self, index: &mut [usize], base: &mut [usize; N]) {
        for ax in (0..index.len()).rev() {
            index[ax] += 1;
            for (b, s) in base.iter_mut().zip(&self.strides) {
                *b += s[ax];
            }
            if index[ax] < self.dims[ax] {
                return;
            }
            // Wrapped: back to 0 in this dimension (the sum above added dims·stride).
            for (b, s) in base.iter_mut().zip(&self.strides) {
                *b -= self.dims[ax] * s[ax];
            }
            index[ax] = 0;
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

#[cfg(test)]
mod tests {
    use super::*;
    use brrr_backend::Shape;

    /// Every run's offsets against `Layout::offsets` (one element at a time), for views
    /// whose rows do not merge, and walks that start and end inside rows.
    #[test]
    fn runs_visit_every_offset_in_order_from_any_start() {
        let dims = [2usize, 3, 4, 5];
        // A permuted view (heads split out of rows) and a broadcast one.
        let permuted = Layout {
            shape: Shape::new(dims),
            strides: vec![60, 5, 15, 1],
            offset: 7,
        };
        let broadcast = Layout {
            shape: Shape::new(dims),
            strides: vec![0, 5, 0, 1],
            offset: 2,
        };
        let want: [Vec<usize>; 2] = [permuted.offsets().collect(), broadcast.offsets().collect()];
        let n = dims.iter().product::<usize>();
        let walk = Walk::new([&permuted, &broadcast]);
        for (start, end, max_run) in [
            (0, n, usize::MAX),
            (3, n, 2),
            (17, 91, 3),
            (59, 61, usize::MAX),
        ] {
            let mut got: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
            let mut next = start;
            walk.runs(start, end, max_run, |pos, offs, strides, len| {
                assert_eq!(pos, next, "runs are consecutive");
                next += len;
                for k in 0..2 {
                    got[k].extend((0..len).map(|i| offs[k] + i * strides[k]));
                }
            });
            assert_eq!(next, end);
            for k in 0..2 {
                assert_eq!(got[k], want[k][start..end], "operand {k}, {start}..{end}");
            }
        }
    }
}
