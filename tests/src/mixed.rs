//! Mixed-precision cases: GEMM with f16/bf16 operands into an f32 C, AdamW on an f32
//! master with a low-precision compute copy, and the on-device clip coefficient.

use crate::cases::{Builder, Op, Out, adamw_variants};
use crate::compare::{Tol, tolerance};
use brrr_backend::{AdamWParams, DType, ElemRange, GemmSpec, HostData};

pub(crate) fn add_cases(b: &mut Builder<'_>, dtype: DType, large: bool) {
    if matches!(dtype, DType::F16 | DType::BF16) {
        gemm_into_f32(b, large);
    }
    if matches!(dtype, DType::F16 | DType::BF16 | DType::F32) {
        adamw_master(b, dtype);
        adamw_master_range(b);
    }
    if dtype == DType::F32 {
        clip_coefficient(b);
    }
}

/// 16-bit A and B, f32 C: the products are exact in f32 and only the summation order
/// differs between backends, so the f32 tolerance applies (scaled by `k`).
fn gemm_into_f32(b: &mut Builder<'_>, large: bool) {
    let plain = |batch, m, n, k| GemmSpec::batched(batch, m, n, k);
    let mut specs = vec![
        plain(1, 7, 5, 3),
        plain(1, 17, 33, 19).trans_a(true),
        plain(2, 20, 24, 28).trans_b(true),
        // A gradient: accumulated into, with beta = 1 (Linear's weight gradient).
        plain(1, 33, 31, 29).trans_a(true).beta(1.0),
        plain(1, 16, 16, 16).alpha(0.5).beta(0.75),
        GemmSpec {
            stride_c: 0,
            ..plain(3, 8, 12, 16).trans_a(true).beta(1.0)
        },
    ];
    if large {
        specs.push(plain(1, 129, 130, 131).trans_b(true));
    }
    for s in specs {
        let label = format!(
            "C=f32 b={} m={} n={} k={}{}{} alpha={} beta={}{}",
            s.batch,
            s.m,
            s.n,
            s.k,
            if s.trans_a { " tA" } else { "" },
            if s.trans_b { " tB" } else { "" },
            s.alpha,
            s.beta,
            if s.stride_c == 0 { " shared-C" } else { "" },
        );
        b.add("gemm", label, |g, d| {
            let (la, lb, lc) = s.required_lens().expect("the suite's specs fit usize");
            let c = if s.beta != 0.0 {
                Out::init("c", g.data(DType::F32, lc, -1.0, 1.0))
            } else {
                Out::poison("c", DType::F32, lc)
            };
            let tol = tolerance(DType::F32).times(2.0 + (s.k as f64).sqrt() / 4.0);
            (
                Op::Gemm(s),
                vec![g.data(d, la, -1.0, 1.0), g.data(d, lb, -1.0, 1.0)],
                vec![c],
                tol,
            )
        });
    }
}

/// The master is f32 and the copy its rounding, so a backend whose master differs from
/// the reference's in the last f32 bits may round the copy to the neighbouring 16-bit
/// value: the case's tolerance is the compute dtype's.
fn adamw_master(b: &mut Builder<'_>, dtype: DType) {
    let mut grads = vec![DType::F32];
    if dtype != DType::F32 {
        grads.push(dtype);
    }
    for n in [1usize, 2, 1001] {
        for &gd in &grads {
            for (p, amp, skip, tail) in adamw_variants() {
                let label = format!("n={n} grad={gd} {tail}");
                b.add("adamw_master", label, |g, d| {
                    let gscale = if amp { 1024.0 } else { 1.0 };
                    let mut inputs = vec![g.data(gd, n, -gscale, gscale)];
                    if amp {
                        inputs.push(HostData::F32(vec![1.0 / 1024.0]));
                        inputs.push(HostData::F32(vec![if skip { 1.0 } else { 0.0 }]));
                    }
                    let master = g.data(DType::F32, n, -1.0, 1.0);
                    // The copy starts as the master rounded, as `Param::with_master` makes it.
                    let copy = HostData::from_f64(d, &master.to_f64());
                    (
                        Op::AdamWMaster {
                            p,
                            inv: amp,
                            found: amp,
                        },
                        inputs,
                        vec![
                            Out::init("master", master),
                            Out::init("copy", copy),
                            Out::init("m", g.data(DType::F32, n, -0.1, 0.1)),
                            Out::init("v", g.data(DType::F32, n, 0.0, 0.01)),
                        ],
                        tolerance(d).times(4.0),
                    )
                });
            }
        }
    }
}

/// AdamW with master weights on one parameter's segment of flat buffers: an even
/// offset (wgpu writes a 16-bit copy a word, two elements, at a time) and an odd length,
/// so the segment ends inside a word whose other half must be kept.
fn adamw_master_range(b: &mut Builder<'_>) {
    let (offset, len, total) = (6usize, 1001usize, 1100usize);
    let p = AdamWParams {
        step: 4,
        grad_scale: 0.5,
        range: Some(ElemRange::new(offset, len)),
        ..AdamWParams::default()
    };
    b.add(
        "adamw_master",
        format!("range {offset}..{} of {total}", offset + len),
        |g, d| {
            let master = g.data(DType::F32, total, -1.0, 1.0);
            let copy = HostData::from_f64(d, &master.to_f64());
            (
                Op::AdamWMaster {
                    p,
                    inv: false,
                    found: false,
                },
                vec![g.data(DType::F32, total, -1.0, 1.0)],
                vec![
                    Out::init("master", master),
                    Out::init("copy", copy),
                    Out::init("m", g.data(DType::F32, total, -0.1, 0.1)),
                    Out::init("v", g.data(DType::F32, total, 0.0, 0.01)),
                ],
                tolerance(d).times(4.0),
            )
        },
    );
}

/// The clip factor from a sum of squares. brrr-cpu and CUDA compute in f64, WGSL in f32:
/// a few f32 ulps apart at most.
fn clip_coefficient(b: &mut Builder<'_>) {
    let cases: [(&str, f32, f64, bool); 6] = [
        ("sumsq=4 max_norm=1 (clips to 1/2)", 4.0, 1.0, true),
        ("sumsq=0.25 max_norm=1 (no clip)", 0.25, 1.0, true),
        ("sumsq=2 max_norm=1 (irrational norm)", 2.0, 1.0, true),
        ("sumsq=0 max_norm=0.5 (zero gradients)", 0.0, 0.5, true),
        ("sumsq=inf (coef 0)", f32::INFINITY, 1.0, true),
        ("sumsq=NaN (coef 1)", f32::NAN, 1.0, false),
    ];
    for (label, ss, max_norm, norm_compared) in cases {
        b.add("clip_coefficient", label, |_, _| {
            let poison = || HostData::F32(vec![f32::NAN]);
            (
                Op::ClipCoefficient(max_norm),
                vec![HostData::F32(vec![ss])],
                vec![
                    if norm_compared {
                        Out::init("norm", poison())
                    } else {
                        // NaN never compares equal, not even to NaN: check coef only.
                        Out::ignored("norm", poison())
                    },
                    Out::init("coef", poison()),
                ],
                Tol::times(tolerance(DType::F32), 4.0),
            )
        });
    }
}
