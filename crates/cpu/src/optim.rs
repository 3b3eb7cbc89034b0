//! The fused AdamW step.

use crate::check;
use crate::par;
use crate::scalar::{Float, Real};
use brrr_backend::{AdamWParams, DType, Error, HostData, Result};

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
    let r = p.elements(OP, param.len())?;
    let end = r.end;
    check::len(OP, param, end)?;
    check::len(OP, grad, end)?;
    let m = &mut check::f32s_mut(OP, m, end)?[r.clone()];
    let v = &mut check::f32s_mut(OP, v, end)?[r.clone()];
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
    let k = Consts::new(p, inv_scale);
    let rr = || r.clone();
    match (&mut *param, grad) {
        (HostData::F16(w), HostData::F16(g)) => step_typed(&k, &mut w[rr()], &g[rr()], m, v),
        (HostData::BF16(w), HostData::BF16(g)) => step_typed(&k, &mut w[rr()], &g[rr()], m, v),
        (HostData::F32(w), HostData::F32(g)) => step_typed(&k, &mut w[rr()], &g[rr()], m, v),
        (HostData::F64(w), HostData::F64(g)) => step_typed(&k, &mut w[rr()], &g[rr()], m, v),
        (w, g) => return Err(check::dtype_error(OP, &[w, g])),
    }
    Ok(())
}

pub(crate) struct Consts {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    wd: f64,
    gscale: f64,
    bc1: f64,
    bc2: f64,
}

impl Consts {
    /// Host-side constants, in f64 so that beta^step is exact enough at any step count.
    /// The gradient factor is `grad_scale * inv_scale` multiplied in f64, so a factor
    /// passed as `inv_scale` with `grad_scale = 1` is bitwise the same as passing it as
    /// `grad_scale` (gradient clipping's coefficient takes either route).
    pub(crate) fn new(p: &AdamWParams, inv_scale: Option<f32>) -> Consts {
        let step = f64::from(p.step);
        Consts {
            lr: f64::from(p.lr),
            beta1: f64::from(p.beta1),
            beta2: f64::from(p.beta2),
            eps: f64::from(p.eps),
            wd: f64::from(p.weight_decay),
            gscale: f64::from(p.grad_scale) * f64::from(inv_scale.unwrap_or(1.0)),
            bc1: 1.0 - f64::from(p.beta1).powf(step),
            bc2: 1.0 - f64::from(p.beta2).powf(step),
        }
    }

    /// The constants in the compute type `R`, as the element loop uses them.
    pub(crate) fn typed<R: Real>(&self) -> Typed<R> {
        let c = R::from_f64;
        Typed {
            lr: c(self.lr),
            b1: c(self.beta1),
            b2: c(self.beta2),
            eps: c(self.eps),
            wd: c(self.wd),
            gs: c(self.gscale),
            inv_bc1: c(1.0 / self.bc1),
            inv_bc2: c(1.0 / self.bc2),
            one_b1: c(1.0 - self.beta1),
            one_b2: c(1.0 - self.beta2),
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Typed<R> {
    lr: R,
    b1: R,
    b2: R,
    eps: R,
    wd: R,
    gs: R,
    inv_bc1: R,
    inv_bc2: R,
    one_b1: R,
    one_b2: R,
}

impl<R: Real> Typed<R> {
    /// One element: updates `m` and `v` and returns the new parameter value.
    #[inline(always)]
    pub(crate) fn update(&self, p: R, g: R, m: &mut f32, v: &mut f32) -> R {
        let g = g * self.gs;
        let mt = self.b1 * R::from_f32(*m) + self.one_b1 * g;
        let vt = self.b2 * R::from_f32(*v) + self.one_b2 * g * g;
        let (mhat, vhat) = (mt * self.inv_bc1, vt * self.inv_bc2);
        *m = mt.to_f64() as f32;
        *v = vt.to_f64() as f32;
        p - self.lr * (mhat / (vhat.sqrt() + self.eps) + self.wd * p)
    }
}

fn step_typed<T: Float>(k: &Consts, w: &mut [T], g: &[T], m: &mut [f32], v: &mut [f32]) {
    let k = k.typed::<T::C>();
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
                    *w = T::store(k.update(w.load(), g.load(), m, v));
                }
            },
        );
    });
}

/// AdamW on an f32 master copy that also writes the compute copy (f16, bf16 or f32),
/// rounded once from the updated master. The master's arithmetic is that of [`adamw`]
/// on an f32 parameter, so with an f32 gradient the master ends bitwise where a plain
/// f32 step would put it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn adamw_master(
    p: &AdamWParams,
    master: &mut HostData,
    copy: &mut HostData,
    grad: &HostData,
    m: &mut HostData,
    v: &mut HostData,
    inv_scale: Option<&HostData>,
    found_inf: Option<&HostData>,
) -> Result<()> {
    const OP: &str = "adamw_master";
    let r = p.elements(OP, master.len())?;
    let end = r.end;
    let w = &mut check::f32s_mut(OP, master, end)?[r.clone()];
    check::len(OP, copy, end)?;
    check::len(OP, grad, end)?;
    let m = &mut check::f32s_mut(OP, m, end)?[r.clone()];
    let v = &mut check::f32s_mut(OP, v, end)?[r.clone()];
    if p.step == 0 {
        return Err(Error::invalid(
            OP,
            "step = 0 (steps count from 1; the bias correction would divide by 0)",
        ));
    }
    let inv_scale = inv_scale.map(|b| check::scalar_f32(OP, b)).transpose()?;
    let skip = found_inf.map(|b| check::scalar_f32(OP, b)).transpose()?;
    let grad_ok = grad.dtype() == DType::F32 || grad.dtype() == copy.dtype();
    if !matches!(copy.dtype(), DType::F16 | DType::BF16 | DType::F32) || !grad_ok {
        return Err(Error::invalid(
            OP,
            format!(
                "the compute copy must be f16, bf16 or f32 and the gradient f32 or the copy's \
                 dtype; got copy {} and gradient {}",
                copy.dtype(),
                grad.dtype()
            ),
        ));
    }
    if skip.is_some_and(|f| f != 0.0) {
        return Ok(());
    }
    let k = Consts::new(p, inv_scale);
    match (&mut *copy, grad) {
        (HostData::F16(c), HostData::F32(g)) => {
            step_master(&k, w, &g[r.clone()], &mut c[r.clone()], m, v)
        }
        (HostData::F16(c), HostData::F16(g)) => {
            step_master(&k, w, &g[r.clone()], &mut c[r.clone()], m, v)
        }
        (HostData::BF16(c), HostData::F32(g)) => {
            step_master(&k, w, &g[r.clone()], &mut c[r.clone()], m, v)
        }
        (HostData::BF16(c), HostData::BF16(g)) => {
            step_master(&k, w, &g[r.clone()], &mut c[r.clone()], m, v)
        }
        (HostData::F32(c), HostData::F32(g)) => {
            step_master(&k, w, &g[r.clone()], &mut c[r.clone()], m, v)
        }
        (c, g) => return Err(check::dtype_error(OP, &[&*c, g])),
    }
    Ok(())
}

fn step_master<G: Float<C = f32>, P: Float<C = f32>>(
    k: &Consts,
    w: &mut [f32],
    g: &[G],
    copy: &mut [P],
    m: &mut [f32],
    v: &mut [f32],
) {
    let k = k.typed::<f32>();
    let tasks: Vec<_> = par::chunks(w, TASK)
        .into_iter()
        .zip(par::chunks(copy, TASK))
        .zip(par::chunks(m, TASK))
        .zip(par::chunks(v, TASK))
        .collect();
    par::run(tasks, |t, (((w, c), m), v)| {
        let g = &g[t * TASK..t * TASK + w.len()];
        par::simd(
            #[inline(always)]
            || {
                for ((((w, c), &g), m), v) in w
                    .iter_mut()
                    .zip(c.iter_mut())
                    .zip(g)
                    .zip(m.iter_mut())
                    .zip(v.iter_mut())
                {
                    *w = k.update(*w, g.load(), m, v);
                    *c = P::store(*w);
                }
            },
        );
    });
}

/// `norm = sqrt(sumsq)`, `coef = min(1, max_norm / (norm + 1e-6))`
/// (`torch.nn.utils.clip_grad_norm_`), from and to one-element f32 buffers. The arithmetic
/// is the host code's that `brrr-nn`'s `clip_grad_norm` has always used (the f32 sum
/// widened to f64, the square root and the division in f64, then rounded to f32 once),
/// so a clip factor computed here is bitwise the one that code returns.
pub(crate) fn clip_coefficient(
    sumsq: &HostData,
    max_norm: f64,
    norm: &mut HostData,
    coef: &mut HostData,
) -> Result<()> {
    const OP: &str = "clip_coefficient";
    if max_norm.is_nan() || max_norm <= 0.0 {
        return Err(Error::invalid(
            OP,
            format!("max_norm must be positive, got {max_norm}"),
        ));
    }
    let ss = check::f32s(OP, sumsq, 1)?[0];
    check::f32s_mut(OP, coef, 1)?;
    let n = f64::from(ss).sqrt();
    check::f32s_mut(OP, norm, 1)?[0] = n as f32;
    // `f64::min` returns the other operand for NaN: a NaN norm gives 1.
    check::f32s_mut(OP, coef, 1)?[0] = (max_norm / (n + 1e-6)).min(1.0) as f32;
    Ok(())
}
