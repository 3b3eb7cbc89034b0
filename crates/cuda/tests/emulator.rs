//! Every op of the CUDA backend, run on the CPU emulator of the CUDA kernels
//! (`CudaBackend::emulated`), against the reference backend brrr-cpu on random inputs.
//!
//! The emulator runs the real kernels (kernels/*.cu compiled as host C++, one OS thread
//! per CUDA thread) behind the same host code as a GPU, so this checks the kernels'
//! arithmetic and indexing, the tensor-core fragment layouts, the launch geometry and
//! argument marshalling, the allocator, and the row-major-to-cuBLAS operand mapping
//! (against an implementation of cuBLAS's documented column-major semantics). It needs a
//! C++20 compiler; without one it prints a skip line.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::{
    AdamWParams, Backend, BinaryOp, DType, ElemRange, EmbeddingSpec, Error, GemmSpec, HostData,
    LayerNormSpec, Layout, ReduceOp, ScaleUpdateParams, Shape, SoftmaxSpec, UnaryOp, block_on,
};
use brrr_cpu::{CpuBackend, CpuBuffer};
use brrr_cuda::{CudaBackend, CudaBuffer, GemmImpl};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::OnceLock;

const FLOATS: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];

fn emu() -> Option<&'static CudaBackend> {
    static EMU: OnceLock<Option<CudaBackend>> = OnceLock::new();
    EMU.get_or_init(|| {
        if !brrr_cuda::emu::compiler_available() {
            brrr_backend::skip::report_skipped(
                "cuda-emu",
                "no C++ compiler to build the kernel emulator",
            );
            return None;
        }
        Some(CudaBackend::emulated().expect("building the kernel emulator"))
    })
    .as_ref()
}

macro_rules! need_emu {
    () => {
        match emu() {
            Some(e) => e,
            None => return,
        }
    };
}

fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

fn rand_vec(r: &mut ChaCha8Rng, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n).map(|_| r.random_range(lo..hi)).collect()
}

fn data(dtype: DType, v: &[f64]) -> HostData {
    HostData::from_f64(dtype, v)
}

fn up(cuda: &CudaBackend, h: &HostData) -> CudaBuffer {
    cuda.upload(h).unwrap()
}

/// `h` in a CPU buffer, for the reference backend.
fn on_cpu(h: &HostData) -> CpuBuffer {
    CpuBackend::new().upload(h).unwrap()
}

fn get(cuda: &CudaBackend, b: &CudaBuffer) -> HostData {
    block_on(cuda.read(b)).unwrap()
}

/// Tolerance: `rel` units of the dtype's epsilon, relative to max(|want|, scale).
fn assert_close(what: &str, got: &HostData, want: &HostData, rel: f64, scale: f64) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    assert_eq!(got.len(), want.len(), "{what}: length");
    let eps = want.dtype().epsilon();
    let (g, w) = (got.to_f64(), want.to_f64());
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        if a.is_nan() && b.is_nan() {
            continue;
        }
        if a == b {
            continue;
        }
        let tol = rel * eps * b.abs().max(scale);
        assert!(
            (a - b).abs() <= tol,
            "{what}: element {i}: got {a}, want {b} (|diff| {:.3e} > tol {tol:.3e})",
            (a - b).abs()
        );
    }
}

/// Tolerances in units of epsilon: f64 results are computed in f64 on both sides but in
/// different orders, so they get more units (their epsilon is tiny).
fn units(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e4,
        DType::F32 => 64.0,
        _ => 4.0,
    }
}

#[test]
fn no_gpu_means_an_error_not_a_panic() {
    if brrr_cuda::driver_present() {
        println!("cuda: driver present; the no-driver path is not exercised here");
        return;
    }
    match CudaBackend::new(0) {
        Err(Error::NoDevice { backend, reason }) => {
            assert_eq!(backend, "cuda");
            assert_eq!(reason, "no CUDA driver (libcuda not found)");
        }
        other => panic!("expected NoDevice, got {other:?}"),
    }
    assert!(!CudaBackend::is_available());
    assert!(brrr_cuda::device_count().is_err());
}

#[test]
fn memory_round_trips_fill_and_zeros() {
    let cuda = need_emu!();
    let mut r = rng(1);
    for dt in DType::ALL {
        let v: Vec<f64> = rand_vec(&mut r, 37, -100.0, 100.0);
        let h = data(dt, &v);
        let b = up(cuda, &h);
        assert_eq!(get(cuda, &b), h, "{dt} round trip");
        let z = cuda.zeros(dt, 13).unwrap();
        assert_eq!(get(cuda, &z), HostData::zeros(dt, 13));
        let mut f = cuda.zeros(dt, 11).unwrap();
        for value in [1.5, -3.25, 1e9, f64::NAN] {
            cuda.fill(&mut f, value).unwrap();
            let mut want = on_cpu(&HostData::zeros(dt, 11));
            CpuBackend::new().fill(&mut want, value).unwrap();
            let (g, w) = (get(cuda, &f), want);
            assert_eq!(g.as_bytes(), w.as_bytes(), "{dt} fill {value}");
        }
        let mut wb = cuda.zeros(dt, 37).unwrap();
        cuda.write(&mut wb, &h).unwrap();
        assert_eq!(get(cuda, &wb), h);
        assert!(cuda.write(&mut wb, &data(dt, &[1.0])).is_err());
    }
    let empty = cuda.upload(&HostData::F32(vec![])).unwrap();
    assert_eq!(get(cuda, &empty), HostData::F32(vec![]));
}

#[test]
fn casts_between_every_pair_of_dtypes() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(2);
    let mut v = rand_vec(&mut r, 40, -70000.0, 70000.0);
    v.extend([
        0.0,
        -0.0,
        0.5,
        -2.5,
        1.0 + f64::EPSILON,
        65504.0,
        65520.0,
        1e-8,
        3.0e38,
        1e300,
        -1e300,
        4_294_967_296.0,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        // Halfway between two f16 values after an f32 rounding would move it: checks
        // the single rounding of f64 -> f16.
        1.0 + 2f64.powi(-11) + 2f64.powi(-40),
        1.0 + 2f64.powi(-8) + 2f64.powi(-40),
    ]);
    for s in DType::ALL {
        let src_h = data(s, &v);
        let src = up(cuda, &src_h);
        for d in DType::ALL {
            let mut dst = cuda.zeros(d, v.len()).unwrap();
            cuda.cast(&src, &mut dst).unwrap();
            let mut want = on_cpu(&HostData::zeros(d, v.len()));
            cpu.cast(&on_cpu(&src_h), &mut want).unwrap();
            let got = get(cuda, &dst);
            // Bit-exact, except NaN payloads.
            for (i, (a, b)) in got.to_f64().iter().zip(want.to_f64()).enumerate() {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "cast {s} -> {d}: element {i} ({}): got {a}, want {b}",
                    src_h.to_f64()[i]
                );
            }
        }
    }
}

#[test]
fn strided_copies() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(3);
    for dt in [DType::F16, DType::F32, DType::F64, DType::I32] {
        let v = rand_vec(&mut r, 60, -10.0, 10.0);
        let h = data(dt, &v);
        let src = up(cuda, &h);
        let cases: Vec<(Layout, Layout, usize)> = vec![
            // transpose of a 3x4 (offset 2) into a contiguous 4x3
            (
                Layout {
                    shape: Shape::new([4, 3]),
                    strides: vec![1, 4],
                    offset: 2,
                },
                Layout::contiguous([4, 3]),
                12,
            ),
            // broadcast a row of 5 to 3x5
            (
                Layout {
                    shape: Shape::new([3, 5]),
                    strides: vec![0, 1],
                    offset: 7,
                },
                Layout::contiguous([3, 5]),
                15,
            ),
            // a contiguous 2x3x4 block into columns 2..6 of a 2x3x10 tensor
            (
                Layout::contiguous([2, 3, 4]),
                Layout {
                    shape: Shape::new([2, 3, 4]),
                    strides: vec![30, 10, 1],
                    offset: 2,
                },
                60,
            ),
            // permuted source into a strided destination, rank 4
            (
                Layout {
                    shape: Shape::new([2, 2, 3, 2]),
                    strides: vec![1, 12, 2, 6],
                    offset: 0,
                },
                Layout {
                    shape: Shape::new([2, 2, 3, 2]),
                    strides: vec![26, 13, 4, 1],
                    offset: 1,
                },
                52,
            ),
            // contiguous to contiguous with offsets (a plain device copy)
            (
                Layout {
                    shape: Shape::new([10]),
                    strides: vec![1],
                    offset: 5,
                },
                Layout {
                    shape: Shape::new([10]),
                    strides: vec![1],
                    offset: 3,
                },
                20,
            ),
        ];
        for (i, (sl, dl, dst_len)) in cases.iter().enumerate() {
            let init = data(dt, &rand_vec(&mut r, *dst_len, -1.0, 1.0));
            let mut dst = up(cuda, &init);
            cuda.copy_strided(&src, sl, &mut dst, dl).unwrap();
            let mut want = on_cpu(&init);
            cpu.copy_strided(&on_cpu(&h), sl, &mut want, dl).unwrap();
            assert_eq!(get(cuda, &dst), want, "{dt} case {i}");
        }
        // Overlapping destinations and out-of-range views are errors, as on the CPU.
        let mut dst = cuda.zeros(dt, 15).unwrap();
        let bad = Layout {
            shape: Shape::new([3, 5]),
            strides: vec![0, 1],
            offset: 0,
        };
        assert!(
            cuda.copy_strided(&src, &Layout::contiguous([3, 5]), &mut dst, &bad)
                .is_err()
        );
        let too_far = Layout {
            shape: Shape::new([3, 5]),
            strides: vec![5, 1],
            offset: 50,
        };
        assert!(
            cuda.copy_strided(&src, &too_far, &mut dst, &Layout::contiguous([3, 5]))
                .is_err()
        );
    }
}

#[test]
fn unary_ops() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(4);
    let ops = [
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
            mul: -1.5,
            add: 0.25,
        },
        UnaryOp::Clamp { lo: -0.5, hi: 0.75 },
    ];
    for dt in FLOATS {
        for op in ops {
            let positive = matches!(op, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt);
            let (lo, hi) = if positive { (0.1, 4.0) } else { (-3.0, 3.0) };
            // 67 elements: vectorized packs plus a ragged tail.
            let h = data(dt, &rand_vec(&mut r, 67, lo, hi));
            let x = up(cuda, &h);
            let mut out = cuda.zeros(dt, 67).unwrap();
            cuda.unary(op, &x, &mut out).unwrap();
            let mut want = on_cpu(&HostData::zeros(dt, 67));
            cpu.unary(op, &on_cpu(&h), &mut want).unwrap();
            assert_close(
                &format!("{op:?} {dt}"),
                &get(cuda, &out),
                &want,
                units(dt),
                1e-3,
            );
        }
    }
}

#[test]
fn binary_ops_with_broadcasting() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(5);
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    let shape = Shape::new([3, 4, 5]);
    let layouts = [
        Layout::contiguous([3, 4, 5]),
        Layout::contiguous([5]).broadcast_to("t", &shape).unwrap(),
        Layout::contiguous([3, 1, 5])
            .broadcast_to("t", &shape)
            .unwrap(),
        Layout {
            shape: shape.clone(),
            strides: vec![1, 3, 12],
            offset: 0,
        },
        Layout {
            shape: shape.clone(),
            strides: vec![20, 5, 1],
            offset: 3,
        },
    ];
    for dt in FLOATS {
        let ha = data(dt, &rand_vec(&mut r, 64, 0.5, 2.0));
        let hb = data(dt, &rand_vec(&mut r, 64, -2.0, -0.5));
        let (a, b) = (up(cuda, &ha), up(cuda, &hb));
        for op in ops {
            for (i, la) in layouts.iter().enumerate() {
                for (j, lb) in layouts.iter().enumerate() {
                    let mut out = cuda.zeros(dt, 60).unwrap();
                    cuda.binary(op, &a, la, &b, lb, &mut out).unwrap();
                    let mut want = on_cpu(&HostData::zeros(dt, 60));
                    cpu.binary(op, &on_cpu(&ha), la, &on_cpu(&hb), lb, &mut want)
                        .unwrap();
                    assert_close(
                        &format!("{op:?} {dt} layouts {i},{j}"),
                        &get(cuda, &out),
                        &want,
                        units(dt),
                        1e-3,
                    );
                }
            }
        }
    }
}

/// A row repeated along the other operand (a bias): `binary_row`'s 16-byte packs when
/// the row is whole packs (16 columns, at offset 0 or 8), the strided kernel otherwise
/// (12 columns in 16-bit dtypes; an offset of 3); either operand may be the row.
#[test]
fn binary_with_a_repeated_row() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(6);
    for dt in FLOATS {
        for (cols, row_offset) in [(16, 0), (16, 8), (12, 0), (16, 3)] {
            let shape = Shape::new([3, 5, cols]);
            let n = shape.elem_count();
            let full = Layout::contiguous(shape.clone());
            let mut row = Layout::contiguous([cols])
                .broadcast_to("t", &shape)
                .unwrap();
            row.offset = row_offset;
            let hf = data(dt, &rand_vec(&mut r, n, 0.5, 2.0));
            let hr = data(dt, &rand_vec(&mut r, cols + row_offset, -2.0, -0.5));
            let (f, rw) = (up(cuda, &hf), up(cuda, &hr));
            for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Div, BinaryOp::Max] {
                for row_first in [false, true] {
                    let mut out = cuda.zeros(dt, n).unwrap();
                    let mut want = on_cpu(&HostData::zeros(dt, n));
                    let (cf, cr) = (on_cpu(&hf), on_cpu(&hr));
                    if row_first {
                        cuda.binary(op, &rw, &row, &f, &full, &mut out).unwrap();
                        cpu.binary(op, &cr, &row, &cf, &full, &mut want).unwrap();
                    } else {
                        cuda.binary(op, &f, &full, &rw, &row, &mut out).unwrap();
                        cpu.binary(op, &cf, &full, &cr, &row, &mut want).unwrap();
                    }
                    assert_close(
                        &format!(
                            "{op:?} {dt} cols {cols} offset {row_offset} row_first {row_first}"
                        ),
                        &get(cuda, &out),
                        &want,
                        units(dt),
                        1e-3,
                    );
                }
            }
        }
    }
}

#[test]
fn axpy_gelu_and_gelu_backward() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(6);
    for dt in FLOATS {
        let n = 45;
        let hx = data(dt, &rand_vec(&mut r, n, -4.0, 4.0));
        let hy = data(dt, &rand_vec(&mut r, n, -4.0, 4.0));
        let (x, dy) = (up(cuda, &hx), up(cuda, &hy));
        let mut y = up(cuda, &hy);
        cuda.axpy(-0.75, &x, &mut y, None).unwrap();
        let mut want = on_cpu(&hy);
        cpu.axpy(-0.75, &on_cpu(&hx), &mut want, None).unwrap();
        assert_close(
            &format!("axpy {dt}"),
            &get(cuda, &y),
            &want,
            units(dt),
            1e-2,
        );

        let mut g = cuda.zeros(dt, n).unwrap();
        cuda.gelu(&x, &mut g).unwrap();
        let mut want = on_cpu(&HostData::zeros(dt, n));
        cpu.gelu(&on_cpu(&hx), &mut want).unwrap();
        assert_close(
            &format!("gelu {dt}"),
            &get(cuda, &g),
            &want,
            units(dt),
            1e-2,
        );

        let mut dx = cuda.zeros(dt, n).unwrap();
        cuda.gelu_backward(&x, &dy, &mut dx).unwrap();
        let mut want = on_cpu(&HostData::zeros(dt, n));
        cpu.gelu_backward(&on_cpu(&hx), &on_cpu(&hy), &mut want)
            .unwrap();
        assert_close(
            &format!("gelu_backward {dt}"),
            &get(cuda, &dx),
            &want,
            units(dt),
            1e-2,
        );
    }
}

/// axpy, LayerNorm and the embedding on part of a flat buffer (pointer offsets; axpy's
/// unaligned kernel), against the CPU over the whole buffers: outside the part nothing
/// may change.
#[test]
fn flat_buffer_parts() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(16);
    for dt in FLOATS {
        // 3 is not a whole 16-byte pack in any dtype; 8 is one in f16/bf16, 32 in all.
        for at in [3usize, 8, 32] {
            let (n, total) = (45, 45 + at + 5);
            let hx = data(dt, &rand_vec(&mut r, n, -4.0, 4.0));
            let hy = data(dt, &rand_vec(&mut r, total, -4.0, 4.0));
            let mut y = up(cuda, &hy);
            cuda.axpy(-0.75, &up(cuda, &hx), &mut y, Some(at)).unwrap();
            let mut want = on_cpu(&hy);
            cpu.axpy(-0.75, &on_cpu(&hx), &mut want, Some(at)).unwrap();
            let tag = format!("axpy {dt} at {at}");
            assert_close(&tag, &get(cuda, &y), &want, units(dt), 1e-2);
        }

        // Parameters at 5 and 51 are off 16-byte packs (the element kernels); at 8 and
        // 56 on them in every dtype (the `_vec` kernels).
        let (rows, cols) = (6, 40);
        for (g_at, b_at) in [(5, 51), (8, 56)] {
            let spec = LayerNormSpec::new(rows, cols, 1e-5).params_at(g_at, b_at);
            let flat = g_at.max(b_at) + cols + 3;
            let hx = data(dt, &rand_vec(&mut r, rows * cols, -3.0, 3.0));
            let hp = data(dt, &rand_vec(&mut r, flat, 0.5, 1.5));
            let (x, p) = (up(cuda, &hx), up(cuda, &hp));
            let mut y = cuda.zeros(dt, rows * cols).unwrap();
            let mut mean = cuda.zeros(DType::F32, rows).unwrap();
            let mut rstd = cuda.zeros(DType::F32, rows).unwrap();
            cuda.layernorm(&spec, &x, &p, &p, &mut y, &mut mean, &mut rstd)
                .unwrap();
            let mut wy = on_cpu(&HostData::zeros(dt, rows * cols));
            let mut wm = on_cpu(&HostData::zeros(DType::F32, rows));
            let mut wr = on_cpu(&HostData::zeros(DType::F32, rows));
            let (cx, cp) = (on_cpu(&hx), on_cpu(&hp));
            cpu.layernorm(&spec, &cx, &cp, &cp, &mut wy, &mut wm, &mut wr)
                .unwrap();
            let tag = format!("layernorm {dt} gamma at {g_at}, beta at {b_at}");
            assert_close(&tag, &get(cuda, &y), &wy, units(dt) * 2.0, 1.0);

            let hdy = data(dt, &rand_vec(&mut r, rows * cols, -1.0, 1.0));
            let hg0 = data(dt, &rand_vec(&mut r, flat, -1.0, 1.0));
            let hb0 = data(dt, &rand_vec(&mut r, flat, -1.0, 1.0));
            let (dy, mean, rstd) = (up(cuda, &hdy), up(cuda, &wm), up(cuda, &wr));
            let mut dx = cuda.zeros(dt, rows * cols).unwrap();
            let (mut dg, mut db) = (up(cuda, &hg0), up(cuda, &hb0));
            cuda.layernorm_backward(&spec, &dy, &x, &p, &mean, &rstd, &mut dx, &mut dg, &mut db)
                .unwrap();
            let mut wdx = on_cpu(&HostData::zeros(dt, rows * cols));
            let (mut wdg, mut wdb) = (on_cpu(&hg0), on_cpu(&hb0));
            let cdy = on_cpu(&hdy);
            cpu.layernorm_backward(
                &spec, &cdy, &cx, &cp, &wm, &wr, &mut wdx, &mut wdg, &mut wdb,
            )
            .unwrap();
            let tag = format!("layernorm_backward {dt} gamma at {g_at}, beta at {b_at}");
            assert_close(&tag, &get(cuda, &dx), &wdx, units(dt) * 4.0, 1.0);
            assert_close(&tag, &get(cuda, &dg), &wdg, units(dt) * 4.0, 3.0);
            assert_close(&tag, &get(cuda, &db), &wdb, units(dt) * 4.0, 3.0);
        }

        let (rows, dim, at) = (9, 24, 7);
        let spec = EmbeddingSpec::new(dim).table_at(at, rows);
        let total = at + rows * dim + 5;
        let ids_v: Vec<f64> = (0..50)
            .map(|_| f64::from(r.random_range(0..rows as u32)))
            .collect();
        let hids = data(DType::U32, &ids_v);
        let ht = data(dt, &rand_vec(&mut r, total, -1.0, 1.0));
        let (ids, t) = (up(cuda, &hids), up(cuda, &ht));
        let mut out = cuda.zeros(dt, 50 * dim).unwrap();
        cuda.embedding(&spec, &ids, &t, &mut out).unwrap();
        let mut want = on_cpu(&HostData::zeros(dt, 50 * dim));
        let (cids, ct) = (on_cpu(&hids), on_cpu(&ht));
        cpu.embedding(&spec, &cids, &ct, &mut want).unwrap();
        assert_eq!(get(cuda, &out), want, "embedding {dt} table at {at}");
        let hdout = data(dt, &rand_vec(&mut r, 50 * dim, -1.0, 1.0));
        let mut dt_buf = up(cuda, &ht);
        cuda.embedding_backward(&spec, &ids, &up(cuda, &hdout), &mut dt_buf)
            .unwrap();
        let mut want = on_cpu(&ht);
        cpu.embedding_backward(&spec, &cids, &on_cpu(&hdout), &mut want)
            .unwrap();
        let tag = format!("embedding_backward {dt} table at {at}");
        assert_close(&tag, &get(cuda, &dt_buf), &want, units(dt), 4.0);
    }
}

#[test]
fn reductions() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(7);
    for dt in FLOATS {
        // These take the split kernels: a row in 3 blocks (the last one shorter), and
        // columns in chunks of 64 rows (the last one shorter).
        // The long row (3 x 1024 emulated threads per case) runs in f32 and bf16 only.
        let long_row = [(1, 49_153, 1)]
            .into_iter()
            .filter(|_| dt == DType::F32 || dt == DType::BF16);
        let split = [(1, 130, 3), (2, 150, 33)];
        let one_pass = [(3, 70, 1), (2, 9, 7), (1, 300, 1), (4, 1, 3)];
        for (outer, n, inner) in one_pass.into_iter().chain(split).chain(long_row) {
            let h = data(dt, &rand_vec(&mut r, outer * n * inner, -2.0, 2.0));
            let x = up(cuda, &h);
            for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
                let mut out = cuda.zeros(dt, outer * inner).unwrap();
                cuda.reduce(op, &x, outer, n, inner, &mut out).unwrap();
                let mut want = on_cpu(&HostData::zeros(dt, outer * inner));
                cpu.reduce(op, &on_cpu(&h), outer, n, inner, &mut want)
                    .unwrap();
                let scale = if matches!(op, ReduceOp::Sum) {
                    (n as f64).sqrt()
                } else {
                    1.0
                };
                assert_close(
                    &format!("{op:?} {dt} [{outer},{n},{inner}]"),
                    &get(cuda, &out),
                    &want,
                    units(dt) * 4.0,
                    scale,
                );
            }
        }
        let x = cuda.zeros(dt, 4).unwrap();
        let mut out = cuda.zeros(dt, 4).unwrap();
        assert!(cuda.reduce(ReduceOp::Max, &x, 4, 0, 1, &mut out).is_err());
    }
}

/// The fused sum of squares: bitwise squaring into an f32 temporary and summing it on
/// the same backend (one block, and a row split into 3 blocks), and close to the
/// CPU's; in place at an offset; bad ranges and dtypes are errors.
#[test]
fn sum_squares_is_bitwise_square_then_sum() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    assert!(cuda.has_fused_sum_squares());
    let mut r = rng(11);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        // The split row (3 blocks of 1024 emulated threads) in f32 and bf16 only.
        let long = [(7, 49_153)].into_iter().filter(|_| dt != DType::F16);
        for (offset, len) in [(0, 0), (3, 1), (5, 1000)].into_iter().chain(long) {
            let h = data(dt, &rand_vec(&mut r, offset + len + 3, -2.0, 2.0));
            let x = up(cuda, &h);
            let mut fused = cuda.zeros(DType::F32, 1).unwrap();
            cuda.sum_squares(&x, offset, len, &mut fused).unwrap();

            let part: Vec<f64> = h.to_f64()[offset..offset + len].to_vec();
            let wide = up(cuda, &data(DType::F32, &part));
            let mut sq = cuda.zeros(DType::F32, len).unwrap();
            cuda.unary(UnaryOp::Square, &wide, &mut sq).unwrap();
            let mut composite = cuda.zeros(DType::F32, 1).unwrap();
            cuda.reduce(ReduceOp::Sum, &sq, 1, len, 1, &mut composite)
                .unwrap();
            let (got, want) = (get(cuda, &fused), get(cuda, &composite));
            assert_eq!(
                got.to_f64()[0].to_bits(),
                want.to_f64()[0].to_bits(),
                "{dt} offset {offset} len {len}: fused {got:?}, composite {want:?}"
            );

            let mut on_ref = on_cpu(&HostData::zeros(DType::F32, 1));
            cpu.sum_squares(&on_cpu(&h), offset, len, &mut on_ref)
                .unwrap();
            let scale = (len as f64).sqrt().max(1.0);
            assert_close(
                &format!("sum_squares {dt} len {len}"),
                &got,
                &block_on(cpu.read(&on_ref)).unwrap(),
                units(DType::F32) * 4.0,
                scale,
            );
        }
    }
    let x = cuda.zeros(DType::F32, 10).unwrap();
    let mut out = cuda.zeros(DType::F32, 1).unwrap();
    assert!(cuda.sum_squares(&x, 8, 3, &mut out).is_err());
    assert!(cuda.sum_squares(&x, usize::MAX, 2, &mut out).is_err());
    let mut none = cuda.zeros(DType::F32, 0).unwrap();
    assert!(cuda.sum_squares(&x, 0, 10, &mut none).is_err());
    let mut wrong = cuda.zeros(DType::BF16, 1).unwrap();
    assert!(cuda.sum_squares(&x, 0, 10, &mut wrong).is_err());
    let ints = cuda.zeros(DType::I32, 10).unwrap();
    assert!(cuda.sum_squares(&ints, 0, 10, &mut out).is_err());
}

#[test]
fn softmax_forward_and_backward() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(8);
    for dt in FLOATS {
        // Rows of whole 16-byte packs take the packed kernels (8 and 24 columns in every
        // dtype, 300 in f32 and f64, 9000 in all: more packs than threads per block);
        // the others the element kernels. Causal rows end part-way into a pack.
        for (rows, cols, causal, scale) in [
            (6, 37, false, 1.0f32),
            (16, 8, true, 0.35),
            (3, 300, false, 2.0),
            (48, 24, true, 0.125),
            (1, 9000, false, 0.5),
        ] {
            let spec = SoftmaxSpec {
                rows,
                cols,
                scale,
                causal,
            };
            let hx = data(dt, &rand_vec(&mut r, rows * cols, -4.0, 4.0));
            let x = up(cuda, &hx);
            let mut y = cuda.zeros(dt, rows * cols).unwrap();
            cuda.softmax(&spec, &x, &mut y).unwrap();
            let mut hy = on_cpu(&HostData::zeros(dt, rows * cols));
            cpu.softmax(&spec, &on_cpu(&hx), &mut hy).unwrap();
            assert_close(
                &format!("softmax {dt} {spec:?}"),
                &get(cuda, &y),
                &hy,
                units(dt),
                1e-2,
            );

            let hdy = data(dt, &rand_vec(&mut r, rows * cols, -1.0, 1.0));
            let dy = up(cuda, &hdy);
            let yy = up(cuda, &hy);
            let mut dx = cuda.zeros(dt, rows * cols).unwrap();
            cuda.softmax_backward(&spec, &yy, &dy, &mut dx).unwrap();
            let mut want = on_cpu(&HostData::zeros(dt, rows * cols));
            cpu.softmax_backward(&spec, &hy, &on_cpu(&hdy), &mut want)
                .unwrap();
            assert_close(
                &format!("softmax_backward {dt} {spec:?}"),
                &get(cuda, &dx),
                &want,
                units(dt) * 2.0,
                1e-2,
            );
        }
    }
}

#[test]
fn layernorm_forward_and_backward() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(9);
    for dt in FLOATS {
        // 48 and 768 columns are whole 16-byte packs in every dtype (the `_vec`
        // kernels; 768 is GPT-2 small's width), 10 in f32 and f64; 333 in none.
        for (rows, cols) in [(5, 48), (70, 10), (2, 333), (3, 768)] {
            let spec = LayerNormSpec {
                rows,
                cols,
                eps: 1e-5,
                gamma_offset: 0,
                beta_offset: 0,
            };
            let hx = data(dt, &rand_vec(&mut r, rows * cols, -3.0, 3.0));
            let hg = data(dt, &rand_vec(&mut r, cols, 0.5, 1.5));
            let hb = data(dt, &rand_vec(&mut r, cols, -0.5, 0.5));
            let (x, g, b) = (up(cuda, &hx), up(cuda, &hg), up(cuda, &hb));
            let mut y = cuda.zeros(dt, rows * cols).unwrap();
            let mut mean = cuda.zeros(DType::F32, rows).unwrap();
            let mut rstd = cuda.zeros(DType::F32, rows).unwrap();
            cuda.layernorm(&spec, &x, &g, &b, &mut y, &mut mean, &mut rstd)
                .unwrap();
            let mut wy = on_cpu(&HostData::zeros(dt, rows * cols));
            let mut wm = on_cpu(&HostData::zeros(DType::F32, rows));
            let mut wr = on_cpu(&HostData::zeros(DType::F32, rows));
            cpu.layernorm(
                &spec,
                &on_cpu(&hx),
                &on_cpu(&hg),
                &on_cpu(&hb),
                &mut wy,
                &mut wm,
                &mut wr,
            )
            .unwrap();
            let tag = format!("layernorm {dt} {rows}x{cols}");
            assert_close(&tag, &get(cuda, &y), &wy, units(dt) * 2.0, 1.0);
            assert_close(&tag, &get(cuda, &mean), &wm, 64.0, 1.0);
            assert_close(&tag, &get(cuda, &rstd), &wr, 64.0, 1.0);

            let hdy = data(dt, &rand_vec(&mut r, rows * cols, -1.0, 1.0));
            let dy = up(cuda, &hdy);
            let hdg0 = data(dt, &rand_vec(&mut r, cols, -1.0, 1.0));
            let hdb0 = data(dt, &rand_vec(&mut r, cols, -1.0, 1.0));
            let mut dx = cuda.zeros(dt, rows * cols).unwrap();
            let (mut dg, mut db) = (up(cuda, &hdg0), up(cuda, &hdb0));
            // The reference's saved statistics on both sides, so that only the backward
            // is compared.
            let (mean, rstd) = (up(cuda, &wm), up(cuda, &wr));
            cuda.layernorm_backward(&spec, &dy, &x, &g, &mean, &rstd, &mut dx, &mut dg, &mut db)
                .unwrap();
            let mut wdx = on_cpu(&HostData::zeros(dt, rows * cols));
            let (mut wdg, mut wdb) = (on_cpu(&hdg0), on_cpu(&hdb0));
            cpu.layernorm_backward(
                &spec,
                &on_cpu(&hdy),
                &on_cpu(&hx),
                &on_cpu(&hg),
                &wm,
                &wr,
                &mut wdx,
                &mut wdg,
                &mut wdb,
            )
            .unwrap();
            let tag = format!("layernorm_backward {dt} {rows}x{cols}");
            assert_close(&tag, &get(cuda, &dx), &wdx, units(dt) * 4.0, 1.0);
            let sum_scale = (rows as f64).sqrt();
            assert_close(&tag, &get(cuda, &dg), &wdg, units(dt) * 4.0, sum_scale);
            assert_close(&tag, &get(cuda, &db), &wdb, units(dt) * 4.0, sum_scale);
        }
    }
}

#[test]
fn embedding_forward_and_backward() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(10);
    let (rows, dim) = (11, 40);
    for dt in FLOATS {
        for idx in [DType::U32, DType::I32] {
            // Many repeats of the same ids, to exercise the scatter-add.
            let ids_v: Vec<f64> = (0..300)
                .map(|_| f64::from(r.random_range(0..rows as u32)))
                .collect();
            let hids = data(idx, &ids_v);
            let htable = data(dt, &rand_vec(&mut r, rows * dim, -1.0, 1.0));
            let (ids, table) = (up(cuda, &hids), up(cuda, &htable));
            let mut out = cuda.zeros(dt, 300 * dim).unwrap();
            cuda.embedding(&EmbeddingSpec::new(dim), &ids, &table, &mut out)
                .unwrap();
            let mut want = on_cpu(&HostData::zeros(dt, 300 * dim));
            cpu.embedding(
                &EmbeddingSpec::new(dim),
                &on_cpu(&hids),
                &on_cpu(&htable),
                &mut want,
            )
            .unwrap();
            assert_eq!(get(cuda, &out), want, "embedding {dt} {idx}");

            let hdout = data(dt, &rand_vec(&mut r, 300 * dim, -1.0, 1.0));
            let dout = up(cuda, &hdout);
            let mut dtable = up(cuda, &htable);
            cuda.embedding_backward(&EmbeddingSpec::new(dim), &ids, &dout, &mut dtable)
                .unwrap();
            let mut want = on_cpu(&htable);
            cpu.embedding_backward(
                &EmbeddingSpec::new(dim),
                &on_cpu(&hids),
                &on_cpu(&hdout),
                &mut want,
            )
            .unwrap();
            // Same order of additions as the sequential reference: close to exact.
            assert_close(
                &format!("embedding_backward {dt} {idx}"),
                &get(cuda, &dtable),
                &want,
                units(dt),
                4.0,
            );
        }
    }
}

/// `a + b` as the kernels compute it for `dtype`: in f32 (f64 for f64), rounded once to
/// the dtype.
fn add_like_the_kernels(dtype: DType, a: f64, b: f64) -> f64 {
    let s = a as f32 + b as f32;
    match dtype {
        DType::F64 => a + b,
        DType::F32 => f64::from(s),
        DType::BF16 => f64::from(half::bf16::from_f32(s).to_f32()),
        _ => f64::from(half::f16::from_f32(s).to_f32()),
    }
}

/// The embedding backward as a sequential loop over the ids, each addition rounded to
/// the dtype (as the kernels do), skipping ids outside `[0, rows)`.
fn sequential_scatter_add(
    dtype: DType,
    ids: &[i64],
    dout: &[f64],
    table: &[f64],
    dim: usize,
) -> Vec<f64> {
    let rows = (table.len() / dim) as i64;
    let mut t = table.to_vec();
    for (i, &id) in ids.iter().enumerate() {
        if !(0..rows).contains(&id) {
            continue;
        }
        let row = id as usize * dim;
        for d in 0..dim {
            t[row + d] = add_like_the_kernels(dtype, t[row + d], dout[i * dim + d]);
        }
    }
    t
}

/// The embedding backward adds every row's contributions in the order of the ids, one
/// rounding per addition, and skips ids outside the table (which a GPU cannot report):
/// equal bit for bit to a sequential loop, in every dtype. Shapes: many repeats of 3
/// rows of 300 (a whole 256-element pass per warp plus a ragged tail); 200 rows, more
/// than the emulator's 128 buckets; 1100 ids in f32, two tiles of 1024 with a ragged
/// second one (300 ids, one ragged tile, in the other dtypes: the tiling does not
/// depend on the dtype, and each emulated tile costs seconds); ids below 0, equal to
/// `rows` and far beyond.
#[test]
fn embedding_backward_is_a_sequential_loop_bit_for_bit() {
    let cuda = need_emu!();
    let mut r = rng(11);
    for (rows, dim) in [(3usize, 300usize), (200, 33)] {
        for dt in FLOATS {
            for idx in [DType::U32, DType::I32] {
                let n = if dt == DType::F32 { 1100 } else { 300 };
                let bad: &[i64] = if idx == DType::I32 {
                    &[-1, -1000, rows as i64, rows as i64 + 5, i64::from(i32::MAX)]
                } else {
                    &[rows as i64, rows as i64 + 1, i64::from(u32::MAX)]
                };
                let ids: Vec<i64> = (0..n)
                    .map(|i| {
                        if i % 7 == 3 {
                            bad[i / 7 % bad.len()]
                        } else {
                            i64::from(r.random_range(0..rows as u32))
                        }
                    })
                    .collect();
                let ids_f: Vec<f64> = ids.iter().map(|&v| v as f64).collect();
                // Rounded to the dtype first, so the host loop starts from the same values.
                let hdout = data(dt, &rand_vec(&mut r, n * dim, -1.0, 1.0));
                let htable = data(dt, &rand_vec(&mut r, rows * dim, -1.0, 1.0));
                let want = sequential_scatter_add(dt, &ids, &hdout.to_f64(), &htable.to_f64(), dim);
                let (hids, dout) = (data(idx, &ids_f), up(cuda, &hdout));
                let mut dtable = up(cuda, &htable);
                cuda.embedding_backward(
                    &EmbeddingSpec::new(dim),
                    &up(cuda, &hids),
                    &dout,
                    &mut dtable,
                )
                .unwrap();
                assert_eq!(
                    get(cuda, &dtable),
                    data(dt, &want),
                    "embedding_backward {dt} {idx} rows={rows} dim={dim}"
                );
            }
        }
    }
}

/// The benchmark's three embedding-backward kernels (v1 a block per bucket, v2 a warp
/// per bucket, v3 runs of one row in registers, which the backend runs) give the same
/// bits, on uniform ids and on Zipf-distributed ones (long runs of one row, the case v3
/// batches); `bench::embedding` returns an error where one differs from v1.
#[test]
fn every_embedding_backward_version_gives_the_same_bits() {
    let cuda = need_emu!();
    for (rows, dim) in [(6usize, 40usize), (200, 300)] {
        let cfg = brrr_cuda::bench::EmbeddingBench {
            ids: 300,
            dim,
            rows,
            seed: 5,
            // f16 rounds every addition visibly; the other dtypes share the code.
            dtypes: vec![DType::F16, DType::F32],
            warmup: 0,
            reps: 1,
        };
        let out = brrr_cuda::bench::embedding(cuda, &cfg).unwrap();
        // Two id sets x two dtypes x three versions.
        assert_eq!(out.len(), 2 * 2 * 3, "rows={rows} dim={dim}");
    }
}

#[test]
fn cross_entropy_forward_and_backward() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(11);
    // 264 columns are whole 16-byte packs in every dtype: the `_vec` kernels run. At
    // 16392 bf16 columns, threads take two packs each (the running sum is rescaled);
    // fewer rows there, as each is a block of 1024 emulated threads.
    let cases = [257usize, 264]
        .into_iter()
        .flat_map(|v| FLOATS.map(|d| (v, d)));
    for (vocab, dt) in cases.chain([(16_392, DType::BF16)]) {
        let rows = if vocab > 1000 { 4 } else { 9 };
        for loss_dt in [DType::F32, DType::F64] {
            if loss_dt == DType::F64 && dt != DType::F64 {
                continue;
            }
            let mut t: Vec<f64> = (0..rows)
                .map(|_| f64::from(r.random_range(0..vocab as i32)))
                .collect();
            t[3] = -1.0; // ignored row
            let ht = data(DType::I32, &t);
            let hl = data(dt, &rand_vec(&mut r, rows * vocab, -6.0, 6.0));
            let (targets, logits) = (up(cuda, &ht), up(cuda, &hl));
            let mut losses = cuda.zeros(loss_dt, rows).unwrap();
            cuda.cross_entropy(&logits, &targets, vocab, &mut losses)
                .unwrap();
            let mut want = on_cpu(&HostData::zeros(loss_dt, rows));
            cpu.cross_entropy(&on_cpu(&hl), &on_cpu(&ht), vocab, &mut want)
                .unwrap();
            let tol = if dt == DType::F64 { 1e4 } else { 64.0 };
            assert_close(
                &format!("cross_entropy {dt}->{loss_dt} vocab {vocab}"),
                &get(cuda, &losses),
                &want,
                tol,
                1.0,
            );

            let hdl = data(loss_dt, &rand_vec(&mut r, rows, 0.1, 1.0));
            let dl = up(cuda, &hdl);
            let mut dlogits = cuda.zeros(dt, rows * vocab).unwrap();
            cuda.cross_entropy_backward(&logits, &targets, &dl, vocab, &mut dlogits)
                .unwrap();
            let mut want = on_cpu(&HostData::zeros(dt, rows * vocab));
            cpu.cross_entropy_backward(&on_cpu(&hl), &on_cpu(&ht), &on_cpu(&hdl), vocab, &mut want)
                .unwrap();
            assert_close(
                &format!("cross_entropy_backward {dt} vocab {vocab}"),
                &get(cuda, &dlogits),
                &want,
                units(dt) * 2.0,
                1e-2,
            );
        }
    }
}

#[test]
fn adamw_and_the_amp_kernels() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(12);
    let n = 77;
    for dt in FLOATS {
        let hp = data(dt, &rand_vec(&mut r, n, -1.0, 1.0));
        let hg = data(dt, &rand_vec(&mut r, n, -1.0, 1.0));
        let hm = data(DType::F32, &rand_vec(&mut r, n, -0.1, 0.1));
        let hv = data(DType::F32, &rand_vec(&mut r, n, 0.0, 0.1));
        // All of the buffers, then elements 5..65 of them (a parameter inside flat
        // buffers: the elements outside must come back untouched).
        for (range, inv, found) in [
            (None, None, None),
            (None, Some(0.25f32), Some(0.0f32)),
            (None, Some(0.25), Some(1.0)),
            (Some(ElemRange::new(5, 60)), None, None),
            (Some(ElemRange::new(5, 60)), Some(0.25), Some(0.0)),
        ] {
            let params = AdamWParams {
                lr: 1e-2,
                step: 3,
                grad_scale: 0.5,
                range,
                ..AdamWParams::default()
            };
            let hinv = inv.map(|s| HostData::F32(vec![s]));
            let hfound = found.map(|s| HostData::F32(vec![s]));
            let (inv_b, found_b) = (
                hinv.as_ref().map(|h| up(cuda, h)),
                hfound.as_ref().map(|h| up(cuda, h)),
            );
            let (mut p, g, mut m, mut v) =
                (up(cuda, &hp), up(cuda, &hg), up(cuda, &hm), up(cuda, &hv));
            cuda.adamw(
                &params,
                &mut p,
                &g,
                &mut m,
                &mut v,
                inv_b.as_ref(),
                found_b.as_ref(),
            )
            .unwrap();
            let (mut wp, mut wm, mut wv) = (on_cpu(&hp), on_cpu(&hm), on_cpu(&hv));
            cpu.adamw(
                &params,
                &mut wp,
                &on_cpu(&hg),
                &mut wm,
                &mut wv,
                hinv.as_ref().map(on_cpu).as_ref(),
                hfound.as_ref().map(on_cpu).as_ref(),
            )
            .unwrap();
            let tag = format!("adamw {dt} {range:?} inv {inv:?} found {found:?}");
            assert_close(&tag, &get(cuda, &p), &wp, units(dt) * 2.0, 1.0);
            assert_close(&tag, &get(cuda, &m), &wm, 64.0, 1e-2);
            assert_close(&tag, &get(cuda, &v), &wv, 64.0, 1e-3);
        }

        // unscale_check_finite: clean gradients leave found_inf alone; one inf sets it.
        for poison in [false, true] {
            let mut gv = rand_vec(&mut r, n, -100.0, 100.0);
            if poison {
                gv[40] = f64::INFINITY;
            }
            let hg = data(dt, &gv);
            let mut g = up(cuda, &hg);
            let inv = up(cuda, &HostData::F32(vec![1.0 / 64.0]));
            let mut found = up(cuda, &HostData::F32(vec![0.0]));
            cuda.unscale_check_finite(&mut g, &inv, &mut found).unwrap();
            let mut wg = on_cpu(&hg);
            let mut wf = on_cpu(&HostData::F32(vec![0.0]));
            cpu.unscale_check_finite(&mut wg, &on_cpu(&HostData::F32(vec![1.0 / 64.0])), &mut wf)
                .unwrap();
            assert_eq!(get(cuda, &found), wf, "found_inf {dt} poison {poison}");
            assert_close(&format!("unscale {dt}"), &get(cuda, &g), &wg, 1.0, 1e-3);
        }
    }
    // The loss-scale state machine over a sequence of clean and overflowing steps.
    let p = ScaleUpdateParams {
        growth_interval: 3,
        ..ScaleUpdateParams::default()
    };
    let (mut s, mut t) = (
        up(cuda, &HostData::F32(vec![65536.0])),
        up(cuda, &HostData::I32(vec![0])),
    );
    let (mut ws, mut wt) = (
        on_cpu(&HostData::F32(vec![65536.0])),
        on_cpu(&HostData::I32(vec![0])),
    );
    for (step, inf) in [0.0f32, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
        .into_iter()
        .enumerate()
    {
        let f = HostData::F32(vec![inf]);
        cuda.update_loss_scale(&p, &mut s, &mut t, &up(cuda, &f))
            .unwrap();
        cpu.update_loss_scale(&p, &mut ws, &mut wt, &on_cpu(&f))
            .unwrap();
        assert_eq!(
            (get(cuda, &s), get(cuda, &t)),
            (HostData::clone(&ws), HostData::clone(&wt)),
            "loss scale step {step}"
        );
    }
    // Megatron-LM's hysteresis and minimum scale: the same sequence, two i32 of state.
    let p = ScaleUpdateParams {
        growth_interval: 3,
        hysteresis: 2,
        min_scale: 16384.0,
        ..ScaleUpdateParams::default()
    };
    let (mut s, mut t) = (
        up(cuda, &HostData::F32(vec![65536.0])),
        up(cuda, &HostData::I32(vec![0, 0])),
    );
    let (mut ws, mut wt) = (
        on_cpu(&HostData::F32(vec![65536.0])),
        on_cpu(&HostData::I32(vec![0, 0])),
    );
    for (step, inf) in [1.0f32, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        .into_iter()
        .enumerate()
    {
        let f = HostData::F32(vec![inf]);
        cuda.update_loss_scale(&p, &mut s, &mut t, &up(cuda, &f))
            .unwrap();
        cpu.update_loss_scale(&p, &mut ws, &mut wt, &on_cpu(&f))
            .unwrap();
        assert_eq!(
            (get(cuda, &s), get(cuda, &t)),
            (HostData::clone(&ws), HostData::clone(&wt)),
            "loss scale with hysteresis, step {step}"
        );
    }
}

fn gemm_case(
    cuda: &CudaBackend,
    which: GemmImpl,
    dt: DType,
    spec: GemmSpec,
    r: &mut ChaCha8Rng,
    expect_ran: Option<GemmImpl>,
) {
    let cpu = CpuBackend::new();
    let (na, nb, nc) = spec.required_lens().unwrap();
    let ha = data(dt, &rand_vec(r, na, -1.0, 1.0));
    let hb = data(dt, &rand_vec(r, nb, -1.0, 1.0));
    let hc = data(dt, &rand_vec(r, nc, -1.0, 1.0));
    let (a, b) = (up(cuda, &ha), up(cuda, &hb));
    let mut c = if spec.beta == 0.0 && spec.offset_c == 0 {
        // Fresh memory (NaN garbage in the emulator): beta = 0 must not read it.
        cuda.upload(&data(dt, &vec![f64::NAN; nc])).unwrap()
    } else {
        up(cuda, &hc)
    };
    let ran = cuda.gemm_with(which, &spec, &a, &b, &mut c).unwrap();
    if let Some(e) = expect_ran {
        assert_eq!(ran, e, "{which} {dt} {spec:?}");
    }
    let mut want = on_cpu(&hc);
    cpu.gemm(&spec, &on_cpu(&ha), &on_cpu(&hb), &mut want)
        .unwrap();
    let scale = (spec.k as f64).sqrt().max(1.0);
    assert_close(
        &format!("gemm {which} (ran {ran}) {dt} {spec:?}"),
        &get(cuda, &c),
        &want,
        units(dt) * 2.0,
        scale,
    );
}

#[test]
fn gemm_every_implementation_layout_and_dtype() {
    let cuda = need_emu!();
    let mut r = rng(13);
    for which in [
        GemmImpl::Cublas,
        GemmImpl::CublasLt,
        GemmImpl::V1Naive,
        GemmImpl::V2Tiled,
        GemmImpl::V3RegisterBlocked,
    ] {
        for dt in FLOATS {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                let spec = GemmSpec::new(19, 37, 45)
                    .trans_a(ta)
                    .trans_b(tb)
                    .alpha(0.5)
                    .beta(0.75);
                gemm_case(cuda, which, dt, spec, &mut r, None);
            }
        }
        // Batched, with a weight shared across the batch (stride 0) and beta = 0.
        let spec = GemmSpec {
            stride_b: 0,
            ..GemmSpec::batched(3, 17, 9, 33).trans_b(true)
        };
        gemm_case(cuda, which, DType::F32, spec, &mut r, None);
        // k = 0 only scales C.
        gemm_case(
            cuda,
            which,
            DType::F32,
            GemmSpec::new(5, 6, 0).beta(2.0),
            &mut r,
            None,
        );
        // Operands part-way into their buffers (a flat parameter buffer); C's elements
        // before its offset must keep their values. cuBLASLt hands these to cuBLAS.
        let expect = (which == GemmImpl::CublasLt).then_some(GemmImpl::Cublas);
        for dt in FLOATS {
            let spec = GemmSpec::batched(2, 19, 37, 45)
                .trans_b(true)
                .beta(0.5)
                .offsets(3, 5, 7);
            gemm_case(cuda, which, dt, spec, &mut r, expect);
        }
    }
}

#[test]
fn gemm_v4_tensor_cores() {
    let cuda = need_emu!();
    let mut r = rng(14);
    for dt in [DType::BF16, DType::F16] {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            // m, n not multiples of the 128 tile; k not a multiple of the 32 k tile:
            // exercises the zero-filled edges of the cp.async loads and the bounds of
            // the epilogue. Extents that are contiguous in memory are multiples of 8.
            let spec = GemmSpec::new(136, 72, 40)
                .trans_a(ta)
                .trans_b(tb)
                .alpha(1.25)
                .beta(-0.5);
            gemm_case(
                cuda,
                GemmImpl::V4TensorCore,
                dt,
                spec,
                &mut r,
                Some(GemmImpl::V4TensorCore),
            );
        }
    }
    // A batch with strides, and more k tiles than pipeline stages.
    let spec = GemmSpec::batched(2, 64, 24, 200);
    gemm_case(
        cuda,
        GemmImpl::V4TensorCore,
        DType::BF16,
        GemmSpec { k: 200, ..spec },
        &mut r,
        Some(GemmImpl::V4TensorCore),
    );
    // Offsets that keep 16-byte alignment run on tensor cores; an odd one falls back.
    for (offsets, ran) in [
        ((8, 16, 24), GemmImpl::V4TensorCore),
        ((8, 3, 0), GemmImpl::V3RegisterBlocked),
    ] {
        let spec = GemmSpec::new(136, 72, 40)
            .beta(0.5)
            .offsets(offsets.0, offsets.1, offsets.2);
        gemm_case(
            cuda,
            GemmImpl::V4TensorCore,
            DType::BF16,
            spec,
            &mut r,
            Some(ran),
        );
    }
    // Not eligible (k not a multiple of 8 with A not transposed): falls back to v3.
    let spec = GemmSpec::new(16, 16, 13);
    gemm_case(
        cuda,
        GemmImpl::V4TensorCore,
        DType::BF16,
        spec,
        &mut r,
        Some(GemmImpl::V3RegisterBlocked),
    );
    // f32 is not a tensor-core dtype for v4: v3.
    gemm_case(
        cuda,
        GemmImpl::V4TensorCore,
        DType::F32,
        GemmSpec::new(8, 8, 8),
        &mut r,
        Some(GemmImpl::V3RegisterBlocked),
    );
}

#[test]
fn gemm_with_fused_bias_and_gelu() {
    let cuda = need_emu!();
    let cpu = CpuBackend::new();
    let mut r = rng(15);
    for dt in [DType::F32, DType::BF16] {
        let spec = GemmSpec::new(7, 12, 16).trans_b(true);
        let (na, nb, nc) = spec.required_lens().unwrap();
        let ha = data(dt, &rand_vec(&mut r, na, -1.0, 1.0));
        let hb = data(dt, &rand_vec(&mut r, nb, -1.0, 1.0));
        let hbias = data(dt, &rand_vec(&mut r, spec.n, -1.0, 1.0));
        let (a, b, bias) = (up(cuda, &ha), up(cuda, &hb), up(cuda, &hbias));
        let mut c = cuda.zeros(dt, nc).unwrap();
        cuda.gemm_bias_gelu(&spec, &a, &b, Some(&bias), true, &mut c)
            .unwrap();
        // Reference: GEMM, + bias per column, GELU, all in f64 then rounded once.
        let mut mm = on_cpu(&HostData::zeros(DType::F64, nc));
        let (a64, b64) = (
            on_cpu(&HostData::F64(ha.to_f64())),
            on_cpu(&HostData::F64(hb.to_f64())),
        );
        cpu.gemm(&spec, &a64, &b64, &mut mm).unwrap();
        let bias64 = hbias.to_f64();
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let want: Vec<f64> = mm
            .to_f64()
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let x = v + bias64[i % spec.n];
                0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
            })
            .collect();
        assert_close(
            &format!("gemm_bias_gelu {dt}"),
            &get(cuda, &c),
            &data(dt, &want),
            units(dt) * 2.0,
            4.0,
        );
    }
}

#[test]
fn errors_name_the_problem() {
    let cuda = need_emu!();
    let a = cuda.zeros(DType::F32, 4).unwrap();
    let b = cuda.zeros(DType::BF16, 4).unwrap();
    let mut c = cuda.zeros(DType::F32, 4).unwrap();
    let e = cuda
        .gemm(&GemmSpec::new(2, 2, 2), &a, &b, &mut c)
        .unwrap_err();
    assert!(matches!(e, Error::DType { .. }), "{e}");
    let e = cuda
        .gemm(&GemmSpec::new(3, 2, 2), &a, &a, &mut c)
        .unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { .. }), "{e}");
    let ints = cuda.zeros(DType::I32, 4).unwrap();
    let mut out = cuda.zeros(DType::I32, 4).unwrap();
    assert!(cuda.unary(UnaryOp::Exp, &ints, &mut out).is_err());
}

#[test]
fn the_allocator_reuses_blocks_and_reports_out_of_memory() {
    if !brrr_cuda::emu::compiler_available() {
        return;
    }
    // A small pretend device: 64 MiB.
    let cuda = CudaBackend::emulated_with_capacity(64 << 20).unwrap();
    let step = |cuda: &CudaBackend| {
        let bufs: Vec<CudaBuffer> = (1..20)
            .map(|i| cuda.zeros(DType::F32, i * 1000).unwrap())
            .collect();
        drop(bufs);
    };
    step(&cuda);
    let after_first = cuda.allocator_stats();
    for _ in 0..3 {
        step(&cuda);
    }
    let later = cuda.allocator_stats();
    assert_eq!(
        later.device_mallocs, after_first.device_mallocs,
        "a warm step must not cudaMalloc"
    );
    assert!(later.cache_hits > after_first.cache_hits);
    assert_eq!(later.in_use_bytes, 0);

    let e = cuda.zeros(DType::F32, 100 << 20).unwrap_err();
    match e {
        Error::OutOfMemory {
            requested, free, ..
        } => {
            assert_eq!(requested, 400 << 20);
            assert!(free <= 64 << 20);
        }
        other => panic!("expected OutOfMemory, got {other}"),
    }
    // The cache is given back before failing: with 40 MiB cached, 60 MiB fits only after
    // the allocator empties its cache and retries.
    drop(cuda.zeros(DType::F32, 10 << 20).unwrap());
    assert!(cuda.allocator_stats().cached_bytes >= 40 << 20);
    let big = cuda.zeros(DType::F32, 15 << 20).unwrap();
    drop(big);
    cuda.empty_cache().unwrap();
    assert_eq!(cuda.allocator_stats().cached_bytes, 0);
}

#[test]
fn info_and_timing() {
    let cuda = need_emu!();
    let info = cuda.info();
    assert_eq!(info.name, "cuda");
    assert!(info.device.contains("emulator"));
    assert!(cuda.supports(DType::BF16) && !cuda.supports(DType::I32));
    let x = cuda.zeros(DType::F32, 1000).unwrap();
    let mut y = cuda.zeros(DType::F32, 1000).unwrap();
    let t = cuda.time(|| cuda.unary(UnaryOp::Exp, &x, &mut y)).unwrap();
    assert!(t >= 0.0);
}

#[test]
fn benchmark_rows_are_produced() {
    let cuda = need_emu!();
    use brrr_cuda::bench::{BandwidthBench, GemmBench, Rate};
    let rows = brrr_cuda::bench::gemm(
        cuda,
        &GemmBench {
            n: 64,
            warmup: 0,
            reps: 1,
            ..GemmBench::default()
        },
    )
    .unwrap();
    // f32: cublas, cublaslt, v1, v2, v3; tf32: cublas, cublaslt; bf16: all six.
    assert_eq!(rows.len(), 5 + 2 + 6, "{rows:#?}");
    assert!(
        rows.iter()
            .all(|r| matches!(r.rate, Rate::TflopS(v) if v > 0.0))
    );
    assert_eq!(rows[0].name, "cublas");
    assert!(rows.iter().any(|r| r.note.contains("tf32")));
    let rows = brrr_cuda::bench::bandwidth(
        cuda,
        &BandwidthBench {
            elems: 768 * 8,
            softmax_cols: 64,
            layernorm_cols: 768,
            vocab: 512,
            head_split: [2, 16, 3, 64],
            dtypes: vec![DType::BF16],
            warmup: 0,
            reps: 1,
        },
    )
    .unwrap();
    assert_eq!(rows[0].name, "copy d2d");
    assert!(rows.len() >= 9, "{rows:#?}");
    assert!(rows[1..].iter().all(|r| r.fraction_of_baseline.is_some()));
    let up = brrr_cuda::bench::upload(cuda, 1 << 20, 1).unwrap();
    assert!(up.rate.value() > 0.0);
    let rows = brrr_cuda::bench::upload_overlap(
        cuda,
        &brrr_cuda::bench::OverlapBench {
            gemm_n: 64,
            gemms: 2,
            upload_bytes: 1 << 20,
            warmup: 0,
            reps: 1,
        },
    )
    .unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["compute", "upload", "compute + upload", "compute + write"]
    );
    assert!(
        rows.iter()
            .all(|r| r.seconds > 0.0 && r.rate.value().is_finite())
    );
    assert!(rows[2].note.ends_with("of the upload hidden"), "{rows:#?}");
}

#[test]
fn hidden_fraction_of_an_upload() {
    use brrr_cuda::bench::hidden_fraction;
    // 10 ms of compute, 4 ms of upload: 10 ms together hides all of it, 14 ms none,
    // 12 ms half; 15 ms costs more than one after the other.
    assert!((hidden_fraction(0.010, 0.004, 0.010) - 1.0).abs() < 1e-12);
    assert!(hidden_fraction(0.010, 0.004, 0.014).abs() < 1e-12);
    assert!((hidden_fraction(0.010, 0.004, 0.012) - 0.5).abs() < 1e-12);
    assert!(hidden_fraction(0.010, 0.004, 0.015) < 0.0);
    assert_eq!(hidden_fraction(0.010, 0.0, 0.010), 0.0);
}
