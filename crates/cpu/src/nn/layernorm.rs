//! LayerNorm (Ba et al. 2016) over the last axis, forward and backward.
//!
//! The backward follows llm.c's `layernorm_backward` (Karpathy, 2024): with
//! `n = (x − mean)·rstd` and `g = dy ⊙ gamma`,
//! `dx = rstd · (g − mean(g) − n · mean(g ⊙ n))`, `dgamma += Σ_rows dy ⊙ n`,
//! `dbeta += Σ_rows dy`.

use crate::check;
use crate::par;
use crate::reduce::{dot, sum};
use crate::scalar::{self, Float, Real};
use brrr_backend::{Error, HostData, LayerNormSpec, Result};

/// Simple operations per element, for task sizing.
const WORK_PER_ELEM: usize = 6;

struct Sizes {
    rows: usize,
    total: usize,
}

fn sizes(op: &'static str, spec: &LayerNormSpec) -> Result<Sizes> {
    let total = check::mul(op, spec.rows, spec.cols)?;
    if spec.rows > 0 && spec.cols == 0 {
        return Err(Error::invalid(
            op,
            "cols = 0: cannot normalise an empty row",
        ));
    }
    if !(spec.eps >= 0.0 && spec.eps.is_finite()) {
        return Err(Error::invalid(
            op,
            format!("eps = {} must be finite and non-negative", spec.eps),
        ));
    }
    Ok(Sizes {
        rows: spec.rows,
        total,
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn layernorm(
    spec: &LayerNormSpec,
    x: &HostData,
    gamma: &HostData,
    beta: &HostData,
    y: &mut HostData,
    mean: &mut HostData,
    rstd: &mut HostData,
) -> Result<()> {
    const OP: &str = "layernorm";
    let s = sizes(OP, spec)?;
    check::len(OP, x, s.total)?;
    check::len(OP, y, s.total)?;
    let (g_at, b_at) = spec.param_ranges(OP)?;
    check::len(OP, gamma, g_at.end)?;
    check::len(OP, beta, b_at.end)?;
    let mean = check::f32s_mut(OP, mean, s.rows)?;
    let rstd = check::f32s_mut(OP, rstd, s.rows)?;
    let t = s.total;
    match (x, gamma, beta, &mut *y) {
        (HostData::F16(x), HostData::F16(g), HostData::F16(b), HostData::F16(y)) => {
            forward(spec, &x[..t], &g[g_at], &b[b_at], &mut y[..t], mean, rstd)
        }
        (HostData::BF16(x), HostData::BF16(g), HostData::BF16(b), HostData::BF16(y)) => {
            forward(spec, &x[..t], &g[g_at], &b[b_at], &mut y[..t], mean, rstd)
        }
        (HostData::F32(x), HostData::F32(g), HostData::F32(b), HostData::F32(y)) => {
            forward(spec, &x[..t], &g[g_at], &b[b_at], &mut y[..t], mean, rstd)
        }
        (HostData::F64(x), HostData::F64(g), HostData::F64(b), HostData::F64(y)) => {
            forward(spec, &x[..t], &g[g_at], &b[b_at], &mut y[..t], mean, rstd)
        }
        (x, g, b, y) => return Err(check::dtype_error(OP, &[y, x, g, b])),
    }
    Ok(())
}

/// Mean and `1/sqrt(var + eps)` of one row, two-pass (subtract the mean, then square)
/// so that a large mean does not cancel the variance away. `dev` receives `x − mean`.
#[inline(always)]
fn row_stats<C: Real>(x: &[C], eps: C, dev: &mut [C]) -> (C, C) {
    let n = C::from_usize(x.len());
    let mean = sum(x) / n;
    for (d, &v) in dev.iter_mut().zip(x) {
        *d = v - mean;
    }
    let var = dot(dev, dev) / n;
    (mean, C::ONE / (var + eps).sqrt())
}

#[allow(clippy::too_many_arguments)]
fn forward<T: Float>(
    spec: &LayerNormSpec,
    x: &[T],
    gamma: &[T],
    beta: &[T],
    y: &mut [T],
    mean: &mut [f32],
    rstd: &mut [f32],
) {
    let cols = spec.cols;
    if y.is_empty() {
        return;
    }
    let eps = T::C::from_f32(spec.eps);
    let (g, b) = (load_vec(gamma), load_vec(beta));
    let mut stats = vec![[0f32; 2]; spec.rows];
    let per_task = par::rows_per_task(cols * WORK_PER_ELEM);
    let tasks: Vec<_> = par::chunks(y, per_task * cols)
        .into_iter()
        .zip(par::chunks(&mut stats, per_task))
        .collect();
    par::run(tasks, |t, (y, stats)| {
        par::simd(
            #[inline(always)]
            || {
                let (mut sx, mut sy) = (Vec::new(), Vec::new());
                for (j, (yr, st)) in y.chunks_mut(cols).zip(stats.iter_mut()).enumerate() {
                    let r = t * per_task + j;
                    let xr = scalar::load(&x[r * cols..(r + 1) * cols], &mut sx);
                    scalar::store_with(
                        yr,
                        &mut sy,
                        #[inline(always)]
                        |yr| {
                            let (m, s) = row_stats(xr, eps, yr);
                            for ((o, &gv), &bv) in yr.iter_mut().zip(&g).zip(&b) {
                                *o = *o * s * gv + bv;
                            }
                            *st = [m.to_f64() as f32, s.to_f64() as f32];
                        },
                    );
                }
            },
        );
    });
    for ((st, m), s) in stats.iter().zip(mean.iter_mut()).zip(rstd.iter_mut()) {
        [*m, *s] = *st;
    }
}

fn load_vec<T: Float>(v: &[T]) -> Vec<T::C> {
    let mut out = vec![T::C::ZERO; v.len()];
    T::load_slice(v, &mut out);
    out
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn layernorm_backward(
    spec: &LayerNormSpec,
    dy: &HostData,
    x: &HostData,
    gamma: &HostData,
    mean: &HostData,
    rstd: &HostData,
    dx: &mut HostData,
    dgamma: &mut HostData,
    dbeta: &mut HostData,
) -> Result<()> {
    const OP: &str = "layernorm_backward";
    let s = sizes(OP, spec)?;
    for buf in [dy, x, &*dx] {
        check::len(OP, buf, s.total)?;
    }
    let (g_at, b_at) = spec.param_ranges(OP)?;
    for buf in [gamma, &*dgamma] {
        check::len(OP, buf, g_at.end)?;
    }
    check::len(OP, dbeta, b_at.end)?;
    let stats = Stats {
        mean: check::f32s(OP, mean, s.rows)?,
        rstd: check::f32s(OP, rstd, s.rows)?,
    };
    let t = s.total;
    match (dy, x, gamma, &mut *dx, &mut *dgamma, &mut *dbeta) {
        (
            HostData::F16(dy),
            HostData::F16(x),
            HostData::F16(g),
            HostData::F16(dx),
            HostData::F16(dg),
            HostData::F16(db),
        ) => backward(
            spec,
            &dy[..t],
            &x[..t],
            &g[g_at.clone()],
            stats,
            &mut dx[..t],
            &mut dg[g_at],
            &mut db[b_at],
        ),
        (
            HostData::BF16(dy),
            HostData::BF16(x),
            HostData::BF16(g),
            HostData::BF16(dx),
            HostData::BF16(dg),
            HostData::BF16(db),
        ) => backward(
            spec,
            &dy[..t],
            &x[..t],
            &g[g_at.clone()],
            stats,
            &mut dx[..t],
            &mut dg[g_at],
            &mut db[b_at],
        ),
        (
            HostData::F32(dy),
            HostData::F32(x),
            HostData::F32(g),
            HostData::F32(dx),
            HostData::F32(dg),
            HostData::F32(db),
        ) => backward(
            spec,
            &dy[..t],
            &x[..t],
            &g[g_at.clone()],
            stats,
            &mut dx[..t],
            &mut dg[g_at],
            &mut db[b_at],
        ),
        (
            HostData::F64(dy),
            HostData::F64(x),
            HostData::F64(g),
            HostData::F64(dx),
            HostData::F64(dg),
            HostData::F64(db),
        ) => backward(
            spec,
            &dy[..t],
            &x[..t],
            &g[g_at.clone()],
            stats,
            &mut dx[..t],
            &mut dg[g_at],
            &mut db[b_at],
        ),
        (dy, x, g, dx, dg, db) => return Err(check::dtype_error(OP, &[dx, dy, x, g, dg, db])),
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Stats<'a> {
    mean: &'a [f32],
    rstd: &'a [f32],
}

#[allow(clippy::too_many_arguments)]
fn backward<T: Float>(
    spec: &LayerNormSpec,
    dy: &[T],
    x: &[T],
    gamma: &[T],
    stats: Stats<'_>,
    dx: &mut [T],
    dgamma: &mut [T],
    dbeta: &mut [T],
) {
    let cols = spec.cols;
    if dx.is_empty() {
        return;
    }
    let eps = T::C::from_f32(spec.eps);
    let g = load_vec(gamma);
    let inv_n = T::C::ONE / T::C::from_usize(cols);
    let per_task = par::rows_per_task(cols * WORK_PER_ELEM);
    // Each task returns its partial dgamma and dbeta; they are added in task order
    // below, so the result does not depend on the thread count.
    let partials = par::map(par::chunks(dx, per_task * cols), |t, dx| {
        par::simd(
            #[inline(always)]
            || {
                let mut dg = vec![T::C::ZERO; cols];
                let mut db = vec![T::C::ZERO; cols];
                let (mut sx, mut sdy, mut sdx) = (Vec::new(), Vec::new(), Vec::new());
                let mut norm = vec![T::C::ZERO; cols];
                let mut gdy = vec![T::C::ZERO; cols];
                for (j, dxr) in dx.chunks_mut(cols).enumerate() {
                    let r = t * per_task + j;
                    let xr = scalar::load(&x[r * cols..(r + 1) * cols], &mut sx);
                    let dyr = scalar::load(&dy[r * cols..(r + 1) * cols], &mut sdy);
                    let (m, s) = if T::F32_STATS {
                        (T::C::from_f32(stats.mean[r]), T::C::from_f32(stats.rstd[r]))
                    } else {
                        row_stats(xr, eps, &mut norm)
                    };
                    for (((nv, gv), &xv), (&dv, &gm)) in norm
                        .iter_mut()
                        .zip(gdy.iter_mut())
                        .zip(xr)
                        .zip(dyr.iter().zip(&g))
                    {
                        *nv = (xv - m) * s;
                        *gv = dv * gm;
                    }
                    let mean_g = sum(&gdy) * inv_n;
                    let mean_gn = dot(&gdy, &norm) * inv_n;
                    scalar::store_with(
                        dxr,
                        &mut sdx,
                        #[inline(always)]
                        |dxr| {
                            for ((o, &gv), &nv) in dxr.iter_mut().zip(&gdy).zip(&norm) {
                                *o = (gv - mean_g - nv * mean_gn) * s;
                            }
                        },
                    );
                    for (((a, b), &dv), &nv) in dg.iter_mut().zip(db.iter_mut()).zip(dyr).zip(&norm)
                    {
                        *a += dv * nv;
                        *b += dv;
                    }
                }
                (dg, db)
            },
        )
    });
    let (mut dg, mut db) = (vec![T::C::ZERO; cols], vec![T::C::ZERO; cols]);
    for (pg, pb) in partials {
        dg.iter_mut().zip(&pg).for_each(|(a, &v)| *a += v);
        db.iter_mut().zip(&pb).for_each(|(a, &v)| *a += v);
    }
    // Accumulate (+=) into the parameter gradients, rounding once for f16/bf16.
    let mut scratch = Vec::new();
    scalar::update_with(
        dgamma,
        &mut scratch,
        #[inline(always)]
        |d| d.iter_mut().zip(&dg).for_each(|(a, &v)| *a += v),
    );
    scalar::update_with(
        dbeta,
        &mut scratch,
        #[inline(always)]
        |d| d.iter_mut().zip(&db).for_each(|(a, &v)| *a += v),
    );
}
