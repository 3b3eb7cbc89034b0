//! Every op against a naive f64 reference ([`reference`]), on fresh seeded random
//! inputs (never zeros), in every float dtype, over odd sizes; plus error cases,
//! finite-difference checks of the backward kernels in f64, and determinism across
//! thread counts.
//!
//! Inputs are rounded to the dtype under test *before* the reference sees them, so the
//! only differences left are the kernel's arithmetic (f32, or f64 for f64) and the final
//! rounding of the output. Tolerances say so: `2·eps(dtype)·|want|` for the output
//! rounding, plus a multiple of `eps(compute)` times the magnitude of the terms summed.

mod amp;
mod errors;
mod gemm;
mod gradcheck;
mod memory;
mod nn;
mod ops;
mod optim;
mod reference;

use crate::{CpuBackend, CpuBuffer};
use brrr_backend::{Backend, DType, HostData, block_on};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub(crate) fn cpu() -> CpuBackend {
    CpuBackend::new()
}

pub(crate) fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// `n` values uniform in `[lo, hi)`, never within 1e-3 of zero (a zero hides scaling
/// bugs: `0 · anything` is right for the wrong reason).
pub(crate) fn values(rng: &mut ChaCha8Rng, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| {
            loop {
                let v = rng.random_range(lo..hi);
                if v.abs() > 1e-3 {
                    break v;
                }
            }
        })
        .collect()
}

/// `v` rounded to `dtype` and back: what the kernel actually receives.
pub(crate) fn quantize(dtype: DType, v: &[f64]) -> Vec<f64> {
    HostData::from_f64(dtype, v).to_f64()
}

/// Random values already representable in `dtype`, and the buffer holding them.
pub(crate) fn input(
    rng: &mut ChaCha8Rng,
    dtype: DType,
    n: usize,
    lo: f64,
    hi: f64,
) -> (Vec<f64>, CpuBuffer) {
    let v = quantize(dtype, &values(rng, n, lo, hi));
    let buf = cpu().upload(&HostData::from_f64(dtype, &v)).unwrap();
    (v, buf)
}

/// `h` in a buffer of the test backend.
pub(crate) fn buf(h: HostData) -> CpuBuffer {
    cpu().upload(&h).unwrap()
}

pub(crate) fn read(buf: &CpuBuffer) -> Vec<f64> {
    block_on(cpu().read(buf)).unwrap().to_f64()
}

/// The unit roundoff kernels compute with for data of `dtype`.
pub(crate) fn eps_compute(dtype: DType) -> f64 {
    if dtype == DType::F64 {
        f64::EPSILON
    } else {
        f64::from(f32::EPSILON)
    }
}

/// The error of rounding `want` into `dtype` once, with room to spare: 2 ulps, and
/// a subnormal's spacing near zero (f16 results below 6e-5 are subnormal).
pub(crate) fn round_tol(dtype: DType, want: f64) -> f64 {
    let min_normal = match dtype {
        DType::F16 => f64::from(half::f16::MIN_POSITIVE),
        DType::BF16 => f64::from(half::bf16::MIN_POSITIVE),
        DType::F32 => f64::from(f32::MIN_POSITIVE),
        _ => f64::MIN_POSITIVE,
    };
    dtype.epsilon() * (2.0 * want.abs() + min_normal)
}

/// Asserts `|got[i] − want[i]| <= tol(i)` for every `i`, naming the case on failure.
pub(crate) fn assert_close(case: &str, got: &[f64], want: &[f64], tol: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{case}: length");
    for i in 0..want.len() {
        let t = tol(i);
        let ok = (got[i] - want[i]).abs() <= t
            || (got[i].is_nan() && want[i].is_nan())
            || got[i] == want[i];
        assert!(
            ok,
            "{case}: element {i}: got {}, want {}, |diff| {:e} > tol {:e}",
            got[i],
            want[i],
            (got[i] - want[i]).abs(),
            t
        );
    }
}

/// Sizes that catch off-by-one and remainder bugs: 1, primes, and just past powers of two.
pub(crate) const ODD: [usize; 5] = [1, 7, 33, 65, 130];

#[test]
fn info_names_the_backend() {
    let info = cpu().info();
    assert_eq!(info.name, "cpu");
    assert_eq!(info.dtypes, DType::FLOATS.to_vec());
    assert!(info.device.contains("thread"), "{}", info.device);
    assert!(cpu().supports(DType::BF16) && !cpu().supports(DType::I32));
}
