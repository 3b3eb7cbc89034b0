//! The reductions' launches (`kernels/reduce.cu`): one pass where the outputs are many,
//! and a split into partial results and a fixed-order final pass where they are few.
//!
//! Why split: the one-pass kernels give a row one block, and an output column one
//! thread. A gradient norm's row of 38M elements is then one block on one SM of 132, and
//! a bias gradient (768 columns summed over 8192 rows) is 768 threads each waiting on
//! 8192 loads one after another: both leave most of the GPU idle (`cuda_bench reduce`
//! times each against its split).
//! The split sizes depend on the problem's sizes only, never on the GPU, so a result
//! has the same bits on every device (and on the emulator).

use crate::backend::{CudaBackend, CudaBuffer};
use crate::device::{Arg, DevPtr, LaunchCfg};
use crate::kernels::Family;
use crate::ops::{reduce_code, suffix};
use brrr_backend::{DType, ReduceOp, Result};

/// Blocks a split row reduction aims for in all: a few per SM of the largest GPUs.
const ROW_SPLIT_BLOCKS: usize = 512;
/// The fewest elements a block of a split row takes: 16 per thread of 1024 threads.
const ROW_SPLIT_MIN_CHUNK: usize = 16 * 1024;
/// Rows per chunk of a split column reduction: 8 per thread of a 32 x 8 block.
const COL_CHUNK_ROWS: usize = 64;
/// From this many output columns on, one thread per column fills a GPU by itself.
const COL_SPLIT_BELOW: usize = 1 << 17;
/// CUDA's limit on `gridDim.y`, which counts a column split's chunks.
const MAX_GRID_Y: usize = 65_535;

/// How a reduction along rows is shared out: `splits` blocks per row, each over `chunk`
/// consecutive elements (the last may be shorter). `splits == 1` is one block per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowSplit {
    pub splits: usize,
    pub chunk: usize,
}

/// The split of `outer` rows of `n` elements: enough blocks to fill a GPU when the rows
/// are few, none of them with less than [`ROW_SPLIT_MIN_CHUNK`] elements.
pub(crate) fn row_split(outer: usize, n: usize) -> RowSplit {
    let splits = ROW_SPLIT_BLOCKS
        .div_ceil(outer.max(1))
        .min(n / ROW_SPLIT_MIN_CHUNK)
        .max(1);
    RowSplit {
        splits,
        chunk: n.div_ceil(splits),
    }
}

/// How a reduction down columns is shared out: `chunks` chunks of `rows_per_chunk` rows,
/// or `None` for one thread per output column (the outputs are many, or the rows few).
pub(crate) fn col_split(cols: usize, n: usize) -> Option<(usize, usize)> {
    if cols >= COL_SPLIT_BELOW || n < 2 * COL_CHUNK_ROWS {
        return None;
    }
    let rows_per_chunk = COL_CHUNK_ROWS.max(n.div_ceil(MAX_GRID_Y));
    Some((rows_per_chunk, n.div_ceil(rows_per_chunk)))
}

/// The accumulator dtype of a float dtype's kernels (f64 for f64, else f32).
fn acc_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

impl CudaBackend {
    /// The one-pass kernels whatever the sizes: a block per row (`inner == 1`), or a
    /// thread per output column. What [`reduce_rows`](Self::reduce_rows) and
    /// [`reduce_cols`](Self::reduce_cols) run when they do not split, and the baseline
    /// the benchmark measures the split against.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reduce_one_pass(
        &self,
        op: ReduceOp,
        dtype: DType,
        x: DevPtr,
        outer: usize,
        n: usize,
        inner: usize,
        out: DevPtr,
    ) -> Result<()> {
        let (s, code) = (suffix(dtype), reduce_code(op));
        if inner == 1 {
            return self.launch(
                Family::Reduce,
                &format!("reduce_rows_{s}"),
                self.rows_cfg(outer, n),
                &[
                    Arg::Ptr(out),
                    Arg::Ptr(x),
                    Arg::U64(outer as u64),
                    Arg::U64(n as u64),
                    Arg::I32(code),
                ],
            );
        }
        self.launch(
            Family::Reduce,
            &format!("reduce_cols_{s}"),
            self.flat_cfg(outer * inner),
            &[
                Arg::Ptr(out),
                Arg::Ptr(x),
                Arg::U64(outer as u64),
                Arg::U64(n as u64),
                Arg::U64(inner as u64),
                Arg::I32(code),
            ],
        )
    }

    /// `out[o] = op_j x[o, j]` over `outer` contiguous rows of `n` elements of `dtype`
    /// from `x`; the split form when [`row_split`] says so.
    pub(crate) fn reduce_rows(
        &self,
        op: ReduceOp,
        dtype: DType,
        x: DevPtr,
        outer: usize,
        n: usize,
        out: DevPtr,
    ) -> Result<()> {
        let code = reduce_code(op);
        let split = row_split(outer, n);
        if split.splits == 1 {
            return self.reduce_one_pass(op, dtype, x, outer, n, 1, out);
        }
        let partial = self.new_buffer(acc_dtype(dtype), outer * split.splits)?;
        self.reduce_rows_partial(code, dtype, x, outer, n, split, false, partial.device_ptr())?;
        self.reduce_rows_final(code, dtype, &partial, outer, split.splits, n, out)
    }

    /// Combines each row's `splits` partial results into `out` (of `dtype`), in order.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reduce_rows_final(
        &self,
        code: i32,
        dtype: DType,
        partial: &CudaBuffer,
        outer: usize,
        splits: usize,
        n: usize,
        out: DevPtr,
    ) -> Result<()> {
        self.launch(
            Family::Reduce,
            &format!("reduce_rows_final_{}", suffix(dtype)),
            self.rows_cfg(outer, splits * 4),
            &[
                Arg::Ptr(out),
                Arg::Ptr(partial.device_ptr()),
                Arg::U64(outer as u64),
                Arg::U64(splits as u64),
                Arg::U64(n as u64),
                Arg::I32(code),
            ],
        )
    }

    /// The partial results of a split row reduction, one per block, into `partial`
    /// (squaring each element first if `square`).
    #[allow(clippy::too_many_arguments)]
    fn reduce_rows_partial(
        &self,
        code: i32,
        dtype: DType,
        x: DevPtr,
        outer: usize,
        n: usize,
        split: RowSplit,
        square: bool,
        partial: DevPtr,
    ) -> Result<()> {
        // The block size is the one-pass kernel's for a row of `chunk` elements: with one
        // split, both give the same bits. A freed temporary is safe: the allocator hands
        // its block out again only to work later on the same stream.
        self.launch(
            Family::Reduce,
            &format!("reduce_rows_partial_{}", suffix(dtype)),
            self.rows_cfg(outer * split.splits, split.chunk),
            &[
                Arg::Ptr(partial),
                Arg::Ptr(x),
                Arg::U64(outer as u64),
                Arg::U64(n as u64),
                Arg::U64(split.splits as u64),
                Arg::U64(split.chunk as u64),
                Arg::I32(code),
                Arg::I32(square as i32),
            ],
        )
    }

    /// `out[o, i] = op_r x[o, r, i]` for `inner > 1`: one thread per output column, or
    /// chunks of rows and a fixed-order sum of the chunks when [`col_split`] says so.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reduce_cols(
        &self,
        op: ReduceOp,
        dtype: DType,
        x: DevPtr,
        outer: usize,
        n: usize,
        inner: usize,
        out: DevPtr,
    ) -> Result<()> {
        let (s, code) = (suffix(dtype), reduce_code(op));
        let cols = outer * inner;
        let Some((rows_per_chunk, chunks)) = col_split(cols, n) else {
            return self.reduce_one_pass(op, dtype, x, outer, n, inner, out);
        };
        let partial = self.new_buffer(acc_dtype(dtype), chunks * cols)?;
        self.launch(
            Family::Reduce,
            &format!("reduce_cols_partial_{s}"),
            LaunchCfg {
                grid: (cols.div_ceil(32) as u32, chunks as u32, 1),
                block: (32, 8, 1),
                smem: 0,
            },
            &[
                Arg::Ptr(partial.device_ptr()),
                Arg::Ptr(x),
                Arg::U64(outer as u64),
                Arg::U64(n as u64),
                Arg::U64(inner as u64),
                Arg::U64(rows_per_chunk as u64),
                Arg::I32(code),
            ],
        )?;
        self.launch(
            Family::Reduce,
            &format!("reduce_cols_final_{s}"),
            self.flat_cfg(cols),
            &[
                Arg::Ptr(out),
                Arg::Ptr(partial.device_ptr()),
                Arg::U64(cols as u64),
                Arg::U64(chunks as u64),
                Arg::U64(n as u64),
                Arg::I32(code),
            ],
        )
    }

    /// `out[0] = Σ x[i]²` over `n` elements of `dtype` (f32, f16 or bf16) from `x`, into
    /// the f32 at `out`. The same split and order as squaring into an f32 temporary and
    /// [`reduce_rows`](Self::reduce_rows) of it, so the same bits.
    pub(crate) fn sum_squares_into(
        &self,
        dtype: DType,
        x: DevPtr,
        n: usize,
        out: DevPtr,
    ) -> Result<()> {
        let code = reduce_code(ReduceOp::Sum);
        let split = row_split(1, n);
        if split.splits == 1 {
            // One block: its partial result is the sum, already f32.
            return self.reduce_rows_partial(code, dtype, x, 1, n, split, true, out);
        }
        let partial = self.new_buffer(DType::F32, split.splits)?;
        self.reduce_rows_partial(code, dtype, x, 1, n, split, true, partial.device_ptr())?;
        self.reduce_rows_final(code, DType::F32, &partial, 1, split.splits, n, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_split_only_when_few_and_long() {
        assert_eq!(
            row_split(1, 1000),
            RowSplit {
                splits: 1,
                chunk: 1000
            }
        );
        assert_eq!(
            row_split(1, 0),
            RowSplit {
                splits: 1,
                chunk: 0
            }
        );
        assert_eq!(row_split(4096, 1 << 20).splits, 1);
        // A 124M model's token embedding gradient: 512 blocks of 75,456 elements.
        let wte = 50_304 * 768;
        let s = row_split(1, wte);
        assert_eq!(s.splits, 512);
        assert!(s.splits * s.chunk >= wte && (s.splits - 1) * s.chunk < wte);
        assert_eq!(row_split(1, 3 * ROW_SPLIT_MIN_CHUNK - 1).splits, 2);
        assert_eq!(row_split(300, 1 << 20).splits, 2);
    }

    #[test]
    fn columns_split_only_when_few_and_long() {
        assert_eq!(col_split(768, 100), None);
        assert_eq!(col_split(1 << 17, 1 << 20), None);
        // A bias gradient of 768 columns over 8 x 1024 rows: 128 chunks of 64 rows.
        assert_eq!(col_split(768, 8192), Some((64, 128)));
        let (rows, chunks) = col_split(7, 10_000_000).unwrap();
        assert!(chunks <= MAX_GRID_Y && rows * chunks >= 10_000_000);
    }
}
