//! Tensor semantics on the CPU backend: views, broadcasting, matmul with transposed
//! views, concatenation, and errors that name the op and the shapes.

use brrr_cpu::CpuBackend;
use brrr_tensor::{DType, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn be() -> CpuBackend {
    CpuBackend::new()
}

fn rand_t(shape: &[usize], seed: u64) -> (Tensor<CpuBackend>, Vec<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let v: Vec<f64> = (0..shape.iter().product())
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    (
        Tensor::from_f64(&be(), &v, shape.to_vec(), DType::F64).unwrap(),
        v,
    )
}

/// Naive `[b, m, k] @ [b, k, n]`.
fn naive_bmm(
    a: &[f64],
    b: &[f64],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    b_shared: bool,
) -> Vec<f64> {
    let mut c = vec![0.0; batch * m * n];
    for bi in 0..batch {
        let bo = if b_shared { 0 } else { bi * k * n };
        for i in 0..m {
            for j in 0..n {
                c[bi * m * n + i * n + j] = (0..k)
                    .map(|p| a[bi * m * k + i * k + p] * b[bo + p * n + j])
                    .sum();
            }
        }
    }
    c
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "element {i}: {x} vs {y}"
        );
    }
}

#[test]
fn transpose_and_permute_are_views_that_read_correctly() {
    let (t, v) = rand_t(&[2, 3, 4], 1);
    let p = t.permute(&[2, 0, 1]).unwrap();
    assert_eq!(p.dims(), &[4, 2, 3]);
    let got = p.to_vec_f64().unwrap();
    for i in 0..4 {
        for j in 0..2 {
            for k in 0..3 {
                assert_eq!(got[i * 6 + j * 3 + k], v[j * 12 + k * 4 + i]);
            }
        }
    }
    let tt = t.transpose(-1, -2).unwrap().transpose(-1, -2).unwrap();
    assert_eq!(tt.to_vec_f64().unwrap(), v);
}

#[test]
fn matmul_matches_naive_for_every_operand_layout() {
    let (batch, m, k, n) = (3, 5, 7, 4);
    let (a, av) = rand_t(&[batch, m, k], 2);
    let (b, bv) = rand_t(&[batch, k, n], 3);
    let want = naive_bmm(&av, &bv, batch, m, k, n, false);
    close(&a.matmul(&b).unwrap().to_vec_f64().unwrap(), &want, 1e-12);
    // The same operands given as transposed views of their transposes.
    let at = a
        .transpose(-1, -2)
        .unwrap()
        .contiguous()
        .unwrap()
        .transpose(-1, -2)
        .unwrap();
    let bt = b
        .transpose(-1, -2)
        .unwrap()
        .contiguous()
        .unwrap()
        .transpose(-1, -2)
        .unwrap();
    assert!(!at.layout().is_contiguous());
    close(&at.matmul(&bt).unwrap().to_vec_f64().unwrap(), &want, 1e-12);
    // A rank-2 right-hand side is shared across the batch.
    let (w, wv) = rand_t(&[k, n], 4);
    close(
        &a.matmul(&w).unwrap().to_vec_f64().unwrap(),
        &naive_bmm(&av, &wv, batch, m, k, n, true),
        1e-12,
    );
    // A strided view that is not a plain transpose (a narrowed slice) is copied first.
    let (big, bigv) = rand_t(&[k, n + 3], 5);
    let slice = big.narrow(1, 2, n).unwrap();
    let sv: Vec<f64> = (0..k)
        .flat_map(|r| bigv[r * (n + 3) + 2..r * (n + 3) + 2 + n].to_vec())
        .collect();
    close(
        &a.matmul(&slice).unwrap().to_vec_f64().unwrap(),
        &naive_bmm(&av, &sv, batch, m, k, n, true),
        1e-12,
    );
}

#[test]
fn matmul_into_accumulates_with_beta() {
    let (a, _) = rand_t(&[4, 6], 6);
    let (b, _) = rand_t(&[6, 5], 7);
    let once = a.matmul(&b).unwrap().to_vec_f64().unwrap();
    let mut c = Tensor::zeros(&be(), [4, 5], DType::F64).unwrap();
    Tensor::matmul_into(&mut c, &a, &b, 1.0, 1.0).unwrap();
    Tensor::matmul_into(&mut c, &a, &b, 1.0, 1.0).unwrap();
    let twice: Vec<f64> = once.iter().map(|x| 2.0 * x).collect();
    close(&c.to_vec_f64().unwrap(), &twice, 1e-12);
}

#[test]
fn broadcasting_follows_numpy() {
    let (a, av) = rand_t(&[2, 1, 3], 8);
    let (b, bv) = rand_t(&[4, 1], 9);
    let c = a.add(&b).unwrap();
    assert_eq!(c.dims(), &[2, 4, 3]);
    let got = c.to_vec_f64().unwrap();
    for i in 0..2 {
        for j in 0..4 {
            for k in 0..3 {
                assert_eq!(got[i * 12 + j * 3 + k], av[i * 3 + k] + bv[j]);
            }
        }
    }
    let e = a.add(&rand_t(&[5], 1).0).unwrap_err().to_string();
    assert!(
        e.contains("add") && e.contains("[2, 1, 3]") && e.contains("[5]"),
        "{e}"
    );
}

#[test]
fn reductions_and_cat() {
    let (t, v) = rand_t(&[3, 4], 10);
    let s = t.sum_dim(0, false).unwrap().to_vec_f64().unwrap();
    for j in 0..4 {
        let want: f64 = (0..3).map(|i| v[i * 4 + j]).sum();
        assert!((s[j] - want).abs() < 1e-12);
    }
    let m = t.max_dim(-1, true).unwrap();
    assert_eq!(m.dims(), &[3, 1]);
    let (u, uv) = rand_t(&[3, 2], 11);
    let c = Tensor::cat(&[&t, &u], 1).unwrap();
    assert_eq!(c.dims(), &[3, 6]);
    let got = c.to_vec_f64().unwrap();
    for i in 0..3 {
        assert_eq!(&got[i * 6..i * 6 + 4], &v[i * 4..i * 4 + 4]);
        assert_eq!(&got[i * 6 + 4..i * 6 + 6], &uv[i * 2..i * 2 + 2]);
    }
}

#[test]
fn shape_and_dtype_errors_are_clear() {
    let (a, _) = rand_t(&[2, 3], 12);
    let (b, _) = rand_t(&[4, 5], 13);
    let e = a.matmul(&b).unwrap_err().to_string();
    assert!(
        e.contains("matmul") && e.contains("[2, 3]") && e.contains("[4, 5]"),
        "{e}"
    );
    let e = a.reshape([7]).unwrap_err().to_string();
    assert!(e.contains("reshape"), "{e}");
    let f = a.to_dtype(DType::F32).unwrap();
    let e = a.add(&f).unwrap_err().to_string();
    assert!(e.contains("f64") && e.contains("f32"), "{e}");
    let e = Tensor::from_f64(&be(), &[1.0, 2.0], [3], DType::F32)
        .unwrap_err()
        .to_string();
    assert!(e.contains("from_host"), "{e}");
    // Writing through a shared buffer would silently change the other view.
    let mut view = a.clone();
    assert!(view.fill_(1.0).is_err());
    // A range past the end, and one whose end wraps past usize::MAX.
    let e = a.narrow(1, 2, 2).unwrap_err().to_string();
    assert!(e.contains("narrow") && e.contains("out of bounds"), "{e}");
    let e = a.narrow(1, 2, usize::MAX).unwrap_err().to_string();
    assert!(e.contains("narrow") && e.contains("out of bounds"), "{e}");
    assert_eq!(a.narrow(1, 1, 2).unwrap().dims(), [2, 2]);
}

#[test]
fn dtype_round_trip() {
    let (a, v) = rand_t(&[17], 14);
    for dt in [DType::F16, DType::BF16, DType::F32] {
        let back = a
            .to_dtype(dt)
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            .to_vec_f64()
            .unwrap();
        for (x, y) in back.iter().zip(&v) {
            assert!(
                (x - y).abs() <= dt.epsilon() * y.abs().max(1e-3),
                "{dt}: {x} vs {y}"
            );
        }
    }
}

/// Parameters laid end to end in one flat buffer (llm.c's `params_memory`): a matmul
/// reads a weight that is a view part-way into it in place, plain or transposed (the
/// device's peak grows by the output alone: no copy), and writes into a view part-way
/// into another buffer (a flat gradient buffer), accumulating with `beta = 1`.
#[test]
fn matmul_reads_and_writes_views_part_way_into_flat_buffers() {
    use brrr_tensor::Backend;
    let cpu = be();
    let (m, k, n) = (8, 16, 24);
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let flat_v: Vec<f64> = (0..5 + k * n + 3)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let flat = Tensor::from_f64(&cpu, &flat_v, [flat_v.len()], DType::F64).unwrap();
    let w = flat.narrow(0, 5, k * n).unwrap().reshape([k, n]).unwrap();
    assert_eq!(w.layout().offset, 5);
    // On the same device as the flat buffer (`rand_t` opens its own).
    let x_v: Vec<f64> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
    let x = Tensor::from_f64(&cpu, &x_v, [m, k], DType::F64).unwrap();
    let want = x.matmul(&w.deep_clone().unwrap()).unwrap();

    for (what, w) in [
        ("plain view", w.clone()),
        // The same elements read as [n, k] and transposed back: a column-major operand
        // at an offset.
        (
            "transposed view",
            flat.narrow(0, 5, k * n)
                .unwrap()
                .reshape([n, k])
                .unwrap()
                .transpose(0, 1)
                .unwrap(),
        ),
    ] {
        // The same layout in a buffer of its own (offset 0): the same GEMM, bit for bit.
        let own = Tensor::from_f64(&cpu, &flat_v[5..5 + k * n], [k * n], DType::F64).unwrap();
        let own = if what == "plain view" {
            own.reshape([k, n]).unwrap()
        } else {
            own.reshape([n, k]).unwrap().transpose(0, 1).unwrap()
        };
        let reference = x.matmul(&own).unwrap();
        let before = cpu.memory_stats().bytes_in_use;
        cpu.reset_peak_memory();
        let y = x.matmul(&w).unwrap();
        let grew = cpu.memory_stats().peak_bytes - before;
        assert_eq!(
            grew,
            (m * n * 8) as u64,
            "{what}: only the output is allocated"
        );
        assert_eq!(
            y.to_vec_f64().unwrap(),
            reference.to_vec_f64().unwrap(),
            "{what}"
        );
    }

    // The output: elements 3.. of a buffer nothing else holds, written twice with beta = 1.
    let mut g = Tensor::zeros(&cpu, [3 + m * n + 2], DType::F64)
        .unwrap()
        .narrow(0, 3, m * n)
        .unwrap()
        .reshape([m, n])
        .unwrap();
    Tensor::matmul_into(&mut g, &x, &w, 1.0, 1.0).unwrap();
    Tensor::matmul_into(&mut g, &x, &w, 1.0, 1.0).unwrap();
    let twice: Vec<f64> = want.to_vec_f64().unwrap().iter().map(|v| 2.0 * v).collect();
    assert_eq!(g.to_vec_f64().unwrap(), twice);
    // A view whose buffer another tensor still holds is refused, naming the op.
    let parent = Tensor::zeros(&cpu, [m * n + 1], DType::F64).unwrap();
    let mut shared = parent.narrow(0, 1, m * n).unwrap().reshape([m, n]).unwrap();
    let e = Tensor::matmul_into(&mut shared, &x, &w, 1.0, 0.0).unwrap_err();
    assert!(
        e.to_string().contains("matmul") && e.to_string().contains("shared"),
        "{e}"
    );
}

/// LayerNorm's gamma and beta, and an embedding table, as views part-way into one flat
/// parameter buffer are read in place (the device's peak grows by the outputs alone),
/// and their gradients are written into views part-way into flat gradient buffers; all
/// bit for bit what buffers of their own give.
#[test]
fn layernorm_and_embedding_read_and_write_views_into_flat_buffers() {
    use brrr_tensor::Backend;
    let cpu = be();
    let (rows, cols, vocab) = (6, 16, 10);
    let mut rng = ChaCha8Rng::seed_from_u64(78);
    let mut vals = |n: usize| -> Vec<f64> { (0..n).map(|_| rng.random_range(-1.0..1.0)).collect() };
    // [3 pad | gamma | beta | table (vocab × cols) | 2 pad]
    let flat_v = vals(3 + 2 * cols + vocab * cols + 2);
    let flat = Tensor::from_f64(&cpu, &flat_v, [flat_v.len()], DType::F64).unwrap();
    let view = |at: usize, dims: &[usize]| {
        let n: usize = dims.iter().product();
        flat.narrow(0, at, n)
            .unwrap()
            .reshape(dims.to_vec())
            .unwrap()
    };
    let (gamma, beta) = (view(3, &[cols]), view(3 + cols, &[cols]));
    let table = view(3 + 2 * cols, &[vocab, cols]);
    let own = |t: &Tensor<_>| t.deep_clone().unwrap();
    let x = Tensor::from_f64(&cpu, &vals(rows * cols), [rows, cols], DType::F64).unwrap();

    let (want, stats) = x.layernorm(&own(&gamma), &own(&beta), 1e-5).unwrap();
    let before = cpu.memory_stats().bytes_in_use;
    cpu.reset_peak_memory();
    let (y, _) = x.layernorm(&gamma, &beta, 1e-5).unwrap();
    let grew = cpu.memory_stats().peak_bytes - before;
    // y (f64) and the per-row mean and rstd (f32): no copy of gamma or beta.
    assert_eq!(
        grew,
        (rows * cols * 8 + 2 * rows * 4) as u64,
        "layernorm copied a view"
    );
    assert_eq!(y.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());

    // The gradients at the parameters' offsets of two flat gradient buffers.
    let dy = Tensor::from_f64(&cpu, &vals(rows * cols), [rows, cols], DType::F64).unwrap();
    let grad_view = |at: usize| {
        Tensor::zeros(&cpu, [flat_v.len()], DType::F64)
            .unwrap()
            .narrow(0, at, cols)
            .unwrap()
    };
    let (mut dg, mut db) = (grad_view(3), grad_view(3 + cols));
    let (mut dg_own, mut db_own) = (own(&dg), own(&db));
    let dx_own = x
        .layernorm_backward(&dy, &own(&gamma), &stats, 1e-5, &mut dg_own, &mut db_own)
        .unwrap();
    let dx = x
        .layernorm_backward(&dy, &gamma, &stats, 1e-5, &mut dg, &mut db)
        .unwrap();
    assert_eq!(dx.to_vec_f64().unwrap(), dx_own.to_vec_f64().unwrap());
    assert_eq!(dg.to_vec_f64().unwrap(), dg_own.to_vec_f64().unwrap());
    assert_eq!(db.to_vec_f64().unwrap(), db_own.to_vec_f64().unwrap());
    // Gradients at other offsets than their parameters: through temporaries, same bits.
    let (mut dg2, mut db2) = (grad_view(5), grad_view(40));
    x.layernorm_backward(&dy, &gamma, &stats, 1e-5, &mut dg2, &mut db2)
        .unwrap();
    assert_eq!(dg2.to_vec_f64().unwrap(), dg_own.to_vec_f64().unwrap());
    assert_eq!(db2.to_vec_f64().unwrap(), db_own.to_vec_f64().unwrap());

    let ids = Tensor::from_f64(&cpu, &[3.0, 0.0, 9.0, 3.0], [4], DType::U32).unwrap();
    let want = ids.embedding(&own(&table)).unwrap();
    let before = cpu.memory_stats().bytes_in_use;
    cpu.reset_peak_memory();
    let out = ids.embedding(&table).unwrap();
    let grew = cpu.memory_stats().peak_bytes - before;
    assert_eq!(grew, (4 * cols * 8) as u64, "embedding copied the table");
    assert_eq!(out.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    let dout = Tensor::from_f64(&cpu, &vals(4 * cols), [4, cols], DType::F64).unwrap();
    let mut dtable = Tensor::zeros(&cpu, [7 + vocab * cols], DType::F64)
        .unwrap()
        .narrow(0, 7, vocab * cols)
        .unwrap()
        .reshape([vocab, cols])
        .unwrap();
    let mut dtable_own = own(&dtable);
    ids.embedding_backward(&dout, &mut dtable_own).unwrap();
    ids.embedding_backward(&dout, &mut dtable).unwrap();
    assert_eq!(
        dtable.to_vec_f64().unwrap(),
        dtable_own.to_vec_f64().unwrap()
    );
}
