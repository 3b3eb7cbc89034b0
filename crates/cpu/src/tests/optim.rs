//! AdamW against the f64 formula, several steps, with and without the AMP scalars.

use super::{
    assert_close, buf, cpu, eps_compute, input, quantize, read, reference, rng, round_tol,
};
use brrr_backend::{AdamWParams, Backend, DType, HostData};

#[test]
fn adamw_matches_the_formula_over_several_steps() {
    let mut seed = 10_000;
    for dtype in DType::FLOATS {
        for n in [1usize, 33, 20_001] {
            for inv_scale in [None, Some(0.25f32)] {
                seed += 1;
                let mut r = rng(seed);
                let (mut p, mut pb) = input(&mut r, dtype, n, -2.0, 2.0);
                let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
                let mut mb = cpu().zeros(DType::F32, n).unwrap();
                let mut vb = cpu().zeros(DType::F32, n).unwrap();
                let isb = inv_scale.map(|s| buf(HostData::F32(vec![s])));
                let clean = buf(HostData::F32(vec![0.0]));
                for step in 1..=3 {
                    let hp = AdamWParams {
                        lr: 0.05,
                        weight_decay: 0.1,
                        step,
                        grad_scale: 0.5,
                        ..Default::default()
                    };
                    let (g, gb) = input(&mut r, dtype, n, -1.0, 1.0);
                    cpu()
                        .adamw(
                            &hp,
                            &mut pb,
                            &gb,
                            &mut mb,
                            &mut vb,
                            isb.as_ref(),
                            Some(&clean),
                        )
                        .unwrap();
                    let s = f64::from(inv_scale.unwrap_or(1.0));
                    let (pw, mw, vw) = reference::adamw(&hp, &p, &g, &m, &v, s);
                    let case = format!("adamw {dtype} n={n} step={step} inv_scale={inv_scale:?}");
                    let ec = eps_compute(dtype);
                    assert_close(&format!("{case} param"), &read(&pb), &pw, |i| {
                        round_tol(dtype, pw[i])
                            + 32.0 * ec * (p[i].abs() + 0.05 * (10.0 + 0.1 * p[i].abs()))
                    });
                    assert_close(&format!("{case} m"), &read(&mb), &mw, |i| {
                        round_tol(DType::F32, mw[i]) + 8.0 * ec * (m[i].abs() + g[i].abs())
                    });
                    assert_close(&format!("{case} v"), &read(&vb), &vw, |i| {
                        round_tol(DType::F32, vw[i]) + 8.0 * ec * (v[i].abs() + g[i] * g[i])
                    });
                    // Carry on from what the kernel stored, as training does.
                    p = read(&pb);
                    m = quantize(DType::F32, &mw);
                    v = quantize(DType::F32, &vw);
                    mb = buf(HostData::from_f64(DType::F32, &m));
                    vb = buf(HostData::from_f64(DType::F32, &v));
                }
            }
        }
    }
}

#[test]
fn adamw_skips_the_step_when_found_inf_is_set() {
    for dtype in DType::FLOATS {
        let mut r = rng(11);
        let (p, mut pb) = input(&mut r, dtype, 9, -1.0, 1.0);
        let (_, gb) = input(&mut r, dtype, 9, -1.0, 1.0);
        let mut mb = buf(HostData::F32(vec![0.5; 9]));
        let mut vb = buf(HostData::F32(vec![0.25; 9]));
        let found = buf(HostData::F32(vec![1.0]));
        cpu()
            .adamw(
                &AdamWParams::default(),
                &mut pb,
                &gb,
                &mut mb,
                &mut vb,
                None,
                Some(&found),
            )
            .unwrap();
        assert_eq!(read(&pb), p, "{dtype}");
        assert_eq!(read(&mb), vec![0.5; 9]);
        assert_eq!(read(&vb), vec![0.25; 9]);
    }
}
