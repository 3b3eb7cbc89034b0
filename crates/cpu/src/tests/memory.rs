//! fill, copy_strided, cast, and the memory calls.

use super::{buf, cpu, read, rng, values};
use brrr_backend::{Backend, DType, Error, HostData, Layout, Shape, block_on};
use half::{bf16, f16};

fn layout(dims: &[usize], strides: &[usize], offset: usize) -> Layout {
    Layout {
        shape: Shape::new(dims),
        strides: strides.to_vec(),
        offset,
    }
}

/// Values of `dtype` (integers for the integer dtypes).
fn data(seed: u64, dtype: DType, n: usize) -> Vec<f64> {
    let v = values(&mut rng(seed), n, -100.0, 100.0);
    let v: Vec<f64> = match dtype {
        DType::I32 => v.iter().map(|x| x.trunc()).collect(),
        DType::U32 => v.iter().map(|x| x.abs().trunc() + 1.0).collect(),
        _ => v,
    };
    buf(HostData::from_f64(dtype, &v)).to_f64()
}

#[test]
fn copy_strided_views_every_dtype() {
    // (source view, source length, destination view, destination length)
    let cases = [
        (
            layout(&[7, 33], &[1, 7], 0),
            231,
            Layout::contiguous([7, 33]),
            231,
        ),
        (
            Layout::contiguous([7])
                .broadcast_to("t", &Shape::new([5, 7]))
                .unwrap(),
            7,
            Layout::contiguous([5, 7]),
            35,
        ),
        // Into columns 2..7 of a [4, 10] matrix: the rest must stay as it was.
        (
            Layout::contiguous([4, 5]),
            20,
            layout(&[4, 5], &[10, 1], 2),
            40,
        ),
        // Into a transposed destination, from an offset source.
        (
            layout(&[7, 33], &[33, 1], 5),
            236,
            layout(&[7, 33], &[1, 7], 0),
            231,
        ),
        (
            layout(&[300, 257], &[1, 300], 0),
            77_100,
            Layout::contiguous([300, 257]),
            77_100,
        ),
        (
            layout(&[2, 3, 4], &[1, 8, 2], 0),
            24,
            layout(&[2, 3, 4], &[12, 1, 3], 0),
            24,
        ),
        (layout(&[], &[], 3), 5, layout(&[], &[], 1), 2), // scalars at offsets
    ];
    for dtype in DType::ALL {
        for (i, (sl, slen, dl, dlen)) in cases.iter().enumerate() {
            let src = data(i as u64, dtype, *slen);
            let dst0 = data(100 + i as u64, dtype, *dlen);
            let sb = cpu().upload(&buf(HostData::from_f64(dtype, &src))).unwrap();
            let mut db = cpu()
                .upload(&buf(HostData::from_f64(dtype, &dst0)))
                .unwrap();
            cpu().copy_strided(&sb, sl, &mut db, dl).unwrap();
            let mut want = dst0.clone();
            for (s, d) in sl.offsets().zip(dl.offsets()) {
                want[d] = src[s];
            }
            assert_eq!(read(&db), want, "{dtype} case {i}");
        }
    }
}

#[test]
fn copy_strided_rejects_overlapping_destinations() {
    let src = cpu().zeros(DType::F32, 6).unwrap();
    let mut dst = cpu().zeros(DType::F32, 6).unwrap();
    let bad = Layout::contiguous([3])
        .broadcast_to("t", &Shape::new([2, 3]))
        .unwrap();
    let e = cpu()
        .copy_strided(&src, &Layout::contiguous([2, 3]), &mut dst, &bad)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Invalid {
                op: "copy_strided",
                ..
            }
        ),
        "{e}"
    );
    let bad = layout(&[2, 3], &[2, 1], 0); // rows overlap by one element
    assert!(
        cpu()
            .copy_strided(&src, &Layout::contiguous([2, 3]), &mut dst, &bad)
            .is_err()
    );
}

/// Whether `got` (a value of float `dtype`) is `x` rounded to nearest, ties to even:
/// no neighbour of `got` in `dtype` is closer to `x`, and on a tie `got`'s last bit is 0.
fn is_rne(dtype: DType, x: f64, got: f64) -> bool {
    // (bits of got, value of the representable number with bits `b`)
    let (bits, from_bits): (u64, Box<dyn Fn(u64) -> f64>) = match dtype {
        DType::F16 => (
            u64::from(f16::from_f64(got).to_bits()),
            Box::new(|b| f16::from_bits(b as u16).to_f64()),
        ),
        DType::BF16 => (
            u64::from(bf16::from_f64(got).to_bits()),
            Box::new(|b| bf16::from_bits(b as u16).to_f64()),
        ),
        DType::F32 => (
            u64::from((got as f32).to_bits()),
            Box::new(|b| f64::from(f32::from_bits(b as u32))),
        ),
        _ => return got == x, // f64 holds every source value exactly
    };
    assert_eq!(from_bits(bits), got, "{got} is not a {dtype} value");
    let sign = bits & !(u64::MAX >> 1 >> (64 - 8 * dtype.size_in_bytes() as u64));
    let mag = bits ^ sign;
    let d = (got - x).abs();
    // Neighbours in magnitude (same sign), and across zero for ±0.
    let mut neighbours = vec![from_bits(bits + 1)];
    if mag > 0 {
        neighbours.push(from_bits(bits - 1));
    } else {
        neighbours.push(-from_bits(bits + 1));
    }
    let nearest = neighbours.iter().all(|&n| d <= (n - x).abs());
    let tie = neighbours.iter().any(|&n| d == (n - x).abs());
    nearest && (!tie || bits & 1 == 0)
}

#[test]
fn cast_every_pair() {
    for from in DType::ALL {
        for to in DType::ALL {
            for n in [1usize, 7, 70_001] {
                let v = data(n as u64, from, n);
                let src = cpu().upload(&buf(HostData::from_f64(from, &v))).unwrap();
                let mut dst = cpu().zeros(to, n).unwrap();
                cpu().cast(&src, &mut dst).unwrap();
                let got = read(&dst);
                for (i, (&x, &g)) in v.iter().zip(&got).enumerate() {
                    let ok = match to {
                        // Integers: truncate toward zero, saturating (Rust's `as`).
                        DType::I32 => g == f64::from(x as i32),
                        DType::U32 => g == f64::from(x as u32),
                        _ => is_rne(to, x, g),
                    };
                    assert!(ok, "{from} -> {to}, n = {n}, element {i}: {x} became {g}");
                }
            }
        }
    }
}

#[test]
fn f64_to_half_rounding_is_correct_on_hard_cases() {
    // Values just above, at, and just below ties, at several magnitudes, through the
    // kernels that store f64 into f16/bf16 (cast and fill).
    let mut v = Vec::new();
    for e in [-20, -14, -3, 0, 5, 15] {
        for dtype_bits in [11, 8] {
            let ulp = 2f64.powi(e - dtype_bits + 1);
            let base = 2f64.powi(e) * 1.375;
            for tweak in [0.0, 2f64.powi(-40), -(2f64.powi(-40))] {
                v.push(base + ulp / 2.0 + tweak * base);
                v.push(-(base + 1.5 * ulp + tweak * base));
            }
        }
    }
    for to in [DType::F16, DType::BF16, DType::F32] {
        let mut dst = cpu().zeros(to, v.len()).unwrap();
        cpu()
            .cast(&buf(HostData::F64(v.clone())), &mut dst)
            .unwrap();
        for (&x, &g) in v.iter().zip(&read(&dst)) {
            assert!(is_rne(to, x, g), "cast f64 -> {to}: {x:e} became {g:e}");
            let mut one = cpu().zeros(to, 1).unwrap();
            cpu().fill(&mut one, x).unwrap();
            assert_eq!(read(&one), vec![g], "fill {to} with {x:e}");
        }
    }
}

#[test]
fn cast_rounds_once_to_nearest_even() {
    // 1 + 2^-11 lies halfway between two f16 neighbours: ties go to the even one (1.0);
    // 1 + 2^-11 + 2^-30 is just above halfway and must round up, which a double
    // rounding through f32 would get wrong (f32 rounds it to the tie first).
    let src = buf(HostData::F64(vec![
        1.0 + 2f64.powi(-11),
        1.0 + 2f64.powi(-11) + 2f64.powi(-30),
    ]));
    let mut dst = cpu().zeros(DType::F16, 2).unwrap();
    cpu().cast(&src, &mut dst).unwrap();
    assert_eq!(read(&dst), vec![1.0, 1.0 + 2f64.powi(-10)]);
}

#[test]
fn fill_converts_the_value() {
    for dtype in DType::ALL {
        let mut b = cpu().zeros(dtype, 70_001).unwrap();
        cpu().fill(&mut b, 3.75).unwrap();
        let want = if dtype.is_float() { 3.75 } else { 3.0 };
        assert!(read(&b).iter().all(|&v| v == want), "{dtype}");
    }
}

#[test]
fn upload_write_read_roundtrip() {
    let c = cpu();
    let mut b = c.upload(&buf(HostData::F32(vec![1.0, 2.0]))).unwrap();
    c.write(&mut b, &buf(HostData::F32(vec![3.0, 4.0])))
        .unwrap();
    assert_eq!(
        block_on(c.read(&b)).unwrap(),
        buf(HostData::F32(vec![3.0, 4.0]))
    );
    assert!(c.write(&mut b, &buf(HostData::F32(vec![1.0]))).is_err());
    assert!(matches!(
        c.write(&mut b, &buf(HostData::F16(vec![half::f16::ONE; 2]))),
        Err(Error::DType { .. })
    ));
    block_on(c.synchronize()).unwrap();
    assert_eq!(c.len(&b), 2);
    assert_eq!(c.dtype(&b), DType::F32);
}

#[test]
fn freed_buffers_are_reused_by_alloc_but_never_by_zeros() {
    let cpu = crate::CpuBackend::with_threads(1).unwrap();
    let data = HostData::F32(vec![7.0; 1000]);
    let b = cpu.upload(&data).unwrap();
    let ptr = match &*b {
        HostData::F32(v) => v.as_ptr(),
        _ => unreachable!(),
    };
    drop(b);
    assert_eq!(cpu.cached_bytes(), 4000);
    assert_eq!(
        cpu.memory_stats().bytes_in_use,
        0,
        "the cache is not memory in use"
    );
    // zeros() never hands out the cached (dirty) buffer.
    let z = cpu.zeros(DType::F32, 1000).unwrap();
    assert_eq!(*z, HostData::F32(vec![0.0; 1000]));
    assert_eq!(cpu.cached_bytes(), 4000);
    // Another length or dtype is not served from it.
    let other = cpu.alloc(DType::F32, 999).unwrap();
    let wide = cpu.alloc(DType::F64, 500).unwrap();
    assert_eq!(cpu.cached_bytes(), 4000);
    // The same dtype and length is: the very allocation, no zeroing.
    let again = cpu.alloc(DType::F32, 1000).unwrap();
    match &*again {
        HostData::F32(v) => assert_eq!(v.as_ptr(), ptr),
        _ => unreachable!(),
    }
    assert_eq!(cpu.cached_bytes(), 0);
    assert_eq!(cpu.memory_stats().bytes_in_use, 4000 + 4000 + 3996 + 4000);
    drop((z, other, wide, again));
    // Turned off, nothing is kept.
    cpu.empty_cache(0);
    assert_eq!(cpu.cached_bytes(), 0);
    drop(cpu.alloc(DType::F32, 1000).unwrap());
    assert_eq!(cpu.cached_bytes(), 0);
    // A buffer taken out with into_host leaves nothing behind in the cache.
    cpu.empty_cache(crate::DEFAULT_CACHE_LIMIT);
    let h = cpu.upload(&data).unwrap().into_host();
    assert_eq!(h, data);
    assert_eq!(cpu.cached_bytes(), 0);
}
