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

/// The master's arithmetic is the f32 step's, bit for bit, and the copy is the master
/// rounded once.
#[test]
fn adamw_master_is_the_f32_step_plus_one_rounding() {
    let mut seed = 20_000;
    for copy_dt in [DType::F16, DType::BF16, DType::F32] {
        for grad_dt in [DType::F32, copy_dt] {
            for (inv, found) in [(None, None), (Some(0.125f32), Some(0.0f32))] {
                seed += 1;
                let n = 20_001;
                let mut r = rng(seed);
                let (_, master0) = input(&mut r, DType::F32, n, -2.0, 2.0);
                let (g, gb) = input(&mut r, grad_dt, n, -1.0, 1.0);
                let hp = AdamWParams {
                    lr: 0.05,
                    weight_decay: 0.1,
                    step: 4,
                    grad_scale: 0.5,
                    ..Default::default()
                };
                let isb = inv.map(|s| buf(HostData::F32(vec![s])));
                let fb = found.map(|s| buf(HostData::F32(vec![s])));
                let (mut m1, mut v1) = (
                    buf(HostData::F32(vec![0.01; n])),
                    buf(HostData::F32(vec![0.001; n])),
                );
                let (mut m2, mut v2) = (m1.clone(), v1.clone());
                let mut plain = master0.clone();
                let g32 = buf(HostData::from_f64(DType::F32, &g));
                cpu()
                    .adamw(
                        &hp,
                        &mut plain,
                        &g32,
                        &mut m1,
                        &mut v1,
                        isb.as_ref(),
                        fb.as_ref(),
                    )
                    .unwrap();
                let mut master = master0.clone();
                let mut copy = buf(HostData::from_f64(copy_dt, &vec![f64::NAN; n]));
                cpu()
                    .adamw_master(
                        &hp,
                        &mut master,
                        &mut copy,
                        &gb,
                        &mut m2,
                        &mut v2,
                        isb.as_ref(),
                        fb.as_ref(),
                    )
                    .unwrap();
                let case = format!("copy {copy_dt} grad {grad_dt} inv {inv:?}");
                assert_eq!(master, plain, "{case}: master");
                assert_eq!((m1, v1), (m2, v2), "{case}: moments");
                let want = buf(HostData::from_f64(copy_dt, &read(&master)));
                assert_eq!(copy, want, "{case}: copy");
            }
        }
    }
}

#[test]
fn adamw_master_skips_everything_and_refuses_bad_dtypes() {
    let c = cpu();
    let hp = AdamWParams::default();
    let f32s = |v: f32, n: usize| buf(HostData::F32(vec![v; n]));
    let mut master = f32s(0.5, 3);
    let mut copy = buf(HostData::from_f64(DType::BF16, &[7.0; 3]));
    let (mut m, mut v) = (f32s(0.0, 3), f32s(0.0, 3));
    c.adamw_master(
        &hp,
        &mut master,
        &mut copy,
        &f32s(1.0, 3),
        &mut m,
        &mut v,
        None,
        Some(&f32s(1.0, 1)),
    )
    .unwrap();
    assert_eq!(master, f32s(0.5, 3));
    assert_eq!(read(&copy), vec![7.0; 3], "a skipped step writes no copy");
    assert_eq!((m.clone(), v.clone()), (f32s(0.0, 3), f32s(0.0, 3)));
    let bad: [(DType, DType, DType); 4] = [
        (DType::BF16, DType::BF16, DType::BF16), // master not f32
        (DType::F32, DType::F64, DType::F64),    // f64 copy
        (DType::F32, DType::BF16, DType::F16),   // gradient neither f32 nor the copy's
        (DType::F32, DType::I32, DType::F32),    // integer copy
    ];
    for (md, cd, gd) in bad {
        let mut master = buf(HostData::from_f64(md, &[0.5; 3]));
        let mut copy = buf(HostData::from_f64(cd, &[0.5; 3]));
        let g = buf(HostData::from_f64(gd, &[0.5; 3]));
        let e = c
            .adamw_master(&hp, &mut master, &mut copy, &g, &mut m, &mut v, None, None)
            .unwrap_err();
        assert!(
            e.to_string().contains("adamw_master"),
            "{md} {cd} {gd}: {e}"
        );
    }
    // A copy one element short.
    let mut short = buf(HostData::from_f64(DType::BF16, &[0.5; 2]));
    let mut master = f32s(0.5, 3);
    assert!(
        c.adamw_master(
            &hp,
            &mut master,
            &mut short,
            &f32s(1.0, 3),
            &mut m,
            &mut v,
            None,
            None
        )
        .is_err()
    );
}

/// The host code that `brrr-nn`'s `clip_grad_norm` runs, as the reference.
fn host_clip(sumsq: f32, max_norm: f64) -> (f32, f32) {
    let norm = f64::from(sumsq).sqrt();
    (norm as f32, (max_norm / (norm + 1e-6)).min(1.0) as f32)
}

#[test]
fn clip_coefficient_is_bitwise_the_host_formula() {
    let c = cpu();
    for (ss, max_norm) in [
        (4.0f32, 1.0f64),
        (0.25, 1.0),
        (2.0, 1.0),
        (1234.567, 0.75),
        (3.0e-12, 1.0),
        (0.0, 0.5),
        (f32::INFINITY, 1.0),
        (f32::NAN, 1.0),
        (f32::MAX, 1e30),
    ] {
        let (mut norm, mut coef) = (
            buf(HostData::F32(vec![f32::NAN])),
            buf(HostData::F32(vec![f32::NAN])),
        );
        c.clip_coefficient(
            &buf(HostData::F32(vec![ss])),
            max_norm,
            &mut norm,
            &mut coef,
        )
        .unwrap();
        let (wn, wc) = host_clip(ss, max_norm);
        let (HostData::F32(n), HostData::F32(k)) = (&*norm, &*coef) else {
            panic!("outputs stay f32");
        };
        assert_eq!(n[0].to_bits(), wn.to_bits(), "norm of {ss}");
        assert_eq!(k[0].to_bits(), wc.to_bits(), "coef of {ss}, {max_norm}");
    }
    let mut o = (buf(HostData::F32(vec![0.0])), buf(HostData::F32(vec![0.0])));
    let one = buf(HostData::F32(vec![1.0]));
    for bad in [0.0, -1.0, f64::NAN] {
        let e = c
            .clip_coefficient(&one, bad, &mut o.0, &mut o.1)
            .unwrap_err();
        assert!(e.to_string().contains("clip_coefficient"), "{e}");
    }
    let f64_sum = buf(HostData::F64(vec![1.0]));
    assert!(
        c.clip_coefficient(&f64_sum, 1.0, &mut o.0, &mut o.1)
            .is_err()
    );
    let mut empty = buf(HostData::F32(vec![]));
    assert!(c.clip_coefficient(&one, 1.0, &mut empty, &mut o.1).is_err());
}

/// Parameters laid end to end in flat buffers, each updated through its `range`, end
/// bitwise where updating each in its own buffers puts them; and an element outside
/// every range is never touched.
#[test]
fn ranges_of_flat_buffers_update_like_separate_buffers() {
    let mut r = rng(31_000);
    let sizes = [33usize, 1, 20_001, 7];
    let total: usize = sizes.iter().sum::<usize>() + 1; // one spare element at the end
    let slices = |h: &HostData| -> Vec<Vec<f64>> {
        let all = h.to_f64();
        let mut at = 0;
        sizes
            .iter()
            .map(|&n| {
                at += n;
                all[at - n..at].to_vec()
            })
            .collect()
    };
    for dtype in [DType::F32, DType::BF16] {
        let (p, mut flat_p) = input(&mut r, dtype, total, -2.0, 2.0);
        let (g, flat_g) = input(&mut r, dtype, total, -1.0, 1.0);
        let mut flat_m = cpu().zeros(DType::F32, total).unwrap();
        let mut flat_v = cpu().zeros(DType::F32, total).unwrap();
        let mut offset = 0;
        let mut want = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let hp = AdamWParams {
                lr: 0.05,
                // Weight decay differs per parameter, which is why llm.c and ZeRO launch
                // one update per parameter rather than one over the whole buffer.
                weight_decay: if i % 2 == 0 { 0.1 } else { 0.0 },
                step: 2,
                ..Default::default()
            };
            cpu()
                .adamw(
                    &AdamWParams {
                        range: Some(brrr_backend::ElemRange::new(offset, n)),
                        ..hp
                    },
                    &mut flat_p,
                    &flat_g,
                    &mut flat_m,
                    &mut flat_v,
                    None,
                    None,
                )
                .unwrap();
            let part = |x: &[f64]| buf(HostData::from_f64(dtype, &x[offset..offset + n]));
            let (mut pb, gb) = (part(&p), part(&g));
            let mut mb = cpu().zeros(DType::F32, n).unwrap();
            let mut vb = cpu().zeros(DType::F32, n).unwrap();
            cpu()
                .adamw(&hp, &mut pb, &gb, &mut mb, &mut vb, None, None)
                .unwrap();
            want.push((read(&pb), read(&mb), read(&vb)));
            offset += n;
        }
        let (fp, fm, fv) = (slices(&flat_p), slices(&flat_m), slices(&flat_v));
        for (i, (wp, wm, wv)) in want.iter().enumerate() {
            assert_eq!(&fp[i], wp, "{dtype} parameter {i}");
            assert_eq!(&fm[i], wm, "{dtype} m {i}");
            assert_eq!(&fv[i], wv, "{dtype} v {i}");
        }
        assert_eq!(
            read(&flat_p)[total - 1],
            p[total - 1],
            "{dtype}: outside every range"
        );
        assert_eq!(read(&flat_m)[total - 1], 0.0);
    }
}
