//! Bad arguments return errors that name the op; nothing panics.

use super::{buf, cpu};
use crate::CpuBuffer;
use brrr_backend::{
    AdamWParams, Backend, BinaryOp, DType, EmbeddingSpec, Error, GemmSpec, HostData, LayerNormSpec,
    Layout, ReduceOp, ScaleUpdateParams, Shape, SoftmaxSpec, UnaryOp,
};

fn z(dtype: DType, n: usize) -> CpuBuffer {
    cpu().zeros(dtype, n).unwrap()
}

fn dtype_err(op: &str, r: Result<(), Error>) {
    match r {
        Err(e @ Error::DType { .. }) => assert!(e.to_string().starts_with(op), "{e}"),
        other => panic!("{op}: expected a dtype error, got {other:?}"),
    }
}

fn len_err(op: &str, r: Result<(), Error>) {
    match r {
        Err(e @ Error::BufferTooSmall { .. }) => assert!(e.to_string().starts_with(op), "{e}"),
        other => panic!("{op}: expected a buffer-too-small error, got {other:?}"),
    }
}

fn invalid_err(op: &str, r: Result<(), Error>, contains: &[&str]) {
    match r {
        Err(e @ (Error::Invalid { .. } | Error::Shape { .. })) => {
            let msg = e.to_string();
            assert!(msg.starts_with(op), "{msg}");
            for c in contains {
                assert!(msg.contains(c), "'{msg}' should mention '{c}'");
            }
        }
        other => panic!("{op}: expected an invalid-argument error, got {other:?}"),
    }
}

#[test]
fn gemm_errors() {
    let c = cpu();
    let spec = GemmSpec::new(2, 3, 4);
    let mut out = z(DType::F32, 6);
    dtype_err(
        "gemm",
        c.gemm(&spec, &z(DType::F16, 8), &z(DType::F32, 12), &mut out),
    );
    dtype_err(
        "gemm",
        c.gemm(
            &spec,
            &z(DType::I32, 8),
            &z(DType::I32, 12),
            &mut z(DType::I32, 6),
        ),
    );
    len_err(
        "gemm",
        c.gemm(
            &spec,
            &z(DType::F32, 8),
            &z(DType::F32, 12),
            &mut z(DType::F32, 5),
        ),
    );
    len_err(
        "gemm",
        c.gemm(
            &spec.trans_a(true),
            &z(DType::F32, 7),
            &z(DType::F32, 12),
            &mut out,
        ),
    );
    // (Built field by field: `GemmSpec::new` would itself overflow computing strides.)
    let huge = GemmSpec {
        batch: 3,
        m: usize::MAX / 2,
        stride_a: usize::MAX / 2,
        stride_b: 0,
        stride_c: 0,
        ..spec
    };
    invalid_err(
        "gemm",
        c.gemm(&huge, &z(DType::F32, 8), &z(DType::F32, 12), &mut out),
        &["overflow"],
    );
    invalid_err(
        "gemm",
        c.gemm(
            &spec.alpha(f32::NAN),
            &z(DType::F32, 8),
            &z(DType::F32, 12),
            &mut out,
        ),
        &["alpha"],
    );
}

#[test]
fn elementwise_errors() {
    let c = cpu();
    dtype_err(
        "unary",
        c.unary(UnaryOp::Exp, &z(DType::F32, 4), &mut z(DType::F16, 4)),
    );
    dtype_err(
        "unary",
        c.unary(UnaryOp::Exp, &z(DType::U32, 4), &mut z(DType::U32, 4)),
    );
    len_err(
        "unary",
        c.unary(UnaryOp::Exp, &z(DType::F32, 3), &mut z(DType::F32, 4)),
    );
    dtype_err(
        "axpy",
        c.axpy(1.0, &z(DType::BF16, 4), &mut z(DType::F32, 4), None),
    );
    len_err(
        "axpy",
        c.axpy(1.0, &z(DType::F32, 3), &mut z(DType::F32, 4), None),
    );
    dtype_err("gelu", c.gelu(&z(DType::F64, 4), &mut z(DType::F32, 4)));
    len_err(
        "gelu_backward",
        c.gelu_backward(&z(DType::F32, 4), &z(DType::F32, 3), &mut z(DType::F32, 4)),
    );

    let l = Layout::contiguous([2, 3]);
    let other = Layout::contiguous([3, 2]);
    invalid_err(
        "binary",
        c.binary(
            BinaryOp::Add,
            &z(DType::F32, 6),
            &l,
            &z(DType::F32, 6),
            &other,
            &mut z(DType::F32, 6),
        ),
        &["[3, 2]"],
    );
    len_err(
        "binary",
        c.binary(
            BinaryOp::Add,
            &z(DType::F32, 5),
            &l,
            &z(DType::F32, 6),
            &l,
            &mut z(DType::F32, 6),
        ),
    );
    len_err(
        "binary",
        c.binary(
            BinaryOp::Add,
            &z(DType::F32, 6),
            &l,
            &z(DType::F32, 6),
            &l,
            &mut z(DType::F32, 5),
        ),
    );
    dtype_err(
        "binary",
        c.binary(
            BinaryOp::Mul,
            &z(DType::F32, 6),
            &l,
            &z(DType::F16, 6),
            &l,
            &mut z(DType::F32, 6),
        ),
    );
    let bad_rank = Layout {
        shape: Shape::new([2, 3]),
        strides: vec![1],
        offset: 0,
    };
    invalid_err(
        "binary",
        c.binary(
            BinaryOp::Add,
            &z(DType::F32, 6),
            &bad_rank,
            &z(DType::F32, 6),
            &l,
            &mut z(DType::F32, 6),
        ),
        &[],
    );

    len_err(
        "reduce",
        c.reduce(
            ReduceOp::Sum,
            &z(DType::F32, 11),
            2,
            3,
            2,
            &mut z(DType::F32, 4),
        ),
    );
    len_err(
        "reduce",
        c.reduce(
            ReduceOp::Sum,
            &z(DType::F32, 12),
            2,
            3,
            2,
            &mut z(DType::F32, 3),
        ),
    );
    dtype_err(
        "reduce",
        c.reduce(
            ReduceOp::Max,
            &z(DType::F32, 12),
            2,
            3,
            2,
            &mut z(DType::F64, 4),
        ),
    );
    invalid_err(
        "reduce",
        c.reduce(
            ReduceOp::Sum,
            &z(DType::F32, 12),
            usize::MAX,
            3,
            2,
            &mut z(DType::F32, 4),
        ),
        &["overflow"],
    );
}

#[test]
fn memory_errors() {
    let c = cpu();
    len_err("cast", c.cast(&z(DType::F32, 3), &mut z(DType::F16, 4)));
    let l = Layout::contiguous([2, 3]);
    dtype_err(
        "copy_strided",
        c.copy_strided(&z(DType::F32, 6), &l, &mut z(DType::I32, 6), &l),
    );
    len_err(
        "copy_strided",
        c.copy_strided(&z(DType::F32, 5), &l, &mut z(DType::F32, 6), &l),
    );
    len_err(
        "copy_strided",
        c.copy_strided(&z(DType::F32, 6), &l, &mut z(DType::F32, 5), &l),
    );
    invalid_err(
        "copy_strided",
        c.copy_strided(
            &z(DType::F32, 6),
            &l,
            &mut z(DType::F32, 6),
            &Layout::contiguous([6]),
        ),
        &[],
    );
}

#[test]
fn nn_errors() {
    let c = cpu();
    let s = SoftmaxSpec {
        rows: 2,
        cols: 3,
        scale: 1.0,
        causal: true,
    };
    len_err(
        "softmax",
        c.softmax(&s, &z(DType::F32, 5), &mut z(DType::F32, 6)),
    );
    dtype_err(
        "softmax",
        c.softmax(&s, &z(DType::F32, 6), &mut z(DType::BF16, 6)),
    );
    dtype_err(
        "softmax_backward",
        c.softmax_backward(
            &s,
            &z(DType::F32, 6),
            &z(DType::F16, 6),
            &mut z(DType::F32, 6),
        ),
    );
    len_err(
        "softmax_backward",
        c.softmax_backward(
            &s,
            &z(DType::F32, 6),
            &z(DType::F32, 6),
            &mut z(DType::F32, 1),
        ),
    );

    let ln = LayerNormSpec {
        rows: 2,
        cols: 3,
        eps: 1e-5,
        gamma_offset: 0,
        beta_offset: 0,
    };
    let (x, g) = (z(DType::F32, 6), z(DType::F32, 3));
    let f32s = |n| z(DType::F32, n);
    dtype_err(
        "layernorm",
        c.layernorm(
            &ln,
            &x,
            &g,
            &g,
            &mut f32s(6),
            &mut z(DType::F16, 2),
            &mut f32s(2),
        ),
    );
    len_err(
        "layernorm",
        c.layernorm(
            &ln,
            &x,
            &z(DType::F32, 2),
            &g,
            &mut f32s(6),
            &mut f32s(2),
            &mut f32s(2),
        ),
    );
    len_err(
        "layernorm",
        c.layernorm(&ln, &x, &g, &g, &mut f32s(6), &mut f32s(2), &mut f32s(1)),
    );
    dtype_err(
        "layernorm",
        c.layernorm(
            &ln,
            &x,
            &z(DType::F64, 3),
            &g,
            &mut f32s(6),
            &mut f32s(2),
            &mut f32s(2),
        ),
    );
    let empty = LayerNormSpec {
        rows: 2,
        cols: 0,
        eps: 1e-5,
        gamma_offset: 0,
        beta_offset: 0,
    };
    invalid_err(
        "layernorm",
        c.layernorm(&empty, &x, &g, &g, &mut f32s(6), &mut f32s(2), &mut f32s(2)),
        &["cols"],
    );
    dtype_err(
        "layernorm_backward",
        c.layernorm_backward(
            &ln,
            &x,
            &x,
            &g,
            &f32s(2),
            &f32s(2),
            &mut f32s(6),
            &mut z(DType::F16, 3),
            &mut f32s(3),
        ),
    );
    len_err(
        "layernorm_backward",
        c.layernorm_backward(
            &ln,
            &x,
            &x,
            &g,
            &f32s(1),
            &f32s(2),
            &mut f32s(6),
            &mut f32s(3),
            &mut f32s(3),
        ),
    );

    // Row scatter: a repeated id and an id out of range are named; the table is untouched.
    let mut table = buf(HostData::F32(vec![7.0; 5 * 2]));
    let rows = buf(HostData::F32(vec![1.0; 3 * 2]));
    let r = c.scatter_rows(
        &EmbeddingSpec::new(2),
        &buf(HostData::U32(vec![4, 0, 4])),
        &rows,
        &mut table,
    );
    invalid_err("scatter_rows", r, &["id 4", "position 2", "repeats"]);
    let r = c.scatter_rows(
        &EmbeddingSpec::new(2),
        &buf(HostData::U32(vec![1, 5, 2])),
        &rows,
        &mut table,
    );
    invalid_err("scatter_rows", r, &["5", "5 rows", "position 1"]);
    assert_eq!(table, buf(HostData::F32(vec![7.0; 5 * 2])));

    // Embedding: ids out of range name the id and the table size; the output is untouched.
    let table = z(DType::F32, 50 * 4);
    let mut out = buf(HostData::F32(vec![7.0; 12]));
    let r = c.embedding(
        &EmbeddingSpec::new(4),
        &buf(HostData::U32(vec![1, 50, 2])),
        &table,
        &mut out,
    );
    invalid_err("embedding", r, &["50", "50 rows", "position 1"]);
    assert_eq!(out, buf(HostData::F32(vec![7.0; 12])));
    invalid_err(
        "embedding",
        c.embedding(
            &EmbeddingSpec::new(4),
            &buf(HostData::I32(vec![-1, 0, 2])),
            &table,
            &mut out,
        ),
        &["-1"],
    );
    dtype_err(
        "embedding",
        c.embedding(&EmbeddingSpec::new(4), &z(DType::F32, 3), &table, &mut out),
    );
    invalid_err(
        "embedding",
        c.embedding(
            &EmbeddingSpec::new(0),
            &buf(HostData::U32(vec![0])),
            &table,
            &mut out,
        ),
        &["dim"],
    );
    invalid_err(
        "embedding",
        c.embedding(
            &EmbeddingSpec::new(3),
            &buf(HostData::U32(vec![0])),
            &table,
            &mut out,
        ),
        &["dim 3"],
    );
    len_err(
        "embedding",
        c.embedding(
            &EmbeddingSpec::new(4),
            &buf(HostData::U32(vec![0, 1, 2, 3])),
            &table,
            &mut out,
        ),
    );
    invalid_err(
        "embedding_backward",
        c.embedding_backward(
            &EmbeddingSpec::new(4),
            &buf(HostData::I32(vec![0, 99])),
            &z(DType::F32, 8),
            &mut z(DType::F32, 200),
        ),
        &["99"],
    );
    dtype_err(
        "embedding_backward",
        c.embedding_backward(
            &EmbeddingSpec::new(4),
            &buf(HostData::I32(vec![0])),
            &z(DType::F16, 4),
            &mut z(DType::F32, 200),
        ),
    );

    let logits = z(DType::F32, 2 * 5);
    invalid_err(
        "cross_entropy",
        c.cross_entropy(
            &logits,
            &buf(HostData::I32(vec![0, 5])),
            5,
            &mut z(DType::F32, 2),
        ),
        &["target 5", "row 1"],
    );
    dtype_err(
        "cross_entropy",
        c.cross_entropy(
            &logits,
            &buf(HostData::U32(vec![0, 1])),
            5,
            &mut z(DType::F32, 2),
        ),
    );
    dtype_err(
        "cross_entropy",
        c.cross_entropy(
            &logits,
            &buf(HostData::I32(vec![0, 1])),
            5,
            &mut z(DType::F16, 2),
        ),
    );
    len_err(
        "cross_entropy",
        c.cross_entropy(
            &logits,
            &buf(HostData::I32(vec![0, 1, 2])),
            5,
            &mut z(DType::F32, 3),
        ),
    );
    dtype_err(
        "cross_entropy_backward",
        c.cross_entropy_backward(
            &logits,
            &buf(HostData::I32(vec![0, 1])),
            &z(DType::F64, 2),
            5,
            &mut z(DType::F32, 10),
        ),
    );
    len_err(
        "cross_entropy_backward",
        c.cross_entropy_backward(
            &logits,
            &buf(HostData::I32(vec![0, 1])),
            &z(DType::F32, 1),
            5,
            &mut z(DType::F32, 10),
        ),
    );
}

#[test]
fn optimizer_and_amp_errors() {
    let c = cpu();
    let hp = AdamWParams::default();
    let (mut p, g) = (z(DType::F32, 4), z(DType::F32, 4));
    let f32s = |n| z(DType::F32, n);
    dtype_err(
        "adamw",
        c.adamw(
            &hp,
            &mut p,
            &g,
            &mut z(DType::F16, 4),
            &mut f32s(4),
            None,
            None,
        ),
    );
    dtype_err(
        "adamw",
        c.adamw(
            &hp,
            &mut p,
            &z(DType::BF16, 4),
            &mut f32s(4),
            &mut f32s(4),
            None,
            None,
        ),
    );
    len_err(
        "adamw",
        c.adamw(
            &hp,
            &mut p,
            &z(DType::F32, 3),
            &mut f32s(4),
            &mut f32s(4),
            None,
            None,
        ),
    );
    len_err(
        "adamw",
        c.adamw(&hp, &mut p, &g, &mut f32s(4), &mut f32s(3), None, None),
    );
    dtype_err(
        "adamw",
        c.adamw(
            &hp,
            &mut p,
            &g,
            &mut f32s(4),
            &mut f32s(4),
            Some(&z(DType::I32, 1)),
            None,
        ),
    );
    len_err(
        "adamw",
        c.adamw(
            &hp,
            &mut p,
            &g,
            &mut f32s(4),
            &mut f32s(4),
            None,
            Some(&f32s(0)),
        ),
    );
    let step0 = AdamWParams { step: 0, ..hp };
    invalid_err(
        "adamw",
        c.adamw(&step0, &mut p, &g, &mut f32s(4), &mut f32s(4), None, None),
        &["step"],
    );

    dtype_err(
        "unscale_check_finite",
        c.unscale_check_finite(&mut p, &f32s(1), &mut z(DType::F64, 1)),
    );
    len_err(
        "unscale_check_finite",
        c.unscale_check_finite(&mut p, &f32s(0), &mut f32s(1)),
    );
    dtype_err(
        "unscale_check_finite",
        c.unscale_check_finite(&mut z(DType::I32, 3), &f32s(1), &mut f32s(1)),
    );

    let sp = ScaleUpdateParams::default();
    dtype_err(
        "update_loss_scale",
        c.update_loss_scale(&sp, &mut f32s(1), &mut f32s(1), &f32s(1)),
    );
    len_err(
        "update_loss_scale",
        c.update_loss_scale(&sp, &mut f32s(1), &mut z(DType::I32, 0), &f32s(1)),
    );
    dtype_err(
        "update_loss_scale",
        c.update_loss_scale(&sp, &mut z(DType::F16, 1), &mut z(DType::I32, 1), &f32s(1)),
    );
}
