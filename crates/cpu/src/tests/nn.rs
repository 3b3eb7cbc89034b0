//! softmax, LayerNorm, GELU, embedding, cross-entropy.

use super::{
    ODD, assert_close, buf, cpu, eps_compute, input, quantize, read, reference, rng, round_tol,
};
use brrr_backend::{Backend, DType, EmbeddingSpec, HostData, LayerNormSpec, SoftmaxSpec};
use rand::Rng;

const ROWS_COLS: [(usize, usize); 6] = [(1, 1), (7, 33), (33, 7), (130, 65), (3, 1), (300, 257)];

#[test]
fn softmax_forward_and_backward() {
    let mut seed = 5000;
    for dtype in DType::FLOATS {
        for (rows, cols) in ROWS_COLS {
            for causal in [false, true] {
                for scale in [1.0f32, 0.125, -0.7] {
                    seed += 1;
                    let mut r = rng(seed);
                    let spec = SoftmaxSpec {
                        rows,
                        cols,
                        scale,
                        causal,
                    };
                    let case = format!("{dtype} {spec:?}");
                    let ec = eps_compute(dtype);
                    let (x, xb) = input(&mut r, dtype, rows * cols, -3.0, 3.0);
                    let mut yb = cpu().zeros(dtype, rows * cols).unwrap();
                    cpu().softmax(&spec, &xb, &mut yb).unwrap();
                    let want = reference::softmax(&x, rows, cols, f64::from(scale), causal);
                    assert_close(&format!("softmax {case}"), &read(&yb), &want, |i| {
                        round_tol(dtype, want[i]) + (cols as f64 + 16.0) * ec * want[i]
                    });

                    // Backward from a valid softmax output (zeros where masked).
                    let y = quantize(dtype, &want);
                    let yb = cpu().upload(&buf(HostData::from_f64(dtype, &y))).unwrap();
                    let (dy, dyb) = input(&mut r, dtype, rows * cols, -1.0, 1.0);
                    let mut dxb = cpu().zeros(dtype, rows * cols).unwrap();
                    cpu().softmax_backward(&spec, &yb, &dyb, &mut dxb).unwrap();
                    let want = reference::softmax_backward(&y, &dy, rows, cols, f64::from(scale));
                    let dot_abs: Vec<f64> = (0..rows)
                        .map(|r| {
                            (0..cols)
                                .map(|j| (y[r * cols + j] * dy[r * cols + j]).abs())
                                .sum()
                        })
                        .collect();
                    assert_close(
                        &format!("softmax_backward {case}"),
                        &read(&dxb),
                        &want,
                        |i| {
                            round_tol(dtype, want[i])
                                + (cols as f64 + 8.0)
                                    * ec
                                    * f64::from(scale).abs()
                                    * y[i]
                                    * (dy[i].abs() + dot_abs[i / cols])
                        },
                    );
                }
            }
        }
    }
}

#[test]
fn layernorm_forward_and_backward() {
    let mut seed = 6000;
    for dtype in DType::FLOATS {
        for (rows, cols) in ROWS_COLS {
            seed += 1;
            let mut r = rng(seed);
            let spec = LayerNormSpec {
                rows,
                cols,
                eps: 1e-5,
                gamma_offset: 0,
                beta_offset: 0,
            };
            let eps = f64::from(spec.eps);
            let case = format!("{dtype} {spec:?}");
            let ec = eps_compute(dtype);
            let (x, xb) = input(&mut r, dtype, rows * cols, -2.0, 3.0);
            let (g, gb) = input(&mut r, dtype, cols, -1.5, 1.5);
            let (b, bb) = input(&mut r, dtype, cols, -1.5, 1.5);
            let mut yb = cpu().zeros(dtype, rows * cols).unwrap();
            let mut mb = cpu().zeros(DType::F32, rows).unwrap();
            let mut sb = cpu().zeros(DType::F32, rows).unwrap();
            cpu()
                .layernorm(&spec, &xb, &gb, &bb, &mut yb, &mut mb, &mut sb)
                .unwrap();
            let (y, mean, rstd) = reference::layernorm(&x, &g, &b, rows, cols, eps);
            let n = cols as f64 + 8.0;
            assert_close(&format!("layernorm y {case}"), &read(&yb), &y, |i| {
                let (r, j) = (i / cols, i % cols);
                round_tol(dtype, y[i])
                    + n * ec * (rstd[r] * g[j].abs() * (x[i].abs() + mean[r].abs()) + b[j].abs())
            });
            assert_close(&format!("layernorm mean {case}"), &read(&mb), &mean, |r| {
                round_tol(DType::F32, mean[r]) + n * ec * 3.0
            });
            assert_close(&format!("layernorm rstd {case}"), &read(&sb), &rstd, |r| {
                round_tol(DType::F32, rstd[r]) + 10.0 * n * ec * rstd[r]
            });

            // Backward, with the statistics the forward wrote, into non-zero dgamma/dbeta.
            let (dy, dyb) = input(&mut r, dtype, rows * cols, -1.0, 1.0);
            let (dg0, mut dgb) = input(&mut r, dtype, cols, -1.0, 1.0);
            let (db0, mut dbb) = input(&mut r, dtype, cols, -1.0, 1.0);
            let mut dxb = cpu().zeros(dtype, rows * cols).unwrap();
            cpu()
                .layernorm_backward(
                    &spec, &dyb, &xb, &gb, &mb, &sb, &mut dxb, &mut dgb, &mut dbb,
                )
                .unwrap();
            let (dx, dg, db) = reference::layernorm_backward(&dy, &x, &g, rows, cols, eps);
            let norm = |i: usize| ((x[i] - mean[i / cols]) * rstd[i / cols]).abs();
            let row_mag: Vec<f64> = (0..rows)
                .map(|r| {
                    (0..cols)
                        .map(|j| (dy[r * cols + j] * g[j]).abs() * (1.0 + norm(r * cols + j)))
                        .sum::<f64>()
                        / cols as f64
                })
                .collect();
            assert_close(&format!("layernorm dx {case}"), &read(&dxb), &dx, |i| {
                let (r, j) = (i / cols, i % cols);
                round_tol(dtype, dx[i])
                    + 4.0 * n * ec * rstd[r] * ((dy[i] * g[j]).abs() + row_mag[r] * (1.0 + norm(i)))
            });
            let dg_want: Vec<f64> = (0..cols).map(|j| dg0[j] + dg[j]).collect();
            let db_want: Vec<f64> = (0..cols).map(|j| db0[j] + db[j]).collect();
            let m = rows as f64 + 8.0;
            assert_close(
                &format!("layernorm dgamma {case}"),
                &read(&dgb),
                &dg_want,
                |j| {
                    let mag: f64 = dg0[j].abs()
                        + (0..rows)
                            .map(|r| (dy[r * cols + j] * norm(r * cols + j)).abs())
                            .sum::<f64>();
                    round_tol(dtype, dg_want[j]) + 4.0 * m * ec * mag
                },
            );
            assert_close(
                &format!("layernorm dbeta {case}"),
                &read(&dbb),
                &db_want,
                |j| {
                    let mag: f64 =
                        db0[j].abs() + (0..rows).map(|r| dy[r * cols + j].abs()).sum::<f64>();
                    round_tol(dtype, db_want[j]) + 2.0 * m * ec * mag
                },
            );
        }
    }
}

#[test]
fn gelu_forward_and_backward() {
    let mut seed = 7000;
    for dtype in DType::FLOATS {
        for n in ODD.into_iter().chain([70_001]) {
            seed += 1;
            let mut r = rng(seed);
            let ec = eps_compute(dtype);
            let (x, xb) = input(&mut r, dtype, n, -6.0, 6.0);
            let two_u =
                |v: f64| 2.0 * (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
            let mut yb = cpu().zeros(dtype, n).unwrap();
            cpu().gelu(&xb, &mut yb).unwrap();
            let want: Vec<f64> = x.iter().map(|&v| reference::gelu(v)).collect();
            assert_close(&format!("gelu {dtype} n={n}"), &read(&yb), &want, |i| {
                // The reference's `1 + tanh(u)` cancels for negative x: its own error is
                // about eps(f64)·|x|, which matters when testing f64.
                round_tol(dtype, want[i])
                    + 8.0 * ec * want[i].abs() * (4.0 + two_u(x[i]).abs())
                    + 4.0 * f64::EPSILON * x[i].abs()
            });

            let (dy, dyb) = input(&mut r, dtype, n, -2.0, 2.0);
            let mut dxb = cpu().zeros(dtype, n).unwrap();
            cpu().gelu_backward(&xb, &dyb, &mut dxb).unwrap();
            let want: Vec<f64> = x
                .iter()
                .zip(&dy)
                .map(|(&v, &g)| g * reference::gelu_grad(v))
                .collect();
            assert_close(
                &format!("gelu_backward {dtype} n={n}"),
                &read(&dxb),
                &want,
                |i| {
                    let s = 1.0 / (1.0 + (-two_u(x[i])).exp());
                    let du =
                        (2.0 / std::f64::consts::PI).sqrt() * (1.0 + 3.0 * 0.044715 * x[i] * x[i]);
                    let mag = dy[i].abs() * (s + (2.0 * x[i] * s * (1.0 - s) * du).abs());
                    let ref_err = 8.0
                        * f64::EPSILON
                        * dy[i].abs()
                        * (1.0 + x[i].abs() * (1.0 + 0.14 * x[i] * x[i]));
                    round_tol(dtype, want[i]) + 8.0 * ec * mag * (4.0 + two_u(x[i]).abs()) + ref_err
                },
            );
        }
    }
}

#[test]
fn embedding_forward_and_backward_with_repeated_ids() {
    let mut seed = 8000;
    let rows = 50;
    for dtype in DType::FLOATS {
        for dim in ODD {
            for n in [1usize, 33, 700] {
                for signed in [false, true] {
                    seed += 1;
                    let mut r = rng(seed);
                    let ids: Vec<usize> = (0..n).map(|_| r.random_range(0..rows)).collect();
                    let idb = if signed {
                        buf(HostData::I32(ids.iter().map(|&i| i as i32).collect()))
                    } else {
                        buf(HostData::U32(ids.iter().map(|&i| i as u32).collect()))
                    };
                    let (table, tb) = input(&mut r, dtype, rows * dim, -2.0, 2.0);
                    let mut out = cpu().zeros(dtype, n * dim).unwrap();
                    cpu()
                        .embedding(&EmbeddingSpec::new(dim), &idb, &tb, &mut out)
                        .unwrap();
                    let want: Vec<f64> = ids
                        .iter()
                        .flat_map(|&i| table[i * dim..(i + 1) * dim].to_vec())
                        .collect();
                    assert_eq!(read(&out), want, "embedding {dtype} dim={dim} n={n}");

                    let (dout, db) = input(&mut r, dtype, n * dim, -1.0, 1.0);
                    let (t0, mut dtb) = input(&mut r, dtype, rows * dim, -1.0, 1.0);
                    cpu()
                        .embedding_backward(&EmbeddingSpec::new(dim), &idb, &db, &mut dtb)
                        .unwrap();
                    let mut want = t0.clone();
                    let mut mag: Vec<f64> = t0.iter().map(|v| v.abs()).collect();
                    let mut count = vec![0usize; rows];
                    for (p, &id) in ids.iter().enumerate() {
                        count[id] += 1;
                        for j in 0..dim {
                            want[id * dim + j] += dout[p * dim + j];
                            mag[id * dim + j] += dout[p * dim + j].abs();
                        }
                    }
                    let ec = eps_compute(dtype);
                    assert_close(
                        &format!("embedding_backward {dtype} dim={dim} n={n}"),
                        &read(&dtb),
                        &want,
                        |i| round_tol(dtype, want[i]) + (count[i / dim] as f64 + 2.0) * ec * mag[i],
                    );
                }
            }
        }
    }
}

#[test]
fn cross_entropy_forward_and_backward() {
    let mut seed = 9000;
    for dtype in DType::FLOATS {
        let loss_dtypes: &[DType] = if dtype == DType::F64 {
            &[DType::F32, DType::F64]
        } else {
            &[DType::F32]
        };
        for (rows, vocab) in [(1, 1), (7, 33), (33, 7), (5, 1000), (64, 5003)] {
            for &ldt in loss_dtypes {
                seed += 1;
                let mut r = rng(seed);
                let targets: Vec<i32> = (0..rows)
                    .map(|i| {
                        if i % 5 == 3 {
                            -1
                        } else {
                            r.random_range(0..vocab) as i32
                        }
                    })
                    .collect();
                let tb = buf(HostData::I32(targets.clone()));
                let (z, zb) = input(&mut r, dtype, rows * vocab, -4.0, 4.0);
                let mut lb = cpu().zeros(ldt, rows).unwrap();
                cpu().cross_entropy(&zb, &tb, vocab, &mut lb).unwrap();
                let want = reference::cross_entropy(&z, &targets, vocab);
                let ec = eps_compute(dtype);
                let case = format!("{dtype} -> {ldt} [{rows}, {vocab}]");
                assert_close(&format!("cross_entropy {case}"), &read(&lb), &want, |i| {
                    round_tol(ldt, want[i]) + (vocab as f64 + 16.0) * ec * 8.0
                });

                let (dl, dlb) = input(&mut r, ldt, rows, 0.1, 2.0);
                let mut dzb = cpu().zeros(dtype, rows * vocab).unwrap();
                cpu()
                    .cross_entropy_backward(&zb, &tb, &dlb, vocab, &mut dzb)
                    .unwrap();
                let want = reference::cross_entropy_backward(&z, &targets, &dl, vocab);
                assert_close(
                    &format!("cross_entropy_backward {case}"),
                    &read(&dzb),
                    &want,
                    |i| {
                        let (r, j) = (i / vocab, i % vocab);
                        let onehot = if targets[r] == j as i32 { 1.0 } else { 0.0 };
                        let p = (want[i] / dl[r] + onehot).abs();
                        round_tol(dtype, want[i])
                            + (vocab as f64 + 16.0) * ec * dl[r] * (p + onehot)
                    },
                );
            }
        }
    }
}

/// Kernels that sum partial results must give the same bits on any number of threads.
#[test]
fn results_do_not_depend_on_the_thread_count() {
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut r = rng(77);
            let (rows, cols) = (300, 257);
            let spec = LayerNormSpec {
                rows,
                cols,
                eps: 1e-5,
                gamma_offset: 0,
                beta_offset: 0,
            };
            let (_, xb) = input(&mut r, DType::F32, rows * cols, -2.0, 2.0);
            let (_, gb) = input(&mut r, DType::F32, cols, -2.0, 2.0);
            let (_, dyb) = input(&mut r, DType::F32, rows * cols, -2.0, 2.0);
            let mut yb = cpu().zeros(DType::F32, rows * cols).unwrap();
            let mut mb = cpu().zeros(DType::F32, rows).unwrap();
            let mut sb = cpu().zeros(DType::F32, rows).unwrap();
            cpu()
                .layernorm(&spec, &xb, &gb, &gb, &mut yb, &mut mb, &mut sb)
                .unwrap();
            let mut dx = cpu().zeros(DType::F32, rows * cols).unwrap();
            let mut dg = cpu().zeros(DType::F32, cols).unwrap();
            let mut db = cpu().zeros(DType::F32, cols).unwrap();
            cpu()
                .layernorm_backward(&spec, &dyb, &xb, &gb, &mb, &sb, &mut dx, &mut dg, &mut db)
                .unwrap();
            let mut sum = cpu().zeros(DType::F32, cols).unwrap();
            cpu()
                .reduce(brrr_backend::ReduceOp::Sum, &dyb, 1, rows, cols, &mut sum)
                .unwrap();
            let ids = buf(HostData::U32((0..rows as u32).map(|i| i % 7).collect()));
            let mut dt = cpu().zeros(DType::F32, 7 * cols).unwrap();
            cpu()
                .embedding_backward(&EmbeddingSpec::new(cols), &ids, &dyb, &mut dt)
                .unwrap();
            [yb, dx, dg, db, sum, dt]
        })
    };
    let one = run(1);
    assert_eq!(one, run(2));
    assert_eq!(one, run(3));
}

/// A flat buffer holding `part` at `at`, with other values around it.
fn flat(
    r: &mut rand_chacha::ChaCha8Rng,
    dtype: DType,
    part: &[f64],
    at: usize,
    after: usize,
) -> Vec<f64> {
    let mut v = super::values(r, at + part.len() + after, -2.0, 2.0);
    v[at..at + part.len()].copy_from_slice(part);
    quantize(dtype, &v)
}

/// LayerNorm, the embedding and axpy on views inside flat buffers give bitwise what they
/// give on buffers of their own, and leave the rest of the flat buffers untouched.
#[test]
fn flat_buffer_parts_match_own_buffers_bitwise() {
    let mut r = rng(5900);
    for dtype in DType::FLOATS {
        let up = |v: &[f64]| cpu().upload(&buf(HostData::from_f64(dtype, v))).unwrap();
        // LayerNorm: gamma at 5 and beta at 77 of one flat parameter buffer; their
        // gradients at the same offsets of two flat gradient buffers.
        let (rows, cols, g_at, b_at) = (9, 65, 5, 77);
        let (_, xb) = input(&mut r, dtype, rows * cols, -3.0, 3.0);
        let (g, gb) = input(&mut r, dtype, cols, 0.5, 1.5);
        let (b, bb) = input(&mut r, dtype, cols, -0.5, 0.5);
        let mut pf = flat(&mut r, dtype, &g, g_at, 200);
        pf[b_at..b_at + cols].copy_from_slice(&b);
        let pfb = up(&pf);
        let own = LayerNormSpec::new(rows, cols, 1e-5);
        let at = own.params_at(g_at, b_at);
        let outs = |spec: &LayerNormSpec, gamma: &crate::CpuBuffer, beta: &crate::CpuBuffer| {
            let mut y = cpu().zeros(dtype, rows * cols).unwrap();
            let mut m = cpu().zeros(DType::F32, rows).unwrap();
            let mut s = cpu().zeros(DType::F32, rows).unwrap();
            cpu()
                .layernorm(spec, &xb, gamma, beta, &mut y, &mut m, &mut s)
                .unwrap();
            (read(&y), m, s)
        };
        let (y_own, m, s) = outs(&own, &gb, &bb);
        let (y_flat, _, _) = outs(&at, &pfb, &pfb);
        assert_eq!(y_own, y_flat, "layernorm {dtype}: flat gamma/beta");

        let (_, dyb) = input(&mut r, dtype, rows * cols, -1.0, 1.0);
        let (dg0, dg0b) = input(&mut r, dtype, cols, -1.0, 1.0);
        let (db0, db0b) = input(&mut r, dtype, cols, -1.0, 1.0);
        let (fg, fb) = (
            flat(&mut r, dtype, &dg0, g_at, 9),
            flat(&mut r, dtype, &db0, b_at, 9),
        );
        let (mut dgf, mut dbf) = (up(&fg), up(&fb));
        let (mut dg, mut db) = (dg0b, db0b);
        let mut dx = cpu().zeros(dtype, rows * cols).unwrap();
        cpu()
            .layernorm_backward(&own, &dyb, &xb, &gb, &m, &s, &mut dx, &mut dg, &mut db)
            .unwrap();
        let mut dx2 = cpu().zeros(dtype, rows * cols).unwrap();
        cpu()
            .layernorm_backward(&at, &dyb, &xb, &pfb, &m, &s, &mut dx2, &mut dgf, &mut dbf)
            .unwrap();
        assert_eq!(read(&dx), read(&dx2), "layernorm_backward {dtype}: dx");
        let (mut want_g, mut want_b) = (fg.clone(), fb.clone());
        want_g[g_at..g_at + cols].copy_from_slice(&read(&dg));
        want_b[b_at..b_at + cols].copy_from_slice(&read(&db));
        assert_eq!(
            read(&dgf),
            want_g,
            "layernorm_backward {dtype}: flat dgamma"
        );
        assert_eq!(read(&dbf), want_b, "layernorm_backward {dtype}: flat dbeta");

        // The embedding: a table of 13 rows of 8 at element 11 of a flat buffer.
        let (rows, dim, t_at) = (13, 8, 11);
        let ids: Vec<f64> = (0..40)
            .map(|_| f64::from(r.random_range(0..rows as u32)))
            .collect();
        let idb = cpu()
            .upload(&buf(HostData::from_f64(DType::U32, &ids)))
            .unwrap();
        let (t, tb) = input(&mut r, dtype, rows * dim, -1.0, 1.0);
        let tf = flat(&mut r, dtype, &t, t_at, 6);
        let spec = EmbeddingSpec::new(dim).table_at(t_at, rows);
        let (mut o1, mut o2) = (
            cpu().zeros(dtype, 40 * dim).unwrap(),
            cpu().zeros(dtype, 40 * dim).unwrap(),
        );
        cpu()
            .embedding(&EmbeddingSpec::new(dim), &idb, &tb, &mut o1)
            .unwrap();
        cpu().embedding(&spec, &idb, &up(&tf), &mut o2).unwrap();
        assert_eq!(read(&o1), read(&o2), "embedding {dtype}: flat table");
        let (_, doutb) = input(&mut r, dtype, 40 * dim, -1.0, 1.0);
        let (mut d1, mut d2) = (tb, up(&tf));
        cpu()
            .embedding_backward(&EmbeddingSpec::new(dim), &idb, &doutb, &mut d1)
            .unwrap();
        cpu()
            .embedding_backward(&spec, &idb, &doutb, &mut d2)
            .unwrap();
        let mut want = tf.clone();
        want[t_at..t_at + rows * dim].copy_from_slice(&read(&d1));
        assert_eq!(read(&d2), want, "embedding_backward {dtype}: flat dtable");

        // axpy into y[3..3 + 50] of 60.
        let (_, xab) = input(&mut r, dtype, 50, -1.0, 1.0);
        let (ya, mut yab) = input(&mut r, dtype, 50, -1.0, 1.0);
        let yf = flat(&mut r, dtype, &ya, 3, 7);
        let mut yfb = up(&yf);
        cpu().axpy(0.375, &xab, &mut yab, None).unwrap();
        cpu().axpy(0.375, &xab, &mut yfb, Some(3)).unwrap();
        let mut want = yf.clone();
        want[3..53].copy_from_slice(&read(&yab));
        assert_eq!(read(&yfb), want, "axpy {dtype}: y[3..53] of 60");
    }
}
