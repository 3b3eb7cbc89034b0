//! Multi-tensor ops: zeroing, the sum of squares and AdamW over a list of buffers in one
//! launch (`optim.cu`'s multi-tensor apply, as apex's `multi_tensor_apply`).
//!
//! The host writes one [`MultiTensorRow`] per non-empty buffer, numbers the buffers'
//! chunks of [`CHUNK`] elements across the list, and uploads the table (64 bytes a
//! buffer, 9.5 KB for GPT-2 124M) through the staged copy every upload uses. Buffers
//! whose dtypes call for different kernels go into one table each, so a list of one
//! dtype is one launch.

use crate::backend::{CudaBackend, CudaBuffer, fill_pattern};
use crate::device::{Arg, Pattern};
use crate::kernels::Family;
use crate::ops::{
    MultiTensorRow, adamw_args, check_float, check_master_dtypes, reduce_code, suffix,
};
use brrr_backend::{AdamWParams, AdamWTensors, DType, Error, ReduceOp, Result};

/// Elements per chunk. A chunk is one block's work at a time: large enough that a block
/// runs long against its launch and search, small enough that a 768-element bias and a
/// 38M-element embedding both spread over the GPU. The split depends on sizes alone, so
/// results do not depend on the device.
pub(crate) const CHUNK: usize = 1 << 14;

/// The rows of one launch and the number of chunks they hold.
#[derive(Default)]
struct Table {
    rows: Vec<MultiTensorRow>,
    chunks: u64,
}

impl Table {
    fn push(&mut self, ptr: [u64; 5], n: usize, weight_decay: f32) {
        if n == 0 {
            return;
        }
        self.rows.push(MultiTensorRow {
            ptr,
            n: n as u64,
            first_chunk: self.chunks,
            weight_decay,
            pad: 0,
        });
        self.chunks += n.div_ceil(CHUNK) as u64;
    }
}

/// The table for `key`, made on first use; tables stay in the order keys first appear.
fn table_for<K: PartialEq>(tables: &mut Vec<(K, Table)>, key: K) -> &mut Table {
    let i = match tables.iter().position(|(k, _)| *k == key) {
        Some(i) => i,
        None => {
            tables.push((key, Table::default()));
            tables.len() - 1
        }
    };
    &mut tables[i].1
}

impl CudaBackend {
    /// Uploads `table` and launches `kernel(lead.., rows, count, chunks, chunk, trail..)`.
    fn launch_table(&self, kernel: &str, table: &Table, lead: &[Arg], trail: &[Arg]) -> Result<()> {
        if table.chunks == 0 {
            return Ok(());
        }
        let bytes: &[u8] = bytemuck::cast_slice(&table.rows);
        let dev_rows = self.new_buffer(DType::U32, bytes.len() / 4)?;
        self.dev().copy_htod(dev_rows.device_ptr(), bytes, None)?;
        let mut args = lead.to_vec();
        args.extend([
            Arg::Ptr(dev_rows.device_ptr()),
            Arg::U64(table.rows.len() as u64),
            Arg::U64(table.chunks),
            Arg::U64(CHUNK as u64),
        ]);
        args.extend_from_slice(trail);
        // One block per chunk, up to the grid-stride cap; blocks loop over the rest.
        let cfg = self.flat_cfg((table.chunks as usize).saturating_mul(256));
        self.launch(Family::Optim, kernel, cfg, &args)
    }

    /// [`brrr_backend::Backend::multi_tensor_fill`]: one launch per dtype in the list.
    pub(crate) fn multi_fill(&self, bufs: &mut [&mut CudaBuffer], value: f64) -> Result<()> {
        let mut tables: Vec<(DType, Table)> = Vec::new();
        for b in bufs.iter() {
            table_for(&mut tables, b.dtype()).push([b.device_ptr(), 0, 0, 0, 0], b.len(), 0.0);
        }
        for (dtype, table) in &tables {
            let (kernel, bits) = match fill_pattern(*dtype, value) {
                Pattern::B16(v) => ("multi_tensor_fill_b16", u64::from(v)),
                Pattern::B32(v) => ("multi_tensor_fill_b32", u64::from(v)),
                Pattern::B64(v) => ("multi_tensor_fill_b64", v),
            };
            self.launch_table(kernel, table, &[], &[Arg::U64(bits)])?;
        }
        Ok(())
    }

    /// [`brrr_backend::Backend::multi_tensor_sum_squares`]: the squares of every chunk
    /// summed into one partial result each (one launch per dtype), then the partial
    /// results added in chunk order (`reduce_rows_final`).
    pub(crate) fn multi_sum_squares(&self, xs: &[&CudaBuffer], out: &mut CudaBuffer) -> Result<()> {
        const OP: &str = "multi_tensor_sum_squares";
        Error::check_dtype(OP, DType::F32, out.dtype())?;
        if out.is_empty() {
            return Err(Error::shape(OP, "out has no element to hold the sum"));
        }
        let mut tables: Vec<(DType, Table)> = Vec::new();
        for (i, x) in xs.iter().enumerate() {
            if !matches!(x.dtype(), DType::F32 | DType::F16 | DType::BF16) {
                return Err(Error::invalid(
                    OP,
                    format!("buffer {i} must be f32, f16 or bf16, got {}", x.dtype()),
                ));
            }
            table_for(&mut tables, x.dtype()).push([x.device_ptr(), 0, 0, 0, 0], x.len(), 0.0);
        }
        let chunks: u64 = tables.iter().map(|(_, t)| t.chunks).sum();
        if chunks == 0 {
            return self.dev().memset(out.device_ptr(), Pattern::B32(0), 1);
        }
        let partial = self.new_buffer(DType::F32, chunks as usize)?;
        let mut base = 0usize;
        for (dtype, table) in &tables {
            let kernel = format!("multi_tensor_sum_squares_{}", suffix(*dtype));
            let at = Arg::Ptr(partial.ptr_at(base));
            self.launch_table(&kernel, table, &[at], &[])?;
            base += table.chunks as usize;
        }
        let code = reduce_code(ReduceOp::Sum);
        let n = chunks as usize;
        self.reduce_rows_final(code, DType::F32, &partial, 1, n, n, out.device_ptr())
    }

    /// [`brrr_backend::Backend::multi_tensor_adamw`]: one launch per combination of
    /// (parameter dtype, gradient dtype, master or not) in the list; every buffer is
    /// checked as `adamw` and `adamw_master` check theirs before anything runs.
    pub(crate) fn multi_adamw(
        &self,
        params: &AdamWParams,
        tensors: &mut [AdamWTensors<'_, CudaBuffer>],
        inv_scale: Option<&CudaBuffer>,
        found_inf: Option<&CudaBuffer>,
    ) -> Result<()> {
        const OP: &str = "multi_tensor_adamw";
        if params.range.is_some() {
            return Err(Error::invalid(
                OP,
                "a range selects part of one buffer; the list takes whole buffers",
            ));
        }
        if params.step == 0 {
            return Err(Error::invalid(OP, "step counts from 1"));
        }
        for b in [inv_scale, found_inf].into_iter().flatten() {
            Error::check_dtype(OP, DType::F32, b.dtype())?;
            Error::check_len(OP, 1, b.len())?;
        }
        let mut tables: Vec<((DType, DType, bool), Table)> = Vec::new();
        for t in tensors.iter() {
            let n = check_adamw_tensor(OP, t)?;
            let (p, g) = (t.param.dtype(), t.grad.dtype());
            let master = t.master.as_ref().map_or(0, |m| m.device_ptr());
            let ptr = [
                t.param.device_ptr(),
                t.grad.device_ptr(),
                t.m.device_ptr(),
                t.v.device_ptr(),
                master,
            ];
            let decay = if t.decay { params.weight_decay } else { 0.0 };
            table_for(&mut tables, (p, g, master != 0)).push(ptr, n, decay);
        }
        let args = Arg::pod(&adamw_args(params));
        let flags = [
            Arg::Ptr(inv_scale.map_or(0, CudaBuffer::device_ptr)),
            Arg::Ptr(found_inf.map_or(0, CudaBuffer::device_ptr)),
        ];
        for ((p, g, master), table) in &tables {
            let kind = if *master { "adamw_master" } else { "adamw" };
            let kernel = format!("multi_tensor_{kind}_{}_{}", suffix(*p), suffix(*g));
            let trail = [args.clone(), flags[0].clone(), flags[1].clone()];
            self.launch_table(&kernel, table, &[], &trail)?;
        }
        Ok(())
    }
}

/// The checks `adamw` (no master) or `adamw_master` makes of one parameter's buffers.
/// Returns the number of elements updated: the master's (with one) or the parameter's.
fn check_adamw_tensor(op: &'static str, t: &AdamWTensors<'_, CudaBuffer>) -> Result<usize> {
    let n = t.master.as_ref().map_or(t.param.len(), |m| m.len());
    Error::check_dtype(op, DType::F32, t.m.dtype())?;
    Error::check_dtype(op, DType::F32, t.v.dtype())?;
    for len in [t.param.len(), t.grad.len(), t.m.len(), t.v.len()] {
        Error::check_len(op, n, len)?;
    }
    match &t.master {
        None => {
            check_float(op, t.param.dtype())?;
            check_float(op, t.grad.dtype())?;
        }
        Some(master) => {
            Error::check_dtype(op, DType::F32, master.dtype())?;
            check_master_dtypes(op, t.param.dtype(), t.grad.dtype())?;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use brrr_backend::multi_tensor::{TensorChunk, chunks};

    /// optim.cu's `mt_chunk` on the host: the last row whose first chunk is at most `c`,
    /// then the chunk's place in it.
    fn locate(rows: &[MultiTensorRow], c: u64) -> (usize, u64, u64) {
        let (mut lo, mut hi) = (0, rows.len());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if rows[mid].first_chunk <= c {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let start = (c - rows[lo].first_chunk) * CHUNK as u64;
        (lo, start, (start + CHUNK as u64).min(rows[lo].n))
    }

    #[test]
    fn the_table_and_its_search_cut_a_list_as_brrr_backend_says() {
        let lens = [40_000usize, 1, 0, 768, 0, 16_385, CHUNK, 0];
        let mut table = Table::default();
        let mut buffer_of_row = Vec::new();
        for (i, &n) in lens.iter().enumerate() {
            if n > 0 {
                buffer_of_row.push(i);
            }
            table.push([i as u64, 0, 0, 0, 0], n, 0.0);
        }
        let got: Vec<TensorChunk> = (0..table.chunks)
            .map(|c| {
                let (row, start, end) = locate(&table.rows, c);
                TensorChunk {
                    buffer: buffer_of_row[row],
                    start: start as usize,
                    len: (end - start) as usize,
                }
            })
            .collect();
        assert_eq!(got, chunks(&lens, CHUNK).unwrap());
    }
}
