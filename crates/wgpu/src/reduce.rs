//! The reductions' dispatches (`shaders/reduce.wgsl`): one pass where the outputs are
//! many, and a split into partial results and a fixed-order final pass where they are
//! few.
//!
//! Why split: the one-pass kernels give a row one workgroup and an output column one
//! invocation. A whole gradient's sum (the gradient norm) is then one workgroup on one
//! compute unit, and a bias gradient (768 columns summed over 8192 rows) is three
//! workgroups whose invocations each wait on 8192 loads in turn: both leave most of a GPU
//! idle. brrr-cuda splits the same way (`crates/cuda/src/reduce.rs`).
//!
//! The split sizes depend on the problem's sizes only, never on the adapter, so a result
//! has the same bits on every device that rounds f32 the same way.

use crate::WgpuBackend;
use crate::device::{Dispatch, Kernel, Params};
use crate::ops::{WG, u32_of as u};
use crate::shaders::Family;
use brrr_backend::{DType, Result};

/// Workgroups a split row reduction aims for in all: a few per compute unit of a large
/// GPU.
const ROW_SPLIT_GROUPS: usize = 512;
/// The fewest elements a workgroup of a split row takes: 128 per invocation of 256.
/// Larger than brrr-cuda's (16 per thread) because a split costs a temporary buffer and
/// a second dispatch, which wgpu makes dearer than a CUDA launch: on lavapipe a split
/// of 100,000 elements into 24 was 0.7x the one pass, of 16M into 512 was 4x.
const ROW_SPLIT_MIN_CHUNK: usize = 128 * 256;
/// Rows per chunk of a split column reduction.
const COL_CHUNK_ROWS: usize = 128;
/// The fewest rows a column reduction splits: below, each invocation's loop is short.
const COL_SPLIT_MIN_ROWS: usize = 4 * COL_CHUNK_ROWS;
/// From this many output columns on, one invocation per column fills a GPU by itself.
const COL_SPLIT_BELOW: usize = 1 << 17;

/// How a reduction along rows is shared out: `splits` workgroups per row, each over
/// `chunk` consecutive elements (the last may be shorter). `splits == 1` is one
/// workgroup per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowSplit {
    pub splits: usize,
    pub chunk: usize,
}

/// The split of `outer` rows of `n` elements: enough workgroups to fill a GPU when the
/// rows are few, none of them with less than [`ROW_SPLIT_MIN_CHUNK`] elements.
pub(crate) fn row_split(outer: usize, n: usize) -> RowSplit {
    let splits = ROW_SPLIT_GROUPS
        .div_ceil(outer.max(1))
        .min(n / ROW_SPLIT_MIN_CHUNK)
        .max(1);
    RowSplit {
        splits,
        chunk: n.div_ceil(splits),
    }
}

/// How a reduction down columns is shared out: `(rows_per_chunk, chunks)`, or `None` for
/// one invocation per output column (the outputs are many, or the rows few).
pub(crate) fn col_split(cols: usize, n: usize) -> Option<(usize, usize)> {
    if cols >= COL_SPLIT_BELOW || n < COL_SPLIT_MIN_ROWS {
        return None;
    }
    Some((COL_CHUNK_ROWS, n.div_ceil(COL_CHUNK_ROWS)))
}

impl WgpuBackend {
    /// `out[o, i] = op_r x[o, r, i]` on f32 buffers: rows (`inner == 1`) or columns, split
    /// when [`row_split`] or [`col_split`] says so. `code` is the op's shader code. The
    /// two passes of a split go to the device in one submission, so a split costs one
    /// more dispatch, not one more submission.
    pub(crate) fn reduce_f32(
        &self,
        code: u32,
        x: &wgpu::Buffer,
        [outer, n, inner]: [usize; 3],
        out: &wgpu::Buffer,
    ) -> Result<()> {
        // The first pass, the outputs, and where output o's partial results lie:
        // partial[o * first_mul + k * stride] for k < parts.
        let ((k1, p1, g1), outputs, [parts, first_mul, stride]) = if inner == 1 {
            let split = row_split(outer, n);
            if split.splits == 1 {
                return self.reduce_one_pass(code, x, [outer, n, inner], out);
            }
            let parts = split.splits;
            (
                self.rows_dispatch(code, outer, n, split)?,
                outer,
                [parts, parts, 1],
            )
        } else {
            let cols = outer * inner;
            let Some((rows_per_chunk, chunks)) = col_split(cols, n) else {
                return self.reduce_one_pass(code, x, [outer, n, inner], out);
            };
            let p = Params::new()
                .u(u(outer)?)
                .u(u(n)?)
                .u(u(inner)?)
                .u(code)
                .u(u(rows_per_chunk)?)
                .u(u(chunks)?);
            let grid = self.inner.grid((chunks * cols).div_ceil(WG))?;
            ((COLUMNS_PARTIAL, p, grid), cols, [chunks, 1, cols])
        };
        let partial = self.inner.alloc(DType::F32, outputs * parts)?;
        let fin_params = Params::new()
            .u(u(outputs)?)
            .u(u(parts)?)
            .u(u(first_mul)?)
            .u(u(stride)?)
            .u(u(n)?)
            .u(code);
        let fin_grid = self.inner.grid(outputs.div_ceil(WG))?;
        self.inner.dispatch_seq(&[
            Dispatch {
                kernel: &k1,
                params: p1,
                bufs: &[x, &partial.buf],
                groups: g1,
            },
            Dispatch {
                kernel: &FINAL,
                params: fin_params,
                bufs: &[&partial.buf, out],
                groups: fin_grid,
            },
        ])
    }

    /// The one-pass kernels whatever the sizes: a workgroup per row (`inner == 1`), or an
    /// invocation per output column. What [`reduce_f32`](Self::reduce_f32) runs when it
    /// does not split, and the baseline [`bench_reduce`](crate::bench::bench_reduce)
    /// measures the split against.
    pub(crate) fn reduce_one_pass(
        &self,
        code: u32,
        x: &wgpu::Buffer,
        [outer, n, inner]: [usize; 3],
        out: &wgpu::Buffer,
    ) -> Result<()> {
        let (k, p, grid) = if inner == 1 {
            let whole = RowSplit {
                splits: 1,
                chunk: n,
            };
            self.rows_dispatch(code, outer, n, whole)?
        } else {
            let p = Params::new().u(u(outer)?).u(u(n)?).u(u(inner)?).u(code);
            (COLUMNS, p, self.inner.grid((outer * inner).div_ceil(WG))?)
        };
        self.inner.dispatch(&k, &p, &[x, out], grid)
    }

    /// The `rows` kernel over `outer` rows of `n`: `outer * split.splits` workgroups, each
    /// writing one result.
    fn rows_dispatch(
        &self,
        code: u32,
        outer: usize,
        n: usize,
        split: RowSplit,
    ) -> Result<(Kernel<'static>, Params, [u32; 3])> {
        let p = Params::new()
            .u(u(outer)?)
            .u(u(n)?)
            .u(u(split.splits)?)
            .u(u(split.chunk)?)
            .u(code);
        Ok((ROWS, p, self.inner.grid(outer * split.splits)?))
    }
}

const ROWS: Kernel<'static> = Kernel::new(Family::Reduce, "rows");
const COLUMNS: Kernel<'static> = Kernel::new(Family::Reduce, "columns");
const COLUMNS_PARTIAL: Kernel<'static> = Kernel::new(Family::Reduce, "columns_partial");
const FINAL: Kernel<'static> = Kernel::new(Family::Reduce, "final");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_split_only_when_few_and_long() {
        assert_eq!(row_split(1, 65_535).splits, 1);
        assert_eq!(
            row_split(1, 65_536),
            RowSplit {
                splits: 2,
                chunk: 32_768
            }
        );
        let s = row_split(1, 100_000);
        assert_eq!((s.splits, s.chunk), (3, 33_334));
        assert!(s.splits * s.chunk >= 100_000 && (s.splits - 1) * s.chunk < 100_000);
        assert_eq!(row_split(1, 50304 * 768).splits, ROW_SPLIT_GROUPS);
        assert_eq!(row_split(600, 1 << 20).splits, 1);
        assert_eq!(row_split(0, 0).splits, 1);
    }

    #[test]
    fn columns_split_only_when_few_and_tall() {
        assert_eq!(col_split(768, 8192), Some((128, 64)));
        assert_eq!(col_split(768, 2048), Some((128, 16)));
        assert_eq!(col_split(768, 511), None);
        assert_eq!(col_split(66, 150), None);
        assert_eq!(col_split(1 << 17, 8192), None);
    }
}
