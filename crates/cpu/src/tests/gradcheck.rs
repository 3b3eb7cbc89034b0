//! Finite-difference checks of the backward kernels, in f64.
//!
//! Central differences `(L(x + h) − L(x − h)) / 2h` of a random linear functional
//! `L = Σ w ⊙ f(x)` of the *forward kernel* against the *backward kernel*: this ties
//! each pair together independently of the references in `reference.rs`.

use super::{buf, cpu, rng, values};
use brrr_backend::{Backend, DType, HostData, LayerNormSpec, SoftmaxSpec};

const H: f64 = 1e-5;
const TOL: f64 = 1e-7;

fn f64s(v: &[f64]) -> crate::CpuBuffer {
    buf(HostData::F64(v.to_vec()))
}

fn numeric(f: &dyn Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    let mut x = x.to_vec();
    (0..x.len())
        .map(|i| {
            let orig = x[i];
            x[i] = orig + H;
            let plus = f(&x);
            x[i] = orig - H;
            let minus = f(&x);
            x[i] = orig;
            (plus - minus) / (2.0 * H)
        })
        .collect()
}

fn assert_grad(case: &str, analytic: &[f64], numeric: &[f64]) {
    for (i, (a, n)) in analytic.iter().zip(numeric).enumerate() {
        let err = (a - n).abs() / a.abs().max(n.abs()).max(1e-3);
        assert!(
            err < TOL,
            "{case}: element {i}: analytic {a}, numeric {n}, relative error {err:e}"
        );
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn gelu_backward_matches_finite_differences() {
    let mut r = rng(1);
    let x = values(&mut r, 40, -4.0, 4.0);
    let w = values(&mut r, 40, -1.0, 1.0);
    let loss = |x: &[f64]| {
        let mut y = cpu().zeros(DType::F64, x.len()).unwrap();
        cpu().gelu(&f64s(x), &mut y).unwrap();
        dot(&y.to_f64(), &w)
    };
    let mut dx = cpu().zeros(DType::F64, 40).unwrap();
    cpu().gelu_backward(&f64s(&x), &f64s(&w), &mut dx).unwrap();
    assert_grad("gelu", &dx.to_f64(), &numeric(&loss, &x));
}

#[test]
fn softmax_backward_matches_finite_differences() {
    for causal in [false, true] {
        let mut r = rng(2);
        let spec = SoftmaxSpec {
            rows: 6,
            cols: 5,
            scale: 0.7,
            causal,
        };
        let x = values(&mut r, 30, -2.0, 2.0);
        let w = values(&mut r, 30, -1.0, 1.0);
        let forward = |x: &[f64]| {
            let mut y = cpu().zeros(DType::F64, 30).unwrap();
            cpu().softmax(&spec, &f64s(x), &mut y).unwrap();
            y
        };
        let y = forward(&x);
        let mut dx = cpu().zeros(DType::F64, 30).unwrap();
        cpu()
            .softmax_backward(&spec, &y, &f64s(&w), &mut dx)
            .unwrap();
        let loss = |x: &[f64]| dot(&forward(x).to_f64(), &w);
        assert_grad(
            &format!("softmax causal={causal}"),
            &dx.to_f64(),
            &numeric(&loss, &x),
        );
    }
}

#[test]
fn layernorm_backward_matches_finite_differences() {
    let mut r = rng(3);
    let (rows, cols) = (3, 7);
    let spec = LayerNormSpec {
        rows,
        cols,
        eps: 1e-5,
        gamma_offset: 0,
        beta_offset: 0,
    };
    let x = values(&mut r, rows * cols, -2.0, 3.0);
    let g = values(&mut r, cols, -1.5, 1.5);
    let b = values(&mut r, cols, -1.5, 1.5);
    let w = values(&mut r, rows * cols, -1.0, 1.0);
    let forward = |x: &[f64], g: &[f64], b: &[f64]| {
        let mut y = cpu().zeros(DType::F64, rows * cols).unwrap();
        let mut mean = cpu().zeros(DType::F32, rows).unwrap();
        let mut rstd = cpu().zeros(DType::F32, rows).unwrap();
        cpu()
            .layernorm(
                &spec,
                &f64s(x),
                &f64s(g),
                &f64s(b),
                &mut y,
                &mut mean,
                &mut rstd,
            )
            .unwrap();
        (y, mean, rstd)
    };
    let (_, mean, rstd) = forward(&x, &g, &b);
    let mut dx = cpu().zeros(DType::F64, rows * cols).unwrap();
    let mut dg = cpu().zeros(DType::F64, cols).unwrap();
    let mut db = cpu().zeros(DType::F64, cols).unwrap();
    cpu()
        .layernorm_backward(
            &spec,
            &f64s(&w),
            &f64s(&x),
            &f64s(&g),
            &mean,
            &rstd,
            &mut dx,
            &mut dg,
            &mut db,
        )
        .unwrap();
    let num_x = numeric(&|x| dot(&forward(x, &g, &b).0.to_f64(), &w), &x);
    let num_g = numeric(&|g| dot(&forward(&x, g, &b).0.to_f64(), &w), &g);
    let num_b = numeric(&|b| dot(&forward(&x, &g, b).0.to_f64(), &w), &b);
    assert_grad("layernorm dx", &dx.to_f64(), &num_x);
    assert_grad("layernorm dgamma", &dg.to_f64(), &num_g);
    assert_grad("layernorm dbeta", &db.to_f64(), &num_b);
}

#[test]
fn cross_entropy_backward_matches_finite_differences() {
    let mut r = rng(4);
    let (rows, vocab) = (5, 7);
    let z = values(&mut r, rows * vocab, -3.0, 3.0);
    let targets = buf(HostData::I32(vec![3, -1, 0, 6, 2]));
    let dl = values(&mut r, rows, 0.5, 2.0);
    let loss = |z: &[f64]| {
        let mut l = cpu().zeros(DType::F64, rows).unwrap();
        cpu()
            .cross_entropy(&f64s(z), &targets, vocab, &mut l)
            .unwrap();
        dot(&l.to_f64(), &dl)
    };
    let mut dz = cpu().zeros(DType::F64, rows * vocab).unwrap();
    cpu()
        .cross_entropy_backward(&f64s(&z), &targets, &f64s(&dl), vocab, &mut dz)
        .unwrap();
    assert_grad("cross_entropy", &dz.to_f64(), &numeric(&loss, &z));
}
