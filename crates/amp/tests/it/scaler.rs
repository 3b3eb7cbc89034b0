//! The dynamic loss scaler's rule, step by step on brrr-cpu: every check reads the
//! device's state, which is what a training step leaves there.

use brrr_amp::{DynamicLossScaler, ScalerConfig};
use brrr_backend::{DType, block_on};
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, Param};
use brrr_tensor::Tensor;

fn param(b: &CpuBackend, name: &str, v: &[f32]) -> Param<CpuBackend> {
    let t = Tensor::from_f32(b, v, [v.len()], DType::F32).unwrap();
    Param::with_master(name, t, DType::F16, DType::F32).unwrap()
}

fn set_grad(p: &mut Param<CpuBackend>, g: &[f32]) {
    p.grad = Tensor::from_f32(p.value.backend(), g, [g.len()], DType::F32).unwrap();
}

fn host(t: &Tensor<CpuBackend>) -> Vec<f64> {
    block_on(t.to_host()).unwrap().to_f64()
}

/// One optimizer step as the trainer runs it: unscale, AdamW skipped by the flag,
/// update, then observe what the read-back says.
fn step(
    s: &mut DynamicLossScaler<CpuBackend>,
    opt: &mut AdamW<CpuBackend>,
    params: &mut [Param<CpuBackend>],
) -> brrr_amp::ScalerReport {
    s.unscale(params.iter_mut().collect()).unwrap();
    opt.step_scaled(
        params.iter_mut().collect(),
        0.1,
        1.0,
        None,
        Some(s.found_inf()),
    )
    .unwrap();
    s.update().unwrap();
    let (scale, _, found) = block_on(s.read_state()).unwrap();
    s.observe(scale, found).unwrap()
}

#[test]
fn an_inf_skips_exactly_that_step_and_halves_the_scale() {
    let b = CpuBackend::new();
    let mut s = DynamicLossScaler::new(&b, ScalerConfig::default()).unwrap();
    assert_eq!(s.scale(), 65536.0);
    let mut opt = AdamW::new(AdamWConfig::default());
    let mut ps = vec![param(&b, "a", &[1.0, 2.0]), param(&b, "b", &[3.0])];
    let mut history = Vec::new();
    for i in 0..5 {
        let scale = s.scale();
        set_grad(&mut ps[0], &[0.5 * scale, -0.25 * scale]);
        let g1 = if i == 2 { f32::INFINITY } else { scale };
        set_grad(&mut ps[1], &[g1]);
        let before: Vec<Vec<f64>> = ps
            .iter()
            .map(|p| host(p.master.as_ref().unwrap()))
            .collect();
        let r = step(&mut s, &mut opt, &mut ps);
        let after: Vec<Vec<f64>> = ps
            .iter()
            .map(|p| host(p.master.as_ref().unwrap()))
            .collect();
        // Masters (and the 16-bit copies written from them) change only on applied steps.
        assert_eq!(before == after, r.skipped, "step {i}");
        history.push((r.skipped, r.scale));
    }
    assert_eq!(
        history,
        vec![
            (false, 65536.0),
            (false, 65536.0),
            (true, 32768.0),
            (false, 32768.0),
            (false, 32768.0)
        ]
    );
    assert_eq!(s.skipped_steps(), 1);
    // The unscaled gradient is the true one: 0.5·S / S.
    assert_eq!(host(&ps[0].grad), vec![0.5, -0.25]);
}

#[test]
fn two_thousand_clean_steps_double_the_scale() {
    let b = CpuBackend::new();
    let mut s = DynamicLossScaler::new(&b, ScalerConfig::default()).unwrap();
    let mut opt = AdamW::new(AdamWConfig::default());
    let mut ps = vec![param(&b, "a", &[1.0])];
    for i in 1..=2001u32 {
        set_grad(&mut ps[0], &[1e-3 * s.scale()]);
        let r = step(&mut s, &mut opt, &mut ps);
        assert!(!r.skipped);
        let want = if i < 2000 { 65536.0 } else { 131072.0 };
        assert_eq!(r.scale, want, "after step {i}");
    }
    let (_, tracker, _) = block_on(s.read_state()).unwrap();
    assert_eq!(tracker, vec![1], "the count restarts after growing");
}

#[test]
fn hysteresis_tolerates_overflows_and_min_scale_is_a_floor() {
    let b = CpuBackend::new();
    let cfg = ScalerConfig {
        init_scale: 8.0,
        growth_interval: 3,
        hysteresis: 2,
        min_scale: 2.0,
        ..ScalerConfig::default()
    };
    let mut s = DynamicLossScaler::new(&b, cfg).unwrap();
    let mut opt = AdamW::new(AdamWConfig::default());
    let mut ps = vec![param(&b, "a", &[1.0])];
    let mut seen = Vec::new();
    for inf in [true, true, true, true, false, false, false, true] {
        set_grad(&mut ps[0], &[if inf { f32::NAN } else { 1.0 }]);
        let r = step(&mut s, &mut opt, &mut ps);
        assert_eq!(r.skipped, inf);
        seen.push(r.scale);
    }
    // 1st overflow tolerated, 2nd backs off, then every one until the floor; three
    // clean steps grow and restore the tolerance.
    assert_eq!(seen, vec![8.0, 4.0, 2.0, 2.0, 2.0, 2.0, 4.0, 4.0]);
}

#[test]
fn error_when_stuck_at_the_minimum_scale() {
    let b = CpuBackend::new();
    let cfg = ScalerConfig {
        init_scale: 4.0,
        min_scale: 2.0,
        error_at_min_scale: true,
        ..ScalerConfig::default()
    };
    let mut s = DynamicLossScaler::new(&b, cfg).unwrap();
    let mut opt = AdamW::new(AdamWConfig::default());
    let mut ps = vec![param(&b, "a", &[1.0])];
    set_grad(&mut ps[0], &[f32::INFINITY]);
    let r = step(&mut s, &mut opt, &mut ps);
    assert_eq!((r.skipped, r.scale), (true, 2.0));
    // Overflowing again at the floor is an error that says why.
    s.unscale(ps.iter_mut().collect()).unwrap();
    s.update().unwrap();
    let (scale, _, found) = block_on(s.read_state()).unwrap();
    let e = s.observe(scale, found).unwrap_err().to_string();
    assert!(e.contains("minimum"), "{e}");
}

#[test]
fn bad_options_are_errors() {
    let b = CpuBackend::new();
    for cfg in [
        ScalerConfig {
            init_scale: 0.0,
            ..ScalerConfig::default()
        },
        ScalerConfig {
            backoff_factor: 1.0,
            ..ScalerConfig::default()
        },
        ScalerConfig {
            growth_interval: 0,
            ..ScalerConfig::default()
        },
        ScalerConfig {
            min_scale: 1e9,
            ..ScalerConfig::default()
        },
    ] {
        assert!(DynamicLossScaler::new(&b, cfg).is_err());
    }
}
