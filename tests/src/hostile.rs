//! Hostile arguments: sizes whose arithmetic overflows. Each must be an `Err` on every
//! backend: not a panic, and above all not a success, since a wrapped length can pass a
//! length check and let a kernel address memory outside its buffers.
//!
//! Also one bitwise invariant of the optimizer that the reference comparison cannot see:
//! the clip coefficient passed as AdamW's `inv_scale` (with `grad_scale = 1`) gives
//! exactly the update it gives as `grad_scale`.

use crate::{CaseResult, Outcome};
use brrr_backend::{
    AdamWParams, AdamWTensors, AttentionSpec, Backend, BinaryOp, DType, ElemRange, EmbeddingSpec,
    GemmSpec, HostData, LayerNormSpec, Layout, QuantizedMoments, Shape,
};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The suite's name for these cases.
pub(crate) const OP: &str = "hostile";

/// A GEMM spec and the (small) buffer lengths it is called with.
struct GemmCase {
    label: &'static str,
    spec: GemmSpec,
    lens: (usize, usize, usize),
}

fn gemm_cases() -> Vec<GemmCase> {
    // Sized by the word, so the cases overflow on 32-bit wasm as on 64-bit hosts:
    // BIG² and HALF² exceed usize::MAX, TOP · 2 wraps.
    const BIG: usize = 1 << (usize::BITS / 2 + 8);
    const HALF: usize = 1 << (usize::BITS / 2 + 1);
    const TOP: usize = 1 << (usize::BITS - 1);
    let one = GemmSpec::new(1, 1, 1);
    vec![
        GemmCase {
            label: "gemm: batch × stride overflows (both 2^(bits/2 + 8))",
            spec: GemmSpec {
                batch: BIG,
                stride_a: BIG,
                stride_b: BIG,
                stride_c: BIG,
                ..one
            },
            lens: (4, 4, 4),
        },
        GemmCase {
            // (batch - 1) * stride + 1 wraps to exactly 0: an unchecked length passes.
            label: "gemm: batch 2, stride usize::MAX (wraps to a tiny length)",
            spec: GemmSpec {
                batch: 2,
                stride_a: usize::MAX,
                ..one
            },
            lens: (4, 4, 4),
        },
        GemmCase {
            label: "gemm: m × k overflows (m = 2^(bits - 1), k = 2)",
            spec: GemmSpec {
                m: TOP,
                k: 2,
                n: 1,
                ..one
            },
            lens: (4, 4, 4),
        },
        GemmCase {
            label: "gemm: m × n overflows in C only (k = 0)",
            spec: GemmSpec {
                m: BIG,
                n: BIG,
                k: 0,
                ..one
            },
            lens: (4, 4, 4),
        },
        GemmCase {
            label: "gemm: m = 0 yet k × n overflows",
            spec: GemmSpec {
                m: 0,
                n: HALF,
                k: HALF,
                ..one
            },
            lens: (4, 4, 4),
        },
        GemmCase {
            label: "gemm: stride_c wraps (batch 3, stride 2^(bits - 1))",
            spec: GemmSpec {
                batch: 3,
                stride_c: TOP,
                ..one
            },
            lens: (4, 4, 4),
        },
        GemmCase {
            // offset + size wraps to 1: an unchecked end passes the length check.
            label: "gemm: offset_c usize::MAX (offset + size wraps)",
            spec: one.offsets(0, 0, usize::MAX),
            lens: (4, 4, 4),
        },
        GemmCase {
            label: "gemm: offset_a one past the buffer (offset 4, buffer of 4)",
            spec: one.offsets(4, 0, 0),
            lens: (4, 4, 4),
        },
        GemmCase {
            label: "gemm: batch 2 × stride 2^(bits - 1) + offset 1 in B",
            spec: GemmSpec {
                batch: 2,
                stride_b: TOP,
                ..one.offsets(0, TOP, 0)
            },
            lens: (4, 4, 4),
        },
        GemmCase {
            label: "gemm: batch usize::MAX with stride 1",
            spec: GemmSpec {
                batch: usize::MAX,
                stride_a: 1,
                stride_b: 1,
                stride_c: 1,
                ..one
            },
            lens: (4, 4, 4),
        },
    ]
}

fn lay(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
    Layout {
        shape: Shape::new(shape.to_vec()),
        strides: strides.to_vec(),
        offset,
    }
}

/// Layouts whose span overflows, each used as a source and as a destination view.
fn hostile_layouts() -> Vec<(&'static str, Layout)> {
    vec![
        (
            "stride usize::MAX/2 over 3 rows",
            lay(&[3, 2], &[usize::MAX / 2, 1], 0),
        ),
        (
            "offset usize::MAX, one element",
            lay(&[1], &[1], usize::MAX),
        ),
        (
            "strides that sum past usize::MAX",
            lay(&[2, 2], &[usize::MAX / 2 + 1, usize::MAX / 2 + 1], 0),
        ),
        ("offset + span wraps to 0", lay(&[2], &[1], usize::MAX - 1)),
    ]
}

/// Runs `f` and turns its result into an outcome: an error passes, a success or a
/// panic fails.
fn expect_err(f: impl FnOnce() -> brrr_backend::Result<()>) -> Outcome {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Err(_)) => Outcome::Pass { worst: 0.0 },
        Ok(Ok(())) => Outcome::Fail("accepted (expected an error)".to_string()),
        Err(_) => Outcome::Fail("panicked (expected an error)".to_string()),
    }
}

fn result(backend: &str, dtype: DType, case: String, outcome: Outcome) -> CaseResult {
    CaseResult {
        backend: backend.to_string(),
        op: OP,
        dtype,
        case,
        outcome,
    }
}

/// Every hostile case on `x`, in f32 (every backend has it).
pub(crate) fn run<X: Backend>(x: &X) -> Vec<CaseResult> {
    let name = x.info().name;
    let dt = DType::F32;
    let mut out = Vec::new();
    let buf = |n: usize| x.upload(&HostData::F32(vec![0.5; n]));
    for c in gemm_cases() {
        let outcome = expect_err(|| {
            let (a, b) = (buf(c.lens.0)?, buf(c.lens.1)?);
            let mut cc = buf(c.lens.2)?;
            x.gemm(&c.spec, &a, &b, &mut cc)
        });
        out.push(result(name, dt, c.label.to_string(), outcome));
        // The same spec with 16-bit operands into f32 (the mixed-precision path).
        if x.supports(DType::BF16) {
            let outcome = expect_err(|| {
                let a = x.upload(&HostData::from_f64(DType::BF16, &vec![0.5; c.lens.0]))?;
                let b = x.upload(&HostData::from_f64(DType::BF16, &vec![0.5; c.lens.1]))?;
                let mut cc = buf(c.lens.2)?;
                x.gemm(&c.spec, &a, &b, &mut cc)
            });
            out.push(result(
                name,
                DType::BF16,
                format!("{} (C=f32)", c.label),
                outcome,
            ));
        }
    }
    // AdamW on part of flat buffers: a range that ends past a buffer, or past usize::MAX.
    for (label, range, lens) in [
        (
            "adamw: range end wraps past usize::MAX",
            ElemRange::new(usize::MAX, 2),
            [8; 4],
        ),
        (
            "adamw: range 4..12 of 8-element buffers",
            ElemRange::new(4, 8),
            [8; 4],
        ),
        (
            "adamw: range fits param but not v",
            ElemRange::new(2, 4),
            [8, 8, 8, 5],
        ),
    ] {
        let hp = AdamWParams {
            range: Some(range),
            ..AdamWParams::default()
        };
        let outcome = expect_err(|| {
            let (mut p, g) = (buf(lens[0])?, buf(lens[1])?);
            let (mut m, mut v) = (buf(lens[2])?, buf(lens[3])?);
            x.adamw(&hp, &mut p, &g, &mut m, &mut v, None, None)
        });
        out.push(result(name, dt, label.to_string(), outcome));
        let outcome = expect_err(|| {
            let (mut w, mut c, g) = (buf(lens[0])?, buf(lens[0])?, buf(lens[1])?);
            let (mut m, mut v) = (buf(lens[2])?, buf(lens[3])?);
            x.adamw_master(&hp, &mut w, &mut c, &g, &mut m, &mut v, None, None)
        });
        out.push(result(name, dt, format!("{label} (master)"), outcome));
    }
    // 8-bit AdamW: state buffers of the wrong dtype or too short for the range's values,
    // and maps that are not 512 values.
    let words = |n: usize| x.upload(&HostData::U32(vec![0; n]));
    let maps = || x.upload(&HostData::F32(brrr_backend::quant8::adam_maps()));
    // (label, codes words, codes are u32, absmax values, maps values) for 8 values
    // (the state needs 2·2 words and 2·1 absmax).
    for (label, code_len, u32_codes, absmax_len, maps_len) in [
        ("adamw_8bit: codes one word short", 3, true, 2, 512),
        ("adamw_8bit: codes as f32", 4, false, 2, 512),
        ("adamw_8bit: absmax one short", 4, true, 1, 512),
        ("adamw_8bit: 256 map values", 4, true, 2, 256),
    ] {
        let outcome = expect_err(|| {
            let (mut p, g) = (buf(8)?, buf(8)?);
            let mut codes = if u32_codes {
                words(code_len)?
            } else {
                buf(code_len)?
            };
            let mut absmax = buf(absmax_len)?;
            let maps = if maps_len == 512 {
                maps()?
            } else {
                buf(maps_len)?
            };
            let mut state = QuantizedMoments {
                codes: &mut codes,
                absmax: &mut absmax,
                maps: &maps,
            };
            x.adamw_8bit(&AdamWParams::default(), &mut p, &g, &mut state, None, None)
        });
        out.push(result(name, dt, label.to_string(), outcome));
    }
    // Multi-tensor AdamW: a list takes whole buffers (no range), and a short moment in
    // the middle of the list is caught before anything runs.
    for (label, range, v_len) in [
        ("multi_tensor_adamw: a range", Some(ElemRange::new(0, 4)), 8),
        (
            "multi_tensor_adamw: second v shorter than its param",
            None,
            5,
        ),
    ] {
        let hp = AdamWParams {
            range,
            ..AdamWParams::default()
        };
        let outcome = expect_err(|| {
            let (mut p0, g0, mut m0, mut v0) = (buf(8)?, buf(8)?, buf(8)?, buf(8)?);
            let (mut p1, g1, mut m1, mut v1) = (buf(8)?, buf(8)?, buf(8)?, buf(v_len)?);
            let one = |param, grad, m, v| AdamWTensors {
                param,
                master: None,
                grad,
                m,
                v,
                decay: true,
            };
            let mut list = [
                one(&mut p0, &g0, &mut m0, &mut v0),
                one(&mut p1, &g1, &mut m1, &mut v1),
            ];
            x.multi_tensor_adamw(&hp, &mut list, None, None)
        });
        out.push(result(name, dt, label.to_string(), outcome));
    }
    out.extend(flat_param_cases(x));
    let dense = Layout::contiguous([3, 2]);
    for (label, l) in hostile_layouts() {
        let shape = l.shape.dims().to_vec();
        let n = Shape::new(shape.clone()).elem_count();
        let d = Layout::contiguous(shape);
        let outcome = expect_err(|| {
            let src = buf(8)?;
            let mut dst = buf(n.max(1))?;
            x.copy_strided(&src, &l, &mut dst, &d)
        });
        out.push(result(
            name,
            dt,
            format!("copy_strided source: {label}"),
            outcome,
        ));
        let outcome = expect_err(|| {
            let src = buf(n.max(1))?;
            let mut dst = buf(8)?;
            x.copy_strided(&src, &d, &mut dst, &l)
        });
        out.push(result(
            name,
            dt,
            format!("copy_strided destination: {label}"),
            outcome,
        ));
        let outcome = expect_err(|| {
            let (a, b) = (buf(8)?, buf(n.max(1))?);
            let mut o = buf(n.max(1))?;
            x.binary(BinaryOp::Add, &a, &l, &b, &d, &mut o)
        });
        out.push(result(name, dt, format!("binary a: {label}"), outcome));
    }
    // A view that needs more than the buffer holds, without any overflow: still an error.
    let outcome = expect_err(|| {
        let src = buf(5)?;
        let mut dst = buf(6)?;
        x.copy_strided(&src, &dense, &mut dst, &dense)
    });
    out.push(result(
        name,
        dt,
        "copy_strided: source one element short".to_string(),
        outcome,
    ));
    out.extend(attention_cases(x));
    out
}

/// LayerNorm, the embedding and axpy on part of a flat buffer: offsets that wrap past
/// `usize::MAX`, or reach one element past the buffer, are errors on every backend.
fn flat_param_cases<X: Backend>(x: &X) -> Vec<CaseResult> {
    let (name, dt) = (x.info().name, DType::F32);
    let buf = |n: usize| x.upload(&HostData::F32(vec![0.5; n]));
    let ids = |n: usize| x.upload(&HostData::U32(vec![1; n]));
    let mut out = Vec::new();
    // (label, gamma offset, beta offset): gamma, beta, dgamma and dbeta hold 8 elements,
    // rows of 4 columns.
    for (label, g_at, b_at) in [
        (
            "layernorm: gamma offset usize::MAX (offset + cols wraps)",
            usize::MAX,
            0,
        ),
        ("layernorm: beta at 5 of 8 with 4 columns", 0, 5),
    ] {
        let spec = LayerNormSpec::new(2, 4, 1e-5).params_at(g_at, b_at);
        let outcome = expect_err(|| {
            let (xs, g, b) = (buf(8)?, buf(8)?, buf(8)?);
            let (mut y, mut m, mut r) = (buf(8)?, buf(2)?, buf(2)?);
            x.layernorm(&spec, &xs, &g, &b, &mut y, &mut m, &mut r)
        });
        out.push(result(name, dt, label.to_string(), outcome));
        let outcome = expect_err(|| {
            let (dy, xs, g, m, r) = (buf(8)?, buf(8)?, buf(8)?, buf(2)?, buf(2)?);
            let (mut dx, mut dg, mut db) = (buf(8)?, buf(8)?, buf(8)?);
            x.layernorm_backward(&spec, &dy, &xs, &g, &m, &r, &mut dx, &mut dg, &mut db)
        });
        out.push(result(name, dt, format!("{label} (backward)"), outcome));
    }
    // Tables of dim 4 in a 12-element buffer.
    for (label, spec) in [
        (
            "embedding: table offset usize::MAX - 3 (end wraps)",
            EmbeddingSpec::new(4).table_at(usize::MAX - 3, 2),
        ),
        (
            "embedding: 2 rows at 8 of a 12-element buffer",
            EmbeddingSpec::new(4).table_at(8, 2),
        ),
        (
            "embedding: table of 3 elements with dim 4 (not whole rows)",
            EmbeddingSpec {
                dim: 4,
                table: Some(ElemRange::new(1, 3)),
            },
        ),
        (
            "embedding: rows × dim overflows",
            EmbeddingSpec::new(4).table_at(0, usize::MAX / 2),
        ),
    ] {
        let outcome = expect_err(|| {
            let (i, t, mut o) = (ids(2)?, buf(12)?, buf(8)?);
            x.embedding(&spec, &i, &t, &mut o)
        });
        out.push(result(name, dt, label.to_string(), outcome));
        let outcome = expect_err(|| {
            let (i, d, mut t) = (ids(2)?, buf(8)?, buf(12)?);
            x.embedding_backward(&spec, &i, &d, &mut t)
        });
        out.push(result(name, dt, format!("{label} (backward)"), outcome));
    }
    for (label, at) in [
        (
            "axpy: 4 elements at usize::MAX - 1 (end wraps)",
            usize::MAX - 1,
        ),
        ("axpy: 4 elements at 5 of 8", 5),
    ] {
        let outcome = expect_err(|| {
            let (xs, mut y) = (buf(4)?, buf(8)?);
            x.axpy(1.0, &xs, &mut y, Some(at))
        });
        out.push(result(name, dt, label.to_string(), outcome));
    }
    out
}

/// Fused attention ([`Backend::attention`]) with sizes that overflow or buffers one
/// element short: an error on every backend (the default, where there is no kernel).
fn attention_cases<X: Backend>(x: &X) -> Vec<CaseResult> {
    const HALF: usize = 1 << (usize::BITS / 2 + 1);
    let ok = AttentionSpec {
        batch: 1,
        heads: 2,
        seq: 3,
        head_dim: 4,
        scale: 0.5,
    };
    let cases = [
        (
            "B × T overflows",
            AttentionSpec {
                batch: HALF,
                seq: HALF,
                ..ok
            },
        ),
        (
            "H × D overflows",
            AttentionSpec {
                heads: HALF,
                head_dim: HALF,
                ..ok
            },
        ),
        (
            "3 × B·T·H·D wraps",
            AttentionSpec {
                batch: 1 << (usize::BITS - 2),
                seq: 1,
                heads: 1,
                head_dim: 2,
                ..ok
            },
        ),
        (
            "scale is NaN",
            AttentionSpec {
                scale: f32::NAN,
                ..ok
            },
        ),
    ];
    let buf = |n: usize| x.upload(&HostData::F32(vec![0.5; n]));
    let mut out = Vec::new();
    for (label, spec) in cases {
        let outcome = expect_err(|| {
            let qkv = buf(24)?;
            let (mut y, mut lse) = (buf(24)?, buf(6)?);
            x.attention(&spec, &qkv, &mut y, &mut lse)
        });
        out.push(result(
            x.info().name,
            DType::F32,
            format!("attention: {label}"),
            outcome,
        ));
    }
    // Right sizes but each buffer of the backward one element short in turn.
    for short in 0..5 {
        let outcome = expect_err(|| {
            let len = |i: usize, n: usize| if i == short { n - 1 } else { n };
            let qkv = buf(len(0, 72))?;
            let y = buf(len(1, 24))?;
            let lse = buf(len(2, 6))?;
            let dy = buf(len(3, 24))?;
            let mut dqkv = buf(len(4, 72))?;
            x.attention_backward(&ok, &qkv, &y, &lse, &dy, &mut dqkv)
        });
        let which = ["qkv", "y", "lse", "dy", "dqkv"][short];
        out.push(result(
            x.info().name,
            DType::F32,
            format!("attention_backward: {which} one element short"),
            outcome,
        ));
    }
    out
}

/// AdamW with the clip coefficient as `inv_scale` (and `grad_scale = 1`) against the
/// same coefficient as `grad_scale`: the parameters and moments must agree bitwise, on
/// every backend, for a coefficient that is not a power of two.
pub(crate) async fn clip_routes_agree<X: Backend>(x: &X, dtype: DType) -> CaseResult {
    let label = "clip coef as inv_scale ≡ as grad_scale (bitwise), n=1001".to_string();
    let outcome = match clip_routes(x, dtype).await {
        Ok(None) => Outcome::Pass { worst: 0.0 },
        Ok(Some(msg)) => Outcome::Fail(msg),
        Err(e) => Outcome::Fail(format!("error: {e}")),
    };
    CaseResult {
        backend: x.info().name.to_string(),
        op: "adamw",
        dtype,
        case: label,
        outcome,
    }
}

async fn clip_routes<X: Backend>(x: &X, dtype: DType) -> brrr_backend::Result<Option<String>> {
    let n = 1001;
    let vals = |seed: u32, scale: f64| -> Vec<f64> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 2001) as f64 / 1000.0 - 1.0)
            .map(|v| v * scale)
            .collect()
    };
    let param = HostData::from_f64(dtype, &vals(1, 1.0));
    let grad = HostData::from_f64(dtype, &vals(2, 3.0));
    let m0 = HostData::from_f64(DType::F32, &vals(3, 0.1));
    let v0 = HostData::from_f64(
        DType::F32,
        &vals(4, 0.01).iter().map(|v| v.abs()).collect::<Vec<_>>(),
    );
    let coef = std::f32::consts::FRAC_1_PI; // every bit of the mantissa matters
    let hp = AdamWParams {
        lr: 1e-2,
        weight_decay: 0.1,
        step: 7,
        ..AdamWParams::default()
    };
    let g = x.upload(&grad)?;
    let mut outs = Vec::new();
    for as_inv in [false, true] {
        let mut p = x.upload(&param)?;
        let mut m = x.upload(&m0)?;
        let mut v = x.upload(&v0)?;
        let inv = x.upload(&HostData::F32(vec![coef]))?;
        let (gs, inv) = if as_inv {
            (1.0, Some(&inv))
        } else {
            (coef, None)
        };
        x.adamw(
            &AdamWParams {
                grad_scale: gs,
                ..hp
            },
            &mut p,
            &g,
            &mut m,
            &mut v,
            inv,
            None,
        )?;
        outs.push((x.read(&p).await?, x.read(&m).await?, x.read(&v).await?));
    }
    let (a, b) = (&outs[0], &outs[1]);
    for (what, l, r) in [("param", &a.0, &b.0), ("m", &a.1, &b.1), ("v", &a.2, &b.2)] {
        let (l, r) = (l.to_f64(), r.to_f64());
        if let Some(i) = (0..l.len()).find(|&i| l[i].to_bits() != r[i].to_bits()) {
            return Ok(Some(format!(
                "{what}[{i}]: {} as grad_scale, {} as inv_scale",
                l[i], r[i]
            )));
        }
    }
    Ok(None)
}
