//! Cross-entropy of logits against integer targets, forward and backward.
//!
//! `loss = logsumexp(z) − z_t` with `logsumexp(z) = m + ln Σ exp(z − m)`, `m = max z`,
//! the usual shift that keeps `exp` finite. The gradient is `softmax(z) − onehot(t)`.
//!
//! Losses are f32 as the trait says; for f64 logits an f64 `losses` (and `dlosses`)
//! buffer is accepted too, so that a finite-difference check in f64 is not limited by
//! an f32 loss.

use crate::check;
use crate::par;
use crate::reduce::{max, sum};
use crate::scalar::{self, Float, Real};
use brrr_backend::{DType, Error, HostData, Result};

/// Simple operations per logit, for task sizing (`exp` is ~10).
const WORK_PER_ELEM: usize = 12;

/// Checks the targets (i32, each `< vocab`; negative means ignored) before anything is
/// written.
fn targets<'a>(op: &'static str, targets: &'a HostData, vocab: usize) -> Result<&'a [i32]> {
    let t = match targets {
        HostData::I32(t) => t.as_slice(),
        other => {
            return Err(Error::DType {
                op,
                expected: DType::I32,
                got: other.dtype(),
            });
        }
    };
    if let Some((row, &bad)) = t
        .iter()
        .enumerate()
        .find(|&(_, &v)| v >= 0 && v as usize >= vocab)
    {
        return Err(Error::invalid(
            op,
            format!("target {bad} in row {row} is out of range for a vocabulary of {vocab}"),
        ));
    }
    if vocab == 0 && !t.is_empty() {
        return Err(Error::invalid(op, "vocab = 0"));
    }
    Ok(t)
}

pub(crate) fn cross_entropy(
    logits: &HostData,
    targets_buf: &HostData,
    vocab: usize,
    losses: &mut HostData,
) -> Result<()> {
    const OP: &str = "cross_entropy";
    let t = targets(OP, targets_buf, vocab)?;
    let rows = t.len();
    let total = check::mul(OP, rows, vocab)?;
    check::len(OP, logits, total)?;
    check::len(OP, losses, rows)?;
    match (logits, &mut *losses) {
        (HostData::F16(z), HostData::F32(l)) => forward(&z[..total], t, vocab, &mut l[..rows]),
        (HostData::BF16(z), HostData::F32(l)) => forward(&z[..total], t, vocab, &mut l[..rows]),
        (HostData::F32(z), HostData::F32(l)) => forward(&z[..total], t, vocab, &mut l[..rows]),
        (HostData::F64(z), HostData::F32(l)) => forward(&z[..total], t, vocab, &mut l[..rows]),
        (HostData::F64(z), HostData::F64(l)) => forward(&z[..total], t, vocab, &mut l[..rows]),
        (z, l) if z.dtype().is_float() => {
            return Err(Error::DType {
                op: OP,
                expected: DType::F32,
                got: l.dtype(),
            });
        }
        (z, _) => return Err(check::dtype_error(OP, &[z])),
    }
    Ok(())
}

/// `z.max()` and `ln Σ exp(z − max)` of one row, in one pass after the max (the
/// exponentials are summed in 8 lanes as they are made, never stored).
#[inline(always)]
fn shifted_lse<C: Real>(z: &[C]) -> (C, C) {
    let m = max(z);
    let mut acc = [C::ZERO; 8];
    let mut chunks = z.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += (v - m).exp();
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a += (v - m).exp();
    }
    let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
    (m, (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))).ln())
}

fn forward<T: Float, L: Float>(z: &[T], targets: &[i32], vocab: usize, losses: &mut [L]) {
    if losses.is_empty() {
        return;
    }
    let per_task = par::rows_per_task(vocab * WORK_PER_ELEM);
    par::run(par::chunks(losses, per_task), |t, losses| {
        par::simd(
            #[inline(always)]
            || {
                let mut sz = Vec::new();
                for (j, l) in losses.iter_mut().enumerate() {
                    let r = t * per_task + j;
                    let loss = match usize::try_from(targets[r]) {
                        Ok(tgt) => {
                            let zr = scalar::load(&z[r * vocab..(r + 1) * vocab], &mut sz);
                            let (m, lse) = shifted_lse(zr);
                            // lse + m − z_t, with the shift subtracted first (both are large
                            // for large logits; their difference is what matters).
                            lse + (m - zr[tgt])
                        }
                        Err(_) => T::C::ZERO, // negative target: ignored (padding)
                    };
                    *l = L::store(L::C::from_f64(loss.to_f64()));
                }
            },
        );
    });
}

pub(crate) fn cross_entropy_backward(
    logits: &HostData,
    targets_buf: &HostData,
    dlosses: &HostData,
    vocab: usize,
    dlogits: &mut HostData,
) -> Result<()> {
    const OP: &str = "cross_entropy_backward";
    let t = targets(OP, targets_buf, vocab)?;
    let rows = t.len();
    let total = check::mul(OP, rows, vocab)?;
    check::len(OP, logits, total)?;
    check::len(OP, dlogits, total)?;
    check::len(OP, dlosses, rows)?;
    let dl: Vec<f64> = match (logits.dtype(), dlosses) {
        (_, HostData::F32(d)) => d[..rows].iter().map(|&v| f64::from(v)).collect(),
        (DType::F64, HostData::F64(d)) => d[..rows].to_vec(),
        (_, other) => {
            return Err(Error::DType {
                op: OP,
                expected: DType::F32,
                got: other.dtype(),
            });
        }
    };
    match (logits, &mut *dlogits) {
        (HostData::F16(z), HostData::F16(d)) => {
            backward(&z[..total], t, &dl, vocab, &mut d[..total])
        }
        (HostData::BF16(z), HostData::BF16(d)) => {
            backward(&z[..total], t, &dl, vocab, &mut d[..total])
        }
        (HostData::F32(z), HostData::F32(d)) => {
            backward(&z[..total], t, &dl, vocab, &mut d[..total])
        }
        (HostData::F64(z), HostData::F64(d)) => {
            backward(&z[..total], t, &dl, vocab, &mut d[..total])
        }
        (z, d) => return Err(check::dtype_error(OP, &[d, z])),
    }
    Ok(())
}

fn backward<T: Float>(z: &[T], targets: &[i32], dl: &[f64], vocab: usize, dz: &mut [T]) {
    if dz.is_empty() {
        return;
    }
    let per_task = par::rows_per_task(vocab * WORK_PER_ELEM);
    par::run(par::chunks(dz, per_task * vocab), |t, dz| {
        par::simd(
            #[inline(always)]
            || {
                let (mut sz, mut sd) = (Vec::new(), Vec::new());
                for (j, dzr) in dz.chunks_mut(vocab).enumerate() {
                    let r = t * per_task + j;
                    let Ok(tgt) = usize::try_from(targets[r]) else {
                        dzr.fill(T::store(T::C::ZERO)); // ignored row
                        continue;
                    };
                    let zr = scalar::load(&z[r * vocab..(r + 1) * vocab], &mut sz);
                    let g = T::C::from_f64(dl[r]);
                    scalar::store_with(
                        dzr,
                        &mut sd,
                        #[inline(always)]
                        |out| {
                            let m = max(zr);
                            for (o, &v) in out.iter_mut().zip(zr) {
                                *o = (v - m).exp();
                            }
                            // softmax = exp(z − m) / Σ exp(z − m); fold dloss into the factor.
                            let f = g / sum(out);
                            for o in out.iter_mut() {
                                *o *= f;
                            }
                            out[tgt] -= g;
                        },
                    );
                }
            },
        );
    });
}
