//! The fused AdamW step.

use crate::check;
use crate::par;
use crate::scalar::{Float, Real};
use brrr_backend::{AdamWParams, Error, HostData, Result};

/// Elements per task (about 15 operations each).
const TASK: usize = 1 << 14;

/// AdamW (Loshchilov & Hutter 2019, Algorithm 2) with the bias correction of Adam
/// (Kingma & Ba 2015) and decoupled weight decay, exactly as [`AdamWParams`] writes it.
/// Computed in f32 (f64 for f64 parameters); `m` and `v` are f32.
#[allow(clippy::too_many_arguments)]
pub(crate) fn adamw(
    p: &AdamWParams,
    param: &mut HostData,
    grad: &HostData,
    m: &mut HostData,
    v: &mut HostData,
    inv_scale: Option<&HostData>,
    found_inf: Option<&HostData>,
) -> Result<()> {
    const OP: &str = "adamw";
    let n = param.len();
    check::len(OP, grad, n)?;
    let m = check::f32s_mut(OP, m, n)?;
    let v = check::f32s_mut(OP, v, n)?;
    if p.step == 0 {
        return Err(Error::invalid(
            OP,
            "step = 0 (steps count from 1; the bias correction would divide by 0)",
        ));
    }
    let inv_scale = inv_scale.map(|b| check::scalar_f32(OP, b)).transpose()?;
    let skip = found_inf.map(|b| check::scalar_f32(OP, b)).transpose()?;
    if !param.dtype().is_float() || param.dtype() != grad.dtype() {
        return Err(check::dtype_error(OP, &[param, grad]));
    }
    // A GradScaler-managed step that saw inf/NaN gradients does nothing at all.
    if skip.is_some_and(|f| f != 0.0) {
        return Ok(());
    }
    // Host-side constants, in f64 so that beta^step is exact enough at any step count.
    let step = f64::from(p.step);
    let k = Consts {
        lr: f64::from(p.lr),
        beta1: f64::from(p.beta1),
        beta2: f64::from(p.beta2),
        eps: f64::from(p.eps),
        wd: f64::from(p.weight_decay),
        gscale: f64::from(p.grad_scale) * f64::from(inv_scale.unwrap_or(1.0)),
        bc1: 1.0 - f64::from(p.beta1).powf(step),
        bc2: 1.0 - f64::from(p.beta2).powf(step),
    };
    match (&mut *param, grad) {
        (HostData::F16(w), HostData::F16(g)) => step_typed(&k, w, &g[..n], m, v),
        (HostData::BF16(w), HostData::BF16(g)) => step_typed(&k, w, &g[..n], m, v),
        (HostData::F32(w), HostData::F32(g)) => step_typed(&k, w, &g[..n], m, v),
        (HostData::F64(w), HostData::F64(g)) => step_typed(&k, w, &g[..n], m, v),
        (w, g) => return Err(check::dtype_error(OP, &[w, g])),
    }
    Ok(())
}

struct Consts {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    wd: f64,
    gscale: f64,
    bc1: f64,
    bc2: f64,
}

fn step_typed<T: Float>(k: &Consts, w: &mut [T], g: &[T], m: &mut [f32], v: &mut [f32]) {
    let c = |x: f64| T::C::from_f64(x);
    let (lr, b1, b2, eps, wd, gs) = (
        c(k.lr),
        c(k.beta1),
        c(k.beta2),
        c(k.eps),
        c(k.wd),
        c(k.gscale),
    );
    let (inv_bc1, inv_bc2) = (c(1.0 / k.bc1), c(1.0 / k.bc2));
    let (one_b1, one_b2) = (c(1.0 - k.beta1), c(1.0 - k.beta2));
    let tasks: Vec<_> = par::chunks(w, TASK)
        .into_iter()
        .zip(par::chunks(m, TASK))
        .zip(par::chunks(v, TASK))
        .collect();
    par::run(tasks, |t, ((w, m), v)| {
        let g = &g[t * TASK..t * TASK + w.len()];
        par::simd(
            #[inline(always)]
            || {
                for (((w, &g), m), v) in w.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
                    let g = g.load() * gs;
                    let mt = b1 * T::C::from_f32(*m) + one_b1 * g;
                    let vt = b2 * T::C::from_f32(*v) + one_b2 * g * g;
                    let (mhat, vhat) = (mt * inv_bc1, vt * inv_bc2);
                    let p = w.load();
                    *w = T::store(p - lr * (mhat / (vhat.sqrt() + eps) + wd * p));
                    *m = mt.to_f64() as f32;
                    *v = vt.to_f64() as f32;
                }
            },
        );
    });
}
