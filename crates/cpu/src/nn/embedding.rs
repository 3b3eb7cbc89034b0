//! Embedding lookup and its scatter-add backward.

use crate::check;
use crate::par;
use crate::scalar::{self, Float};
use brrr_backend::{EmbeddingSpec, Error, HostData, Result};

/// Checks every id against the table (before anything is written, so a bad id leaves
/// the output untouched) and returns them as indices.
fn ids(op: &'static str, ids: &HostData, rows: usize) -> Result<Vec<usize>> {
    let bad = |pos: usize, id: i64| {
        Error::invalid(
            op,
            format!("id {id} at position {pos} is out of range for a table of {rows} rows"),
        )
    };
    match ids {
        HostData::U32(v) => v
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                if (id as usize) < rows {
                    Ok(id as usize)
                } else {
                    Err(bad(i, i64::from(id)))
                }
            })
            .collect(),
        HostData::I32(v) => v
            .iter()
            .enumerate()
            .map(|(i, &id)| match usize::try_from(id) {
                Ok(u) if u < rows => Ok(u),
                _ => Err(bad(i, i64::from(id))),
            })
            .collect(),
        other => Err(Error::DType {
            op,
            expected: brrr_backend::DType::U32,
            got: other.dtype(),
        }),
    }
}

pub(crate) fn embedding(
    spec: &EmbeddingSpec,
    ids_buf: &HostData,
    table: &HostData,
    out: &mut HostData,
) -> Result<()> {
    const OP: &str = "embedding";
    let dim = spec.dim;
    let (at, rows) = spec.table_range(OP, table.len())?;
    let ids = ids(OP, ids_buf, rows)?;
    let n = check::mul(OP, ids.len(), dim)?;
    check::len(OP, out, n)?;
    match (table, &mut *out) {
        (HostData::F16(t), HostData::F16(o)) => gather_rows(&ids, &t[at], dim, &mut o[..n]),
        (HostData::BF16(t), HostData::BF16(o)) => gather_rows(&ids, &t[at], dim, &mut o[..n]),
        (HostData::F32(t), HostData::F32(o)) => gather_rows(&ids, &t[at], dim, &mut o[..n]),
        (HostData::F64(t), HostData::F64(o)) => gather_rows(&ids, &t[at], dim, &mut o[..n]),
        (t, o) => return Err(check::dtype_error(OP, &[o, t])),
    }
    Ok(())
}

fn gather_rows<T: Copy + Send + Sync>(ids: &[usize], table: &[T], dim: usize, out: &mut [T]) {
    if out.is_empty() {
        return;
    }
    let per_task = par::rows_per_task(dim);
    par::run(par::chunks(out, per_task * dim), |t, out| {
        for (j, o) in out.chunks_mut(dim).enumerate() {
            let id = ids[t * per_task + j];
            o.copy_from_slice(&table[id * dim..(id + 1) * dim]);
        }
    });
}

pub(crate) fn scatter_rows(
    spec: &EmbeddingSpec,
    ids_buf: &HostData,
    rows: &HostData,
    table: &mut HostData,
) -> Result<()> {
    const OP: &str = "scatter_rows";
    let dim = spec.dim;
    let (at, table_rows) = spec.table_range(OP, table.len())?;
    let ids = ids(OP, ids_buf, table_rows)?;
    let n = check::mul(OP, ids.len(), dim)?;
    check::len(OP, rows, n)?;
    // A repeat would make the result depend on the order of the writes.
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    if let Some(i) = ids.iter().position(|&id| !seen.insert(id)) {
        return Err(Error::invalid(
            OP,
            format!("id {} at position {i} repeats an earlier one", ids[i]),
        ));
    }
    match (rows, &mut *table) {
        (HostData::F16(r), HostData::F16(t)) => put_rows(&ids, &r[..n], dim, &mut t[at]),
        (HostData::BF16(r), HostData::BF16(t)) => put_rows(&ids, &r[..n], dim, &mut t[at]),
        (HostData::F32(r), HostData::F32(t)) => put_rows(&ids, &r[..n], dim, &mut t[at]),
        (HostData::F64(r), HostData::F64(t)) => put_rows(&ids, &r[..n], dim, &mut t[at]),
        (r, t) => return Err(check::dtype_error(OP, &[t, r])),
    }
    Ok(())
}

fn put_rows<T: Copy>(ids: &[usize], rows: &[T], dim: usize, table: &mut [T]) {
    for (&id, row) in ids.iter().zip(rows.chunks(dim)) {
        table[id * dim..(id + 1) * dim].copy_from_slice(row);
    }
}

pub(crate) fn embedding_backward(
    spec: &EmbeddingSpec,
    ids_buf: &HostData,
    dout: &HostData,
    dtable: &mut HostData,
) -> Result<()> {
    const OP: &str = "embedding_backward";
    let dim = spec.dim;
    let (at, rows) = spec.table_range(OP, dtable.len())?;
    let ids = ids(OP, ids_buf, rows)?;
    let n = check::mul(OP, ids.len(), dim)?;
    check::len(OP, dout, n)?;
    match (dout, &mut *dtable) {
        (HostData::F16(d), HostData::F16(t)) => scatter_add(&ids, &d[..n], dim, &mut t[at]),
        (HostData::BF16(d), HostData::BF16(t)) => scatter_add(&ids, &d[..n], dim, &mut t[at]),
        (HostData::F32(d), HostData::F32(t)) => scatter_add(&ids, &d[..n], dim, &mut t[at]),
        (HostData::F64(d), HostData::F64(t)) => scatter_add(&ids, &d[..n], dim, &mut t[at]),
        (d, t) => return Err(check::dtype_error(OP, &[t, d])),
    }
    Ok(())
}

/// `dtable[ids[i]] += dout[i]`, deterministically: positions are grouped by id with a
/// counting sort (stable, so each row adds its contributions in position order), and
/// each table row is owned by one task, which sums in the compute type and rounds
/// once. A GPU does this with atomics, in whatever order they land.
fn scatter_add<T: Float>(ids: &[usize], dout: &[T], dim: usize, dtable: &mut [T]) {
    if ids.is_empty() {
        return;
    }
    let rows = dtable.len() / dim;
    // starts[r]..starts[r + 1] indexes `order` for the positions holding id r.
    let mut starts = vec![0usize; rows + 1];
    for &id in ids {
        starts[id + 1] += 1;
    }
    for r in 0..rows {
        starts[r + 1] += starts[r];
    }
    let mut next = starts.clone();
    let mut order = vec![0usize; ids.len()];
    for (pos, &id) in ids.iter().enumerate() {
        order[next[id]] = pos;
        next[id] += 1;
    }
    // Tasks of table rows; work is one pass over each touched row per occurrence.
    let per_task = par::rows_per_task(dim * ids.len().div_ceil(rows).max(1));
    par::run(par::chunks(dtable, per_task * dim), |t, dtable| {
        par::simd(
            #[inline(always)]
            || {
                let (mut acc, mut sd) = (Vec::new(), Vec::new());
                for (j, row) in dtable.chunks_mut(dim).enumerate() {
                    let r = t * per_task + j;
                    let positions = &order[starts[r]..starts[r + 1]];
                    if positions.is_empty() {
                        continue;
                    }
                    scalar::update_with(
                        row,
                        &mut acc,
                        #[inline(always)]
                        |acc| {
                            for &pos in positions {
                                let d = scalar::load(&dout[pos * dim..(pos + 1) * dim], &mut sd);
                                for (a, &v) in acc.iter_mut().zip(d) {
                                    *a += v;
                                }
                            }
                        },
                    );
                }
            },
        );
    });
}
