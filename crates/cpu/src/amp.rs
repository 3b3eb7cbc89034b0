//! The two mixed-precision kernels: unscale-and-check, and the loss-scale update.
//! Both keep their state on the device (here, in buffers) so a training step never
//! reads a flag back to the host.

use crate::check;
use crate::par;
use crate::scalar::{self, Float, Real};
use brrr_backend::{DType, HostData, Result, ScaleUpdateParams};

const TASK: usize = 1 << 16;

/// `grads *= inv_scale`; `found_inf = 1` if any result is inf or NaN (never cleared).
///
/// PyTorch's `_amp_foreach_non_finite_check_and_unscale_` tests the incoming value; we
/// test the value as stored after unscaling, which also catches an inf *input* (inf
/// times a finite scale stays inf, NaN stays NaN) and additionally an f16 product that
/// overflows on the way back (possible only when `inv_scale > 1`).
pub(crate) fn unscale_check_finite(
    grads: &mut HostData,
    inv_scale: &HostData,
    found_inf: &mut HostData,
) -> Result<()> {
    const OP: &str = "unscale_check_finite";
    let s = check::scalar_f32(OP, inv_scale)?;
    let flag = check::f32s_mut(OP, found_inf, 1)?;
    let any = match grads {
        HostData::F16(g) => unscale(g, s),
        HostData::BF16(g) => unscale(g, s),
        HostData::F32(g) => unscale(g, s),
        HostData::F64(g) => unscale(g, s),
        g => return Err(check::dtype_error(OP, &[g])),
    };
    if any {
        flag[0] = 1.0;
    }
    Ok(())
}

fn unscale<T: Float>(g: &mut [T], inv_scale: f32) -> bool {
    let s = T::C::from_f32(inv_scale);
    par::map(par::chunks(g, TASK), |_, g| {
        par::simd(
            #[inline(always)]
            || {
                let mut scratch = Vec::new();
                let bad = scalar::update_with(
                    g,
                    &mut scratch,
                    #[inline(always)]
                    |g| {
                        let mut bad = false;
                        for x in g.iter_mut() {
                            *x *= s;
                            bad |= !x.is_finite();
                        }
                        bad
                    },
                );
                // f16 can overflow when the (finite) f32 product is rounded back.
                bad || (T::as_compute(g).is_none() && g.iter().any(|x| !x.load().is_finite()))
            },
        )
    })
    .into_iter()
    .any(|b| b)
}

/// PyTorch's `_amp_update_scale_` (aten/src/ATen/native/cuda/AmpKernels.cu):
/// on inf/NaN, `scale *= backoff` and the tracker resets; otherwise the tracker counts
/// the clean step, and at `growth_interval` the scale grows (only if the grown scale is
/// finite) and the tracker resets.
pub(crate) fn update_loss_scale(
    p: &ScaleUpdateParams,
    scale: &mut HostData,
    growth_tracker: &mut HostData,
    found_inf: &HostData,
) -> Result<()> {
    const OP: &str = "update_loss_scale";
    let found = check::scalar_f32(OP, found_inf)?;
    let scale = check::f32s_mut(OP, scale, 1)?;
    let tracker = match growth_tracker {
        HostData::I32(t) if t.len() >= p.tracker_len() => t,
        HostData::I32(t) => {
            return Err(brrr_backend::Error::BufferTooSmall {
                op: OP,
                needed: p.tracker_len(),
                len: t.len(),
            });
        }
        other => {
            return Err(brrr_backend::Error::DType {
                op: OP,
                expected: DType::I32,
                got: other.dtype(),
            });
        }
    };
    if found != 0.0 {
        tracker[0] = 0;
        if p.hysteresis > 1 {
            // Megatron's hysteresis: count the overflow; back off only at the
            // `hysteresis`-th since the last growth.
            tracker[1] = tracker[1].saturating_add(1);
            if (tracker[1] as u32) < p.hysteresis {
                return Ok(());
            }
        }
        let backed_off = scale[0] * p.backoff_factor;
        // A comparison, not `f32::max`, so a NaN scale stays NaN on every backend.
        scale[0] = if backed_off < p.min_scale {
            p.min_scale
        } else {
            backed_off
        };
    } else {
        let successful = i64::from(tracker[0]) + 1;
        if successful == i64::from(p.growth_interval) {
            let grown = scale[0] * p.growth_factor;
            if grown.is_finite() {
                scale[0] = grown;
            }
            tracker[0] = 0;
            if p.hysteresis > 1 {
                tracker[1] = 0;
            }
        } else {
            tracker[0] = successful.min(i64::from(i32::MAX)) as i32;
        }
    }
    Ok(())
}
