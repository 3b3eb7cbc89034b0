use super::{ODD, assert_close, buf, cpu, eps_compute, input, read, reference, rng, round_tol};
use crate::{CpuBackend, GemmKernel};
use brrr_backend::{Backend, DType, GemmSpec, HostData};

/// The CPU backend with each GEMM kernel this CPU can run.
fn kernels() -> Vec<(GemmKernel, CpuBackend)> {
    let mut v = vec![(GemmKernel::GemmCrate, cpu())];
    if GemmKernel::own_available() {
        v.push((
            GemmKernel::Own,
            cpu().with_gemm_kernel(GemmKernel::Own).unwrap(),
        ));
    } else {
        eprintln!("SKIPPED: brrr's own GEMM kernel (needs x86-64 with AVX2 and FMA)");
    }
    v
}

/// Runs `spec` on random A, B, C of `dtype` with every kernel and compares with the
/// f64 reference.
fn check(case: &str, dtype: DType, spec: GemmSpec, seed: u64) {
    let mut r = rng(seed);
    let (la, lb, lc) = spec.required_lens().unwrap();
    let (a, ab) = input(&mut r, dtype, la, -1.0, 1.0);
    let (b, bb) = input(&mut r, dtype, lb, -1.0, 1.0);
    let (c, c0) = input(&mut r, dtype, lc, -1.0, 1.0);
    let (want, mag) = reference::gemm(&spec, &a, &b, &c);
    let ec = eps_compute(dtype);
    let k = spec.k as f64;
    for (kernel, backend) in kernels() {
        let mut cb = c0.clone();
        backend.gemm(&spec, &ab, &bb, &mut cb).unwrap();
        assert_close(
            &format!("{case} {dtype} {spec:?} {kernel:?}"),
            &read(&cb),
            &want,
            |i| round_tol(dtype, want[i]) + 2.0 * (k + 2.0) * ec * mag[i],
        );
    }
}

#[test]
fn shapes_transposes_alpha_beta_every_dtype() {
    let mut seed = 0;
    for dtype in DType::FLOATS {
        for (m, n, k) in [
            (1, 1, 1),
            (7, 33, 65),
            (65, 7, 33),
            (33, 65, 1),
            (130, 33, 7),
            (1, 65, 33),
        ] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                for (alpha, beta) in [(1.0, 0.0), (0.5, 1.0), (-1.5, 0.25)] {
                    seed += 1;
                    let spec = GemmSpec::new(m, n, k)
                        .trans_a(ta)
                        .trans_b(tb)
                        .alpha(alpha)
                        .beta(beta);
                    check("single", dtype, spec, seed);
                }
            }
        }
    }
}

#[test]
fn batched_with_shared_and_gapped_operands() {
    for (i, dtype) in DType::FLOATS.into_iter().enumerate() {
        let s = i as u64 * 10;
        // Densely packed batch.
        check(
            "packed",
            dtype,
            GemmSpec::batched(5, 7, 33, 17).beta(0.5),
            s + 1,
        );
        // stride 0: one weight shared by the whole batch, transposed.
        let mut spec = GemmSpec::batched(4, 33, 7, 65).trans_b(true);
        spec.stride_b = 0;
        check("shared B", dtype, spec, s + 2);
        let mut spec = GemmSpec::batched(3, 7, 7, 33).trans_a(true);
        spec.stride_a = 0;
        check("shared A", dtype, spec, s + 3);
        // C shared by the batch (stride 0) with beta = 1: the products add up in order.
        let mut spec = GemmSpec::batched(6, 7, 5, 9).beta(1.0);
        spec.stride_c = 0;
        check("shared C", dtype, spec, s + 4);
        // Gaps between matrices: only the m×n blocks change (the reference leaves the
        // gaps as they were too, so `check` compares them).
        let mut spec = GemmSpec::batched(3, 5, 7, 9).alpha(2.0);
        spec.stride_a = 50;
        spec.stride_b = 70;
        spec.stride_c = 40;
        check("gapped", dtype, spec, s + 5);
    }
}

#[test]
fn operands_part_way_into_their_buffers() {
    // A, B and C start at an offset (a parameter in a flat buffer): the product reads
    // and writes only its own elements, and C's elements before the offset and in the
    // gaps keep their values (the reference leaves them, and `check` compares all of C).
    for (i, dtype) in DType::FLOATS.into_iter().enumerate() {
        let s = 200 + i as u64 * 10;
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let spec = GemmSpec::new(7, 33, 17)
                .trans_a(ta)
                .trans_b(tb)
                .beta(0.5)
                .offsets(5, 11, 3);
            check(
                "offsets",
                dtype,
                spec,
                s + u64::from(ta) + 2 * u64::from(tb),
            );
        }
        let mut spec = GemmSpec::batched(3, 5, 7, 9).offsets(13, 1, 29);
        spec.stride_c = 40;
        check("batched offsets", dtype, spec, s + 5);
        let mut spec = GemmSpec::batched(4, 9, 12, 8).offsets(0, 100, 7);
        spec.stride_b = 0;
        check("shared B at an offset", dtype, spec, s + 6);
    }
    // Big enough for the threaded split, at an odd offset.
    check(
        "big offsets",
        DType::F32,
        GemmSpec::new(257, 129, 300)
            .trans_b(true)
            .offsets(3, 1001, 17),
        291,
    );
}

#[test]
fn sizes_that_take_the_threaded_paths() {
    // One product big enough for gemm's own threading, and a batch of small ones that
    // is spread one matrix per task.
    check(
        "big",
        DType::F32,
        GemmSpec::new(257, 129, 300).trans_b(true),
        91,
    );
    check(
        "big",
        DType::BF16,
        GemmSpec::new(129, 257, 200).trans_a(true).beta(1.0),
        92,
    );
    check(
        "many small",
        DType::F32,
        GemmSpec::batched(37, 33, 31, 17),
        93,
    );
    check(
        "many small",
        DType::F16,
        GemmSpec::batched(37, 33, 31, 17).trans_a(true),
        94,
    );
    check(
        "many small",
        DType::F64,
        GemmSpec::batched(37, 33, 31, 17).trans_b(true),
        95,
    );
}

#[test]
fn beta_zero_ignores_nan_in_c_and_k_zero_scales_c() {
    for dtype in DType::FLOATS {
        let spec = GemmSpec::new(3, 4, 5);
        let a = cpu()
            .upload(&HostData::from_f64(dtype, &[1.0; 15]))
            .unwrap();
        let b = cpu()
            .upload(&HostData::from_f64(dtype, &[2.0; 20]))
            .unwrap();
        let mut c = cpu()
            .upload(&HostData::from_f64(dtype, &[f64::NAN; 12]))
            .unwrap();
        cpu().gemm(&spec, &a, &b, &mut c).unwrap();
        assert_eq!(read(&c), vec![10.0; 12], "{dtype}");

        let spec = GemmSpec::new(2, 3, 0).beta(0.5);
        let e = cpu().zeros(dtype, 0).unwrap();
        let mut c = cpu().upload(&HostData::from_f64(dtype, &[2.0; 6])).unwrap();
        cpu().gemm(&spec, &e, &e, &mut c).unwrap();
        assert_eq!(read(&c), vec![1.0; 6], "{dtype}");
    }
}

#[test]
fn odd_square_sizes() {
    for (i, &n) in ODD.iter().enumerate() {
        check("square", DType::F32, GemmSpec::new(n, n, n), 200 + i as u64);
    }
}

/// f16/bf16 operands into an f32 C (mixed precision) against naive f64: the operands
/// are exact in f32, so only the f32 accumulation and the single f32 store round.
fn check_mixed(case: &str, dtype: DType, spec: GemmSpec, seed: u64) {
    let mut r = rng(seed);
    let (la, lb, lc) = spec.required_lens().unwrap();
    let (a, ab) = input(&mut r, dtype, la, -1.0, 1.0);
    let (b, bb) = input(&mut r, dtype, lb, -1.0, 1.0);
    let (c, mut cb) = input(&mut r, DType::F32, lc, -1.0, 1.0);
    cpu().gemm(&spec, &ab, &bb, &mut cb).unwrap();
    assert_eq!(cb.dtype(), DType::F32);
    let (want, mag) = reference::gemm(&spec, &a, &b, &c);
    let ec = eps_compute(DType::F32);
    let k = spec.k as f64;
    assert_close(
        &format!("{case} {dtype}->f32 {spec:?}"),
        &read(&cb),
        &want,
        |i| round_tol(DType::F32, want[i]) + 2.0 * (k + 2.0) * ec * mag[i],
    );
}

#[test]
fn sixteen_bit_operands_into_an_f32_c() {
    let mut seed = 5_000;
    for dtype in [DType::F16, DType::BF16] {
        for (m, n, k) in [(1, 1, 1), (7, 33, 65), (130, 33, 7)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                for (alpha, beta) in [(1.0, 0.0), (1.0, 1.0), (-1.5, 0.25)] {
                    seed += 1;
                    let spec = GemmSpec::new(m, n, k)
                        .trans_a(ta)
                        .trans_b(tb)
                        .alpha(alpha)
                        .beta(beta);
                    check_mixed("single", dtype, spec, seed);
                }
            }
        }
        let mut shared_c = GemmSpec::batched(6, 7, 5, 9).beta(1.0);
        shared_c.stride_c = 0;
        check_mixed("shared C", dtype, shared_c, seed + 100);
        check_mixed(
            "packed",
            dtype,
            GemmSpec::batched(5, 7, 33, 17).beta(0.5),
            seed + 101,
        );
        // A bf16 weight inside a flat buffer, its f32 gradient inside another.
        check_mixed(
            "offsets",
            dtype,
            GemmSpec::batched(2, 7, 33, 17).beta(1.0).offsets(9, 3, 21),
            seed + 102,
        );
    }
}

#[test]
fn mixed_products_equal_the_f32_product_of_the_widened_operands() {
    // Bitwise: the mixed path is the f32 path on exactly widened operands.
    let mut r = rng(77);
    for dtype in [DType::F16, DType::BF16] {
        let spec = GemmSpec::new(33, 17, 65).trans_a(true).beta(1.0);
        let (la, lb, lc) = spec.required_lens().unwrap();
        let (a, ab) = input(&mut r, dtype, la, -1.0, 1.0);
        let (b, bb) = input(&mut r, dtype, lb, -1.0, 1.0);
        let (_, c0) = input(&mut r, DType::F32, lc, -1.0, 1.0);
        let mut mixed = c0.clone();
        cpu().gemm(&spec, &ab, &bb, &mut mixed).unwrap();
        let (a32, b32) = (
            buf(HostData::from_f64(DType::F32, &a)),
            buf(HostData::from_f64(DType::F32, &b)),
        );
        let mut plain = c0.clone();
        cpu().gemm(&spec, &a32, &b32, &mut plain).unwrap();
        assert_eq!(mixed, plain, "{dtype}");
    }
}

#[test]
fn mixed_dtypes_outside_the_rule_are_errors() {
    let c = cpu();
    let spec = GemmSpec::new(2, 2, 2);
    let h = |d: DType| buf(HostData::from_f64(d, &[0.5; 4]));
    // f32 operands into a bf16 C, f64 operands into f32, f16 with bf16: all refused.
    for (ab, cd) in [
        (DType::F32, DType::BF16),
        (DType::F64, DType::F32),
        (DType::F16, DType::BF16),
        (DType::BF16, DType::F64),
    ] {
        let mut out = h(cd);
        let e = c.gemm(&spec, &h(ab), &h(ab), &mut out).unwrap_err();
        assert!(e.to_string().contains("gemm"), "{ab}->{cd}: {e}");
    }
    let mut out = h(DType::F32);
    assert!(
        c.gemm(&spec, &h(DType::F16), &h(DType::BF16), &mut out)
            .is_err()
    );
}
