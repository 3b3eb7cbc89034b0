//! unscale_check_finite and update_loss_scale (PyTorch GradScaler semantics).

use super::{assert_close, buf, cpu, input, read, rng, round_tol};
use brrr_backend::{Backend, DType, HostData, ScaleUpdateParams};

#[test]
fn unscale_multiplies_and_flags_non_finite() {
    for dtype in DType::FLOATS {
        for n in [1usize, 65, 100_003] {
            let mut r = rng(n as u64);
            let (g, mut gb) = input(&mut r, dtype, n, -1000.0, 1000.0);
            let inv = buf(HostData::F32(vec![1.0 / 1024.0]));
            let mut found = buf(HostData::F32(vec![0.0]));
            cpu()
                .unscale_check_finite(&mut gb, &inv, &mut found)
                .unwrap();
            let want: Vec<f64> = g.iter().map(|v| v / 1024.0).collect();
            assert_close(&format!("unscale {dtype} n={n}"), &read(&gb), &want, |i| {
                round_tol(dtype, want[i])
            });
            assert_eq!(
                read(&found),
                vec![0.0],
                "{dtype}: clean gradients must not set found_inf"
            );

            // One inf (or NaN) anywhere sets the flag, and the flag is never cleared.
            for bad in [f64::INFINITY, f64::NAN] {
                let mut v = g.clone();
                v[n / 2] = bad;
                let mut gb = buf(HostData::from_f64(dtype, &v));
                cpu()
                    .unscale_check_finite(&mut gb, &inv, &mut found)
                    .unwrap();
                assert_eq!(read(&found), vec![1.0], "{dtype} n={n} {bad}");
                let clean = buf(HostData::from_f64(dtype, &g));
                let mut gb = clean.clone();
                cpu()
                    .unscale_check_finite(&mut gb, &inv, &mut found)
                    .unwrap();
                assert_eq!(read(&found), vec![1.0], "found_inf is never cleared");
                found = buf(HostData::F32(vec![0.0]));
            }
        }
    }
    // An f16 gradient that overflows when unscaled by a factor > 1 is caught too.
    let mut g = buf(HostData::from_f64(DType::F16, &[60000.0, 1.0]));
    let mut found = buf(HostData::F32(vec![0.0]));
    cpu()
        .unscale_check_finite(&mut g, &buf(HostData::F32(vec![2.0])), &mut found)
        .unwrap();
    assert_eq!(read(&found), vec![1.0]);
}

#[test]
fn loss_scale_follows_grad_scaler() {
    let p = ScaleUpdateParams {
        growth_factor: 2.0,
        backoff_factor: 0.5,
        growth_interval: 3,
        ..ScaleUpdateParams::default()
    };
    let mut scale = buf(HostData::F32(vec![65536.0]));
    let mut tracker = buf(HostData::I32(vec![0]));
    let clean = buf(HostData::F32(vec![0.0]));
    let inf = buf(HostData::F32(vec![1.0]));
    // (found_inf, scale after, tracker after)
    let steps = [
        (&clean, 65536.0, 1),
        (&clean, 65536.0, 2),
        (&clean, 131072.0, 0), // third clean step in a row: grow, reset
        (&clean, 131072.0, 1),
        (&inf, 65536.0, 0), // overflow: back off, reset
        (&clean, 65536.0, 1),
        (&inf, 32768.0, 0),
    ];
    for (i, (found, s, t)) in steps.into_iter().enumerate() {
        cpu()
            .update_loss_scale(&p, &mut scale, &mut tracker, found)
            .unwrap();
        assert_eq!(read(&scale), vec![s], "step {i}");
        assert_eq!(tracker, buf(HostData::I32(vec![t])), "step {i}");
    }
    // A growth that would overflow f32 keeps the scale (PyTorch checks isfinite).
    let mut scale = buf(HostData::F32(vec![f32::MAX]));
    let mut tracker = buf(HostData::I32(vec![2]));
    cpu()
        .update_loss_scale(&p, &mut scale, &mut tracker, &clean)
        .unwrap();
    assert_eq!(scale, buf(HostData::F32(vec![f32::MAX])));
    assert_eq!(tracker, buf(HostData::I32(vec![0])));
}

#[test]
fn hysteresis_and_min_scale_follow_megatron() {
    let p = ScaleUpdateParams {
        growth_interval: 3,
        hysteresis: 2,
        min_scale: 16384.0,
        ..ScaleUpdateParams::default()
    };
    let mut scale = buf(HostData::F32(vec![65536.0]));
    let mut tracker = buf(HostData::I32(vec![0, 0]));
    let clean = buf(HostData::F32(vec![0.0]));
    let inf = buf(HostData::F32(vec![1.0]));
    // (found_inf, scale after, [clean steps in a row, overflows since growth])
    let steps = [
        (&inf, 65536.0, [0, 1]), // 1st overflow of 2: tolerated (the step is still skipped)
        (&inf, 32768.0, [0, 2]), // 2nd: back off
        (&inf, 16384.0, [0, 3]), // every later one backs off ...
        (&inf, 16384.0, [0, 4]), // ... but not below min_scale
        (&clean, 16384.0, [1, 4]), // clean steps do not reset the overflow count
        (&clean, 16384.0, [2, 4]),
        (&clean, 32768.0, [0, 0]), // growth does
        (&inf, 32768.0, [0, 1]),   // tolerated again
    ];
    for (i, (found, s, t)) in steps.into_iter().enumerate() {
        cpu()
            .update_loss_scale(&p, &mut scale, &mut tracker, found)
            .unwrap();
        assert_eq!(read(&scale), vec![s], "step {i}");
        assert_eq!(tracker, buf(HostData::I32(t.to_vec())), "step {i}");
    }
    // With hysteresis the tracker needs two elements.
    let mut short = buf(HostData::I32(vec![0]));
    assert!(
        cpu()
            .update_loss_scale(&p, &mut scale, &mut short, &inf)
            .is_err()
    );
}
