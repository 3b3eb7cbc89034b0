//! The explorer's formats against `half` and against their definitions.

use brrr_amp::numerics::{
    BF16, F16, F32, Fate, FateCounts, Log2Histogram, bf16_bits_to_f32, f32_to_bf16_bits,
};
use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Values spread over every binade f32 has, both signs, plus the edges.
fn probes() -> Vec<f32> {
    let mut r = ChaCha8Rng::seed_from_u64(7);
    let mut v: Vec<f32> = (0..20_000)
        .map(|_| {
            let e: i32 = r.random_range(-150..=128);
            let m: f32 = r.random_range(1.0..2.0);
            let s = if r.random_bool(0.5) { -1.0 } else { 1.0 };
            s * m * (e as f32).exp2()
        })
        .filter(|x| x.is_finite())
        .collect();
    v.extend([
        0.0,
        65504.0,
        65519.99,
        65520.0,
        5.96e-8,
        2.98e-8,
        2.99e-8,
        6.1035e-5,
        1.0 + 1.0 / 1024.0,
        1.0 + 1.0 / 2048.0,
        1.0014648,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
    ]);
    v
}

#[test]
fn f16_rounding_matches_half() {
    for x in probes() {
        let want = f64::from(f16::from_f32(x).to_f32());
        let got = F16.round(f64::from(x));
        assert!(
            got == want || (got.is_nan() && want.is_nan()),
            "{x:e}: {got:e} vs half {want:e}"
        );
    }
}

#[test]
fn bf16_rounding_matches_half() {
    for x in probes() {
        let want = bf16::from_f32(x);
        assert_eq!(f32_to_bf16_bits(x), want.to_bits(), "{x:e}");
        assert_eq!(bf16_bits_to_f32(want.to_bits()), want.to_f32());
        let got = BF16.round(f64::from(x));
        assert_eq!(got, f64::from(want.to_f32()), "{x:e}");
    }
    assert!(bf16_bits_to_f32(f32_to_bf16_bits(f32::NAN)).is_nan());
}

#[test]
fn ranges_match_the_formats() {
    assert_eq!(F16.max_finite(), f64::from(f16::MAX.to_f32()));
    assert_eq!(F16.min_normal(), f64::from(f16::MIN_POSITIVE.to_f32()));
    assert_eq!(
        F16.min_subnormal(),
        f64::from(f16::MIN_POSITIVE_SUBNORMAL.to_f32())
    );
    assert_eq!(F16.epsilon(), f64::from(f16::EPSILON.to_f32()));
    assert_eq!(BF16.max_finite(), f64::from(bf16::MAX.to_f32()));
    assert_eq!(BF16.min_normal(), f64::from(bf16::MIN_POSITIVE.to_f32()));
    assert_eq!(
        BF16.min_subnormal(),
        f64::from(bf16::MIN_POSITIVE_SUBNORMAL.to_f32())
    );
    assert_eq!(BF16.epsilon(), f64::from(bf16::EPSILON.to_f32()));
    assert_eq!(F32.max_finite(), f64::from(f32::MAX));
    assert_eq!(F32.min_normal(), f64::from(f32::MIN_POSITIVE));
    assert_eq!(F32.epsilon(), f64::from(f32::EPSILON));
    assert_eq!(F32.min_subnormal(), f64::from(f32::from_bits(1)));
    // bf16 keeps f32's range (the same exponent), not its precision.
    assert_eq!(BF16.min_exponent(), F32.min_exponent());
    assert_eq!(BF16.max_exponent(), F32.max_exponent());
}

#[test]
fn fates_at_the_edges_of_f16() {
    assert_eq!(F16.fate(65504.0), Fate::Normal);
    assert_eq!(F16.fate(65520.0), Fate::Overflow); // halfway to 2^16 rounds up: inf
    assert_eq!(F16.fate(1e-5), Fate::Subnormal);
    assert_eq!(F16.fate(2.0f64.powi(-25)), Fate::Underflow); // a tie, to even: 0
    assert_eq!(F16.fate(1e-8), Fate::Underflow);
    assert_eq!(BF16.fate(1e-8), Fate::Normal);
    assert_eq!(BF16.fate(1e38), Fate::Normal);
    // Scaling by 2^16 rescues small gradients from f16's underflow.
    let grads = [1e-9f32, 2e-8, 1e-6, 1e-4, 0.0];
    let plain = FateCounts::of(&F16, &grads, 1.0);
    let scaled = FateCounts::of(&F16, &grads, 65536.0);
    assert_eq!((plain.underflow, plain.zero), (2, 1));
    assert_eq!(scaled.underflow, 0);
    let h = Log2Histogram::of(&grads, 1.0);
    assert_eq!((h.nonzero(), h.zeros), (4, 1));
    assert_eq!(
        Log2Histogram::of(&[1.0, 1.5, 2.0, 0.75], 1.0).bins,
        vec![(-1, 1), (0, 2), (1, 1)]
    );
}
