//! Element-wise ops and reductions.

use super::{ODD, assert_close, cpu, eps_compute, input, read, rng, round_tol};
use brrr_backend::{Backend, BinaryOp, DType, HostData, Layout, ReduceOp, Shape, UnaryOp};

const UNARY: [UnaryOp; 13] = [
    UnaryOp::Neg,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Abs,
    UnaryOp::Square,
    UnaryOp::Recip,
    UnaryOp::Relu,
    UnaryOp::Tanh,
    UnaryOp::Sigmoid,
    UnaryOp::Affine {
        mul: -1.75,
        add: 0.5,
    },
    UnaryOp::Clamp { lo: -0.5, hi: 0.25 },
];

#[test]
fn unary_every_op_every_dtype() {
    let mut seed = 1000;
    for dtype in DType::FLOATS {
        for op in UNARY {
            let (lo, hi) = match op {
                UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => (0.05, 4.0),
                UnaryOp::Exp => (-6.0, 6.0),
                _ => (-3.0, 3.0),
            };
            for n in ODD.into_iter().chain([70_001]) {
                seed += 1;
                let mut r = rng(seed);
                let (x, xb) = input(&mut r, dtype, n, lo, hi);
                let mut out = cpu().zeros(dtype, n).unwrap();
                cpu().unary(op, &xb, &mut out).unwrap();
                let want: Vec<f64> = x.iter().map(|&v| op.apply(v)).collect();
                let extra = |i: usize| match op {
                    UnaryOp::Affine { mul, add } => {
                        (x[i] * f64::from(mul)).abs() + f64::from(add).abs()
                    }
                    _ => 0.0,
                };
                let ec = eps_compute(dtype);
                assert_close(&format!("{op:?} {dtype} n={n}"), &read(&out), &want, |i| {
                    round_tol(dtype, want[i]) + 8.0 * ec * (want[i].abs() + extra(i))
                });
            }
        }
    }
}

#[test]
fn unary_uses_the_first_out_len_elements() {
    let x = cpu()
        .upload(&HostData::F32(vec![1.0, 4.0, 9.0, 16.0]))
        .unwrap();
    let mut out = cpu().zeros(DType::F32, 2).unwrap();
    cpu().unary(UnaryOp::Sqrt, &x, &mut out).unwrap();
    assert_eq!(read(&out), vec![1.0, 2.0]);
}

fn layout(dims: &[usize], strides: &[usize], offset: usize) -> Layout {
    Layout {
        shape: Shape::new(dims),
        strides: strides.to_vec(),
        offset,
    }
}

/// `(out shape, a layout, a buffer length, b layout, b buffer length)`.
fn broadcast_cases() -> Vec<(Layout, usize, Layout, usize)> {
    let c = |d: &[usize]| Layout::contiguous(d);
    let bc = |from: &[usize], to: &[usize]| {
        Layout::contiguous(from)
            .broadcast_to("test", &Shape::new(to))
            .unwrap()
    };
    vec![
        (c(&[7, 33]), 7 * 33, c(&[7, 33]), 7 * 33),
        (c(&[7, 33]), 7 * 33, bc(&[33], &[7, 33]), 33),
        (bc(&[5, 1, 7], &[5, 3, 7]), 35, bc(&[3, 1], &[5, 3, 7]), 3),
        // A transposed view (a [33, 7] buffer read as [7, 33]) against a scalar.
        (layout(&[7, 33], &[1, 7], 0), 7 * 33, bc(&[], &[7, 33]), 1),
        // Offsets into larger buffers, and a non-mergeable middle dimension.
        (
            layout(&[3, 4, 5], &[40, 10, 1], 3),
            130,
            layout(&[3, 4, 5], &[1, 15, 3], 2),
            70,
        ),
        (c(&[1]), 1, c(&[1]), 1),
        // Big enough to be cut into tasks, with tasks ending mid-row.
        (c(&[300, 257]), 300 * 257, bc(&[257], &[300, 257]), 257),
        (
            layout(&[257, 300], &[1, 257], 0),
            300 * 257,
            bc(&[257, 1], &[257, 300]),
            257,
        ),
    ]
}

#[test]
fn binary_broadcasting_every_op_every_dtype() {
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    let mut seed = 2000;
    for dtype in DType::FLOATS {
        for (case, (al, alen, bl, blen)) in broadcast_cases().into_iter().enumerate() {
            for op in ops {
                seed += 1;
                let mut r = rng(seed);
                let (a, ab) = input(&mut r, dtype, alen, -2.0, 2.0);
                let (b, bb) = input(&mut r, dtype, blen, -2.0, 2.0);
                let n = al.shape.elem_count();
                let mut out = cpu().zeros(dtype, n).unwrap();
                cpu().binary(op, &ab, &al, &bb, &bl, &mut out).unwrap();
                let pairs: Vec<(f64, f64)> = al
                    .offsets()
                    .zip(bl.offsets())
                    .map(|(i, j)| (a[i], b[j]))
                    .collect();
                let want: Vec<f64> = pairs.iter().map(|&(x, y)| op.apply(x, y)).collect();
                let ec = eps_compute(dtype);
                assert_close(
                    &format!("{op:?} {dtype} case {case}"),
                    &read(&out),
                    &want,
                    |i| {
                        round_tol(dtype, want[i])
                            + 4.0 * ec * (want[i].abs() + pairs[i].0.abs() + pairs[i].1.abs())
                    },
                );
            }
        }
    }
}

#[test]
fn axpy_accumulates() {
    let mut seed = 3000;
    for dtype in DType::FLOATS {
        for n in ODD.into_iter().chain([100_003]) {
            seed += 1;
            let mut r = rng(seed);
            let (x, xb) = input(&mut r, dtype, n + 3, -2.0, 2.0); // longer x is fine
            let (y, mut yb) = input(&mut r, dtype, n, -2.0, 2.0);
            let alpha = -0.625f32;
            cpu().axpy(alpha, &xb, &mut yb, None).unwrap();
            let want: Vec<f64> = (0..n).map(|i| y[i] + f64::from(alpha) * x[i]).collect();
            let ec = eps_compute(dtype);
            assert_close(&format!("axpy {dtype} n={n}"), &read(&yb), &want, |i| {
                round_tol(dtype, want[i]) + 4.0 * ec * (y[i].abs() + x[i].abs())
            });
        }
    }
}

#[test]
fn reduce_every_op_every_dtype() {
    let shapes = [
        (1, 1, 1),
        (7, 33, 1),
        (3, 65, 7),
        (1, 130, 33),
        (5, 1, 9),
        (2, 300, 257),
        (1, 40_000, 1),
        (3, 7, 2000),
    ];
    let mut seed = 4000;
    for dtype in DType::FLOATS {
        for (outer, n, inner) in shapes {
            for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
                seed += 1;
                let mut r = rng(seed);
                let (x, xb) = input(&mut r, dtype, outer * n * inner, -2.0, 2.0);
                let mut out = cpu().zeros(dtype, outer * inner).unwrap();
                cpu().reduce(op, &xb, outer, n, inner, &mut out).unwrap();
                let mut want = vec![0.0; outer * inner];
                let mut mag = vec![0.0; outer * inner];
                for o in 0..outer {
                    for i in 0..inner {
                        let col: Vec<f64> = (0..n).map(|k| x[(o * n + k) * inner + i]).collect();
                        want[o * inner + i] = match op {
                            ReduceOp::Sum => col.iter().sum(),
                            ReduceOp::Mean => col.iter().sum::<f64>() / n as f64,
                            ReduceOp::Max => col.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                            ReduceOp::Min => col.iter().copied().fold(f64::INFINITY, f64::min),
                        };
                        mag[o * inner + i] = col.iter().map(|v| v.abs()).sum();
                    }
                }
                let ec = eps_compute(dtype);
                assert_close(
                    &format!("{op:?} {dtype} [{outer}, {n}, {inner}]"),
                    &read(&out),
                    &want,
                    |i| round_tol(dtype, want[i]) + (n as f64 + 2.0) * ec * mag[i],
                );
            }
        }
    }
}

#[test]
fn reduce_sum_over_an_empty_axis_is_zero() {
    let x = cpu().zeros(DType::F32, 0).unwrap();
    let mut out = cpu().upload(&HostData::F32(vec![5.0; 6])).unwrap();
    cpu().reduce(ReduceOp::Sum, &x, 2, 0, 3, &mut out).unwrap();
    assert_eq!(read(&out), vec![0.0; 6]);
    assert!(cpu().reduce(ReduceOp::Max, &x, 2, 0, 3, &mut out).is_err());
}

#[test]
fn fast_exp_is_within_two_ulp() {
    use crate::scalar::exp_f32;
    let ulp_err = |x: f32| {
        let want = (f64::from(x)).exp() as f32;
        let got = exp_f32(x);
        (got.to_bits() as i64 - want.to_bits() as i64).abs()
    };
    let (lo, hi) = (-87.3f32, 88.7f32);
    let steps = 2_000_000;
    let worst = (0..=steps)
        .map(|i| lo + (hi - lo) * (i as f32 / steps as f32))
        .chain([0.0, -0.0, 1.0, -1.0, 1e-8, -1e-8, 0.5, 88.72, -87.33])
        .map(ulp_err)
        .max()
        .unwrap();
    assert!(worst <= 2, "worst error {worst} ulp");
    assert_eq!(exp_f32(0.0), 1.0);
    assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp_f32(-1000.0), 0.0);
    assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
    assert_eq!(exp_f32(100.0), f32::INFINITY);
    assert!(exp_f32(f32::NAN).is_nan());
}

/// The fused sum of squares is bitwise the composite it replaces (widen to f32, square
/// into a temporary, sum), at every offset and length, across block boundaries.
#[test]
fn sum_squares_is_bitwise_square_then_sum() {
    let mut seed = 5000;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for n in [1, 7, 8, 9, 4095, 4096, 4097, 3 * 4096 + 5, 70_001] {
            seed += 1;
            let (_, xb) = input(&mut rng(seed), dtype, n, -3.0, 3.0);
            for (offset, len) in [(0, n), (n / 3, n - n / 3), (0, n / 2), (n, 0)] {
                let mut wide = cpu().zeros(DType::F32, n).unwrap();
                cpu().cast(&xb, &mut wide).unwrap();
                let part = HostData::F32(
                    read(&wide)[offset..offset + len]
                        .iter()
                        .map(|&v| v as f32)
                        .collect(),
                );
                let part = cpu().upload(&part).unwrap();
                let mut sq = cpu().zeros(DType::F32, len).unwrap();
                cpu().unary(UnaryOp::Square, &part, &mut sq).unwrap();
                let mut want = cpu().zeros(DType::F32, 1).unwrap();
                if len > 0 {
                    cpu()
                        .reduce(ReduceOp::Sum, &sq, 1, len, 1, &mut want)
                        .unwrap();
                }
                let mut got = cpu().zeros(DType::F32, 1).unwrap();
                cpu().sum_squares(&xb, offset, len, &mut got).unwrap();
                assert_eq!(
                    read(&got)[0].to_bits(),
                    read(&want)[0].to_bits(),
                    "{dtype:?} n={n} offset={offset} len={len}"
                );
            }
        }
    }
}

#[test]
fn sum_squares_rejects_bad_ranges_and_dtypes() {
    let x = cpu().upload(&HostData::F32(vec![1.0; 10])).unwrap();
    let mut out = cpu().zeros(DType::F32, 1).unwrap();
    let err = cpu()
        .sum_squares(&x, 4, 7, &mut out)
        .unwrap_err()
        .to_string();
    assert!(err.contains("sum_squares"), "{err}");
    let err = cpu()
        .sum_squares(&x, usize::MAX, 2, &mut out)
        .unwrap_err()
        .to_string();
    assert!(err.contains("overflows"), "{err}");
    let mut out16 = cpu().zeros(DType::F16, 1).unwrap();
    assert!(cpu().sum_squares(&x, 0, 10, &mut out16).is_err());
    let x64 = cpu().upload(&HostData::F64(vec![1.0; 4])).unwrap();
    let err = cpu()
        .sum_squares(&x64, 0, 4, &mut out)
        .unwrap_err()
        .to_string();
    assert!(err.contains("f32, f16 or bf16"), "{err}");
    cpu().sum_squares(&x, 3, 7, &mut out).unwrap();
    assert_eq!(read(&out)[0], 7.0);
}
