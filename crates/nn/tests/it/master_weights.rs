//! Mixed-precision training pieces on brrr-cpu: f32 master weights beside a bf16
//! compute copy, and gradient clipping without a host read.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::{DType, HostData};
use brrr_cpu::CpuBackend;
use brrr_nn::{
    AdamW, AdamWConfig, Linear, MicroBatch, Param, Stash, clip_grad_norm, clip_grad_norm_on_device,
};
use brrr_tensor::Tensor;

fn f64s(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    // A small LCG: deterministic inputs without a dependency.
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

fn bf16_round(v: &[f64]) -> Vec<f64> {
    HostData::from_f64(DType::BF16, v).to_f64()
}

/// A bias-free Linear trained in bf16 with an f32 master, five AdamW steps, against the
/// same steps in f64 on the host. The loss is `Σ y ⊙ r`, so `dy = r` and the weight
/// gradient is `rᵀ x`, exact enough in f32 that the f64 reference sees the same
/// gradient. The learning rate is far below bf16's resolution at the weights' size:
/// without the master every update would round away.
#[test]
fn bf16_linear_with_an_f32_master_tracks_f64_training() {
    let cpu = CpuBackend::new();
    let (rows, inp, out) = (6, 8, 4);
    let w0 = f64s(out * inp, 1, 0.5, 1.5);
    let x = bf16_round(&f64s(rows * inp, 2, -1.0, 1.0));
    let r = bf16_round(&f64s(rows * out, 3, -1.0, 1.0));
    let master = Tensor::from_f64(&cpu, &w0, [out, inp], DType::F32).unwrap();
    let mut layer = Linear {
        weight: Param::with_master("w", master, DType::BF16, DType::F32).unwrap(),
        bias: None,
        saved_input: Stash::new(),
        pending_weight: Stash::new(),
    };
    assert_eq!(layer.weight.value.dtype(), DType::BF16);
    assert_eq!(layer.weight.grad.dtype(), DType::F32);
    let xt = Tensor::from_f64(&cpu, &x, [rows, inp], DType::BF16).unwrap();
    let dy = Tensor::from_f64(&cpu, &r, [rows, out], DType::BF16).unwrap();
    let config = AdamWConfig {
        weight_decay: 0.1,
        ..AdamWConfig::default()
    };
    let lr = 1e-4f32;
    let mut opt = AdamW::new(config);

    // The f64 reference, with the master rounded to f32 at the start as the device holds it.
    let mut w: Vec<f64> = w0.iter().map(|&v| f64::from(v as f32)).collect();
    let (mut m, mut v) = (vec![0.0f64; w.len()], vec![0.0f64; w.len()]);
    let grad: Vec<f64> = (0..out * inp)
        .map(|idx| {
            let (o, i) = (idx / inp, idx % inp);
            (0..rows).map(|b| r[b * out + o] * x[b * inp + i]).sum()
        })
        .collect();
    let (b1, b2) = (f64::from(config.beta1), f64::from(config.beta2));
    for step in 1..=5 {
        layer.weight.zero_grad().unwrap();
        let _y = layer.forward(MicroBatch(0), &xt).unwrap();
        layer.backward(MicroBatch(0), &dy).unwrap();
        opt.step(vec![&mut layer.weight], lr, 1.0).unwrap();
        for j in 0..w.len() {
            m[j] = b1 * m[j] + (1.0 - b1) * grad[j];
            v[j] = b2 * v[j] + (1.0 - b2) * grad[j] * grad[j];
            let mhat = m[j] / (1.0 - b1.powi(step));
            let vhat = v[j] / (1.0 - b2.powi(step));
            let upd = mhat / (vhat.sqrt() + f64::from(config.eps))
                + f64::from(config.weight_decay) * w[j];
            w[j] -= f64::from(lr) * upd;
        }
    }
    let got = layer.weight.master.as_ref().unwrap().to_vec_f64().unwrap();
    for j in 0..w.len() {
        // A few f32 ulps of the weight per step.
        let tol = 5.0 * 4.0 * f64::from(f32::EPSILON) * w[j].abs();
        assert!(
            (got[j] - w[j]).abs() <= tol,
            "w[{j}]: master {} vs f64 {} (tol {tol:e})",
            got[j],
            w[j]
        );
        // The weights really moved, by much less than bf16 can resolve at their size.
        assert!((got[j] - w0[j] as f32 as f64).abs() > 1e-4);
    }
    // The compute copy is the master rounded once.
    assert_eq!(
        layer.weight.value.to_vec_f64().unwrap(),
        bf16_round(&got),
        "value = bf16(master)"
    );
    // Training the bf16 weights directly loses the updates: they stay where they were.
    let mut plain = Param::new(
        "w16",
        Tensor::from_f64(&cpu, &w0, [out, inp], DType::BF16).unwrap(),
    )
    .unwrap();
    let g16 = Tensor::from_f64(&cpu, &grad, [out, inp], DType::BF16).unwrap();
    let mut opt16 = AdamW::new(config);
    for _ in 0..5 {
        plain.grad = g16.deep_clone().unwrap();
        opt16.step(vec![&mut plain], lr, 1.0).unwrap();
    }
    assert_eq!(plain.value.to_vec_f64().unwrap(), bf16_round(&w0));
}

fn params_with_grads(cpu: &CpuBackend, dtype: DType) -> Vec<Param<CpuBackend>> {
    [(vec![5, 7], 10u64), (vec![7], 11), (vec![3, 4], 12)]
        .into_iter()
        .map(|(dims, seed)| {
            let n: usize = dims.iter().product();
            let value = Tensor::from_f64(cpu, &f64s(n, seed, -1.0, 1.0), dims.clone(), dtype);
            let mut p = Param::new(format!("p{seed}"), value.unwrap()).unwrap();
            p.grad = Tensor::from_f64(cpu, &f64s(n, seed + 100, -2.0, 2.0), dims, dtype).unwrap();
            p
        })
        .collect()
}

/// The on-device clip gives bitwise the host code's norm and factor, and the factor
/// as `inv_scale` (grad_scale = 1) gives bitwise the step the factor as `grad_scale`
/// gives, which is what `brrr train` does today.
#[test]
fn clipping_on_device_is_bitwise_the_host_clip() {
    let cpu = CpuBackend::new();
    for dtype in [DType::F32, DType::BF16, DType::F64] {
        for max_norm in [0.5, 1.0, 1e3] {
            let mut host = params_with_grads(&cpu, dtype);
            let mut dev = params_with_grads(&cpu, dtype);
            let (norm, coef) = clip_grad_norm(&host.iter().collect::<Vec<_>>(), max_norm).unwrap();
            let (dn, dc) =
                clip_grad_norm_on_device(&dev.iter().collect::<Vec<_>>(), max_norm).unwrap();
            assert_eq!(dn.dtype(), DType::F32);
            let dn = dn.to_scalar_f64().unwrap() as f32;
            assert_eq!(dn.to_bits(), (norm as f32).to_bits(), "{dtype} norm");
            let dcv = dc.to_scalar_f64().unwrap() as f32;
            assert_eq!(dcv.to_bits(), coef.to_bits(), "{dtype} max_norm {max_norm}");
            let mut a = AdamW::new(AdamWConfig::default());
            let mut b = AdamW::new(AdamWConfig::default());
            for _ in 0..2 {
                a.step(host.iter_mut().collect(), 1e-2, coef).unwrap();
                b.step_scaled(dev.iter_mut().collect(), 1e-2, 1.0, Some(&dc), None)
                    .unwrap();
            }
            for (p, q) in host.iter().zip(&dev) {
                let (hp, dp) = (p.value.to_vec_f64().unwrap(), q.value.to_vec_f64().unwrap());
                let same = hp.iter().zip(&dp).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{dtype} max_norm {max_norm}: {} differs", p.name);
            }
        }
    }
    let none: Vec<&Param<CpuBackend>> = Vec::new();
    assert!(clip_grad_norm_on_device(&none, 1.0).is_err());
    let ps = params_with_grads(&cpu, DType::F32);
    assert!(clip_grad_norm_on_device(&ps.iter().collect::<Vec<_>>(), 0.0).is_err());
}

/// A found_inf flag on the device skips the whole step, master and copy included.
#[test]
fn found_inf_skips_a_master_step() {
    let cpu = CpuBackend::new();
    let w = Tensor::from_f64(&cpu, &[0.25, -0.5, 1.0, 2.0], [2, 2], DType::F32).unwrap();
    let mut p = Param::with_master("w", w, DType::F16, DType::F16).unwrap();
    p.grad = Tensor::from_f64(&cpu, &[1.0; 4], [2, 2], DType::F16).unwrap();
    let found = Tensor::from_f64(&cpu, &[1.0], [1], DType::F32).unwrap();
    let mut opt = AdamW::new(AdamWConfig::default());
    opt.step_scaled(vec![&mut p], 0.1, 1.0, None, Some(&found))
        .unwrap();
    assert_eq!(
        p.master.as_ref().unwrap().to_vec_f64().unwrap(),
        vec![0.25, -0.5, 1.0, 2.0]
    );
    let clean = Tensor::from_f64(&cpu, &[0.0], [1], DType::F32).unwrap();
    opt.step_scaled(vec![&mut p], 0.1, 1.0, None, Some(&clean))
        .unwrap();
    let m = p.master.as_ref().unwrap().to_vec_f64().unwrap();
    assert!(m[0] < 0.25, "{m:?}");
    assert_eq!(
        p.value.to_vec_f64().unwrap(),
        HostData::from_f64(DType::F16, &m).to_f64()
    );
    // Dtype rules of the constructor.
    let w = Tensor::from_f64(&cpu, &[1.0], [1], DType::BF16).unwrap();
    assert!(Param::with_master("w", w, DType::BF16, DType::F32).is_err());
    let w = Tensor::from_f64(&cpu, &[1.0], [1], DType::F32).unwrap();
    assert!(Param::with_master("w", w.clone(), DType::BF16, DType::F16).is_err());
    assert!(Param::with_master("w", w, DType::F64, DType::F64).is_err());
}
