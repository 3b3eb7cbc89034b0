//! GaLore's [`Projector`] on brrr-cpu: the SVD's subspace, updates confined to it, the
//! refresh schedule, the state's size, training, checkpoints and refused inputs.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::AdamWParams;
use brrr_cpu::CpuBackend;
use brrr_nn::galore::{ProjectorState, Side};
use brrr_nn::{
    AdamW, AdamWConfig, DType, GaLoreConfig, Gpt, GptConfig, Module, Param, Projector, Tensor,
};
use rand::SeedableRng;

type Cpu = CpuBackend;

fn f64s(n: usize, seed: u64) -> Vec<f64> {
    // A small LCG in [-1, 1): deterministic inputs without a dependency.
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            2.0 * ((s >> 11) as f64 / (1u64 << 53) as f64) - 1.0
        })
        .collect()
}

fn f32s(n: usize, seed: u64) -> Vec<f32> {
    f64s(n, seed).into_iter().map(|x| x as f32).collect()
}

fn tensor(cpu: &Cpu, v: &[f32], rows: usize, cols: usize) -> Tensor<Cpu> {
    Tensor::from_f32(cpu, v, [rows, cols], DType::F32).unwrap()
}

/// `k` orthonormal vectors of length `n` (Gram-Schmidt in f64), as `k` rows.
fn orthonormal(n: usize, k: usize, seed: u64) -> Vec<Vec<f64>> {
    let mut out: Vec<Vec<f64>> = Vec::new();
    for i in 0..k {
        let mut v = f64s(n, seed + i as u64);
        for u in &out {
            let d: f64 = v.iter().zip(u).map(|(a, b)| a * b).sum();
            v.iter_mut().zip(u).for_each(|(a, b)| *a -= d * b);
        }
        let norm = v.iter().map(|a| a * a).sum::<f64>().sqrt();
        out.push(v.into_iter().map(|a| a / norm).collect());
    }
    out
}

/// `Σ_k s_k u_k v_kᵀ`: a `[rows, cols]` matrix with singular values `s` and known
/// singular vectors (returned as rows), row-major.
fn known_svd(rows: usize, cols: usize, s: &[f64]) -> (Vec<f32>, Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let (u, v) = (
        orthonormal(rows, s.len(), 10),
        orthonormal(cols, s.len(), 50),
    );
    let mut g = vec![0.0f64; rows * cols];
    for (k, sk) in s.iter().enumerate() {
        for i in 0..rows {
            for j in 0..cols {
                g[i * cols + j] += sk * u[k][i] * v[k][j];
            }
        }
    }
    (g.into_iter().map(|x| x as f32).collect(), u, v)
}

/// Column `k` of a row-major `[n, r]` matrix.
fn column(m: &[f32], r: usize, k: usize) -> Vec<f64> {
    m.iter().skip(k).step_by(r).map(|&x| f64::from(x)).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn frobenius(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum::<f64>()
        .sqrt()
}

fn config(rank: usize, update_every: u32) -> GaLoreConfig {
    GaLoreConfig {
        rank,
        update_every,
        scale: 0.25,
    }
}

fn hp(lr: f32, weight_decay: f32, step: u32) -> AdamWParams {
    AdamWParams {
        lr,
        weight_decay,
        step,
        ..AdamWParams::default()
    }
}

/// `PᵀP = I` for a row-major `[n, r]` projection.
fn assert_orthonormal_columns(p: &[f32], r: usize) {
    for a in 0..r {
        for b in 0..r {
            let d = dot(&column(p, r, a), &column(p, r, b));
            let want = if a == b { 1.0 } else { 0.0 };
            assert!((d - want).abs() < 1e-5, "PᵀP[{a},{b}] = {d}");
        }
    }
}

/// On a gradient of rank 3 with singular values (5, 3, 1): a rank-3 projection
/// reconstructs it and its columns are the singular vectors (up to sign); a rank-2 one
/// keeps the top two and misses exactly the third singular value. Both sides.
#[test]
fn the_svd_projection_spans_the_gradients_top_singular_vectors() {
    let cpu = Cpu::new();
    for (rows, cols) in [(6, 10), (10, 6), (7, 7)] {
        let (g, u, v) = known_svd(rows, cols, &[5.0, 3.0, 1.0]);
        let grad = tensor(&cpu, &g, rows, cols);
        for rank in [3, 2] {
            let mut proj = Projector::<Cpu>::new(config(rank, 10), rows, cols).unwrap();
            assert_eq!(proj.side(), Side::of(rows, cols));
            assert_eq!(proj.side() == Side::Left, rows <= cols);
            proj.refresh(&grad).unwrap();
            let back = proj.project_back(&proj.project(&grad).unwrap()).unwrap();
            let err = frobenius(&back.to_vec_f32().unwrap(), &g);
            // ‖G − PPᵀG‖_F = the singular values left out.
            let want = if rank == 3 { 0.0 } else { 1.0 };
            assert!(
                (err - want).abs() < 1e-4,
                "{rows}x{cols} rank {rank}: {err}"
            );
            let p = proj.projection().unwrap().to_vec_f32().unwrap();
            assert_orthonormal_columns(&p, rank);
            let vectors = if rows <= cols { &u } else { &v };
            for (k, want) in vectors.iter().enumerate().take(rank) {
                let c = dot(&column(&p, rank, k), want).abs();
                assert!((c - 1.0).abs() < 1e-5, "{rows}x{cols}: column {k}: {c}");
            }
        }
    }
}

/// One step with no weight decay moves the weight inside the subspace: the change is
/// `P X` (left) or `X Qᵀ` (right). With weight decay, what is left after the decay
/// `(1 − lr·wd)·W` is in the subspace, so the decay applied to the whole weight.
#[test]
fn the_update_lies_in_the_projected_subspace() {
    let cpu = Cpu::new();
    for (rows, cols) in [(6, 10), (10, 6)] {
        for wd in [0.0f32, 0.1] {
            let mut proj = Projector::<Cpu>::new(config(2, 10), rows, cols).unwrap();
            let w0 = f32s(rows * cols, 3);
            let mut w = tensor(&cpu, &w0, rows, cols);
            let grad = tensor(&cpu, &f32s(rows * cols, 4), rows, cols); // full rank
            let lr = 0.1;
            proj.step(&hp(lr, wd, 1), &mut w, &grad, None).unwrap();
            let w1 = w.to_vec_f32().unwrap();
            let delta: Vec<f32> = w0
                .iter()
                .zip(&w1)
                .map(|(a, b)| (1.0 - lr * wd) * a - b)
                .collect();
            let d = tensor(&cpu, &delta, rows, cols);
            let inside = proj.project_back(&proj.project(&d).unwrap()).unwrap();
            let residual = frobenius(&inside.to_vec_f32().unwrap(), &delta);
            let size = frobenius(&delta, &vec![0.0; delta.len()]);
            assert!(size > 1e-3, "{rows}x{cols} wd {wd}: no update ({size})");
            assert!(
                residual < 1e-4 * size,
                "{rows}x{cols} wd {wd}: {residual} of {size}"
            );
            if wd > 0.0 {
                // Without the decay term the change is not in the subspace: the decay
                // really reached the full weight.
                let plain: Vec<f32> = w0.iter().zip(&w1).map(|(a, b)| a - b).collect();
                let d = tensor(&cpu, &plain, rows, cols);
                let inside = proj.project_back(&proj.project(&d).unwrap()).unwrap();
                assert!(frobenius(&inside.to_vec_f32().unwrap(), &plain) > 1e-3);
            }
        }
    }
}

/// Two steps against Algorithm 2 written out in f64 on the host, with the projection
/// the projector chose: `R = PᵀG`, Adam moments with bias correction,
/// `W ← (1 − lr·wd)W − lr·α·P N`. Checks `grad_scale` and `inv_scale` too.
#[test]
fn two_steps_match_algorithm_2_on_the_host() {
    let cpu = Cpu::new();
    let (rows, cols, rank) = (5, 8, 2);
    let mut proj = Projector::<Cpu>::new(config(rank, 100), rows, cols).unwrap();
    let w0 = f32s(rows * cols, 7);
    let mut w = tensor(&cpu, &w0, rows, cols);
    let inv = Tensor::from_f32(&cpu, &[0.5], [1], DType::F32).unwrap();
    let (lr, wd, b1, b2, eps, gs) = (0.05f64, 0.1f64, 0.9f64, 0.999f64, 1e-8f64, 0.8f64);
    let mut want: Vec<f64> = w0.iter().map(|&x| f64::from(x)).collect();
    let (mut m, mut v) = (vec![0.0f64; rank * cols], vec![0.0f64; rank * cols]);
    for step in 1..=2u32 {
        let g = f32s(rows * cols, 20 + u64::from(step));
        let p = AdamWParams {
            grad_scale: gs as f32,
            ..hp(lr as f32, wd as f32, step)
        };
        proj.step(&p, &mut w, &tensor(&cpu, &g, rows, cols), Some(&inv))
            .unwrap();
        let pm = proj.projection().unwrap().to_vec_f64().unwrap(); // [rows, rank]
        let t = f64::from(step as i32);
        let mut n = vec![0.0f64; rank * cols];
        for k in 0..rank {
            for j in 0..cols {
                let r: f64 = (0..rows)
                    .map(|i| pm[i * rank + k] * f64::from(g[i * cols + j]) * gs * 0.5)
                    .sum();
                let e = k * cols + j;
                m[e] = b1 * m[e] + (1.0 - b1) * r;
                v[e] = b2 * v[e] + (1.0 - b2) * r * r;
                let (mh, vh) = (m[e] / (1.0 - b1.powf(t)), v[e] / (1.0 - b2.powf(t)));
                n[e] = mh / (vh.sqrt() + eps);
            }
        }
        for i in 0..rows {
            for j in 0..cols {
                let pn: f64 = (0..rank).map(|k| pm[i * rank + k] * n[k * cols + j]).sum();
                let x = &mut want[i * cols + j];
                *x = (1.0 - lr * wd) * *x - lr * 0.25 * pn;
            }
        }
        let got = w.to_vec_f64().unwrap();
        for (e, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() < 1e-5, "step {step}, element {e}: {a} vs {b}");
        }
    }
}

/// The projection is recomputed at steps 1, 1 + T, 1 + 2T, ... and only then: the count
/// of SVDs, and the projection unchanged bit for bit between refreshes (the gradient
/// changes every step).
#[test]
fn the_projection_is_refreshed_every_update_every_steps() {
    let cpu = Cpu::new();
    let (rows, cols) = (6, 4);
    let mut proj = Projector::<Cpu>::new(config(2, 3), rows, cols).unwrap();
    let mut w = tensor(&cpu, &f32s(rows * cols, 1), rows, cols);
    let mut counts = Vec::new();
    let mut previous: Option<Vec<u32>> = None;
    for step in 1..=10u32 {
        let g = tensor(&cpu, &f32s(rows * cols, 100 + u64::from(step)), rows, cols);
        proj.step(&hp(0.01, 0.0, step), &mut w, &g, None).unwrap();
        counts.push(proj.svd_count());
        let p: Vec<u32> = proj
            .projection()
            .unwrap()
            .to_vec_f32()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect();
        let refreshed = (step - 1).is_multiple_of(3);
        if let Some(prev) = &previous {
            assert_eq!(&p != prev, refreshed, "step {step}");
        }
        previous = Some(p);
    }
    assert_eq!(counts, [1, 1, 1, 2, 2, 2, 3, 3, 3, 4]);
    assert!(proj.svd_seconds() > 0.0);
    // A projector that starts mid-run has no projection: its first step takes one.
    let mut late = Projector::<Cpu>::new(config(2, 3), rows, cols).unwrap();
    let g = tensor(&cpu, &f32s(rows * cols, 9), rows, cols);
    late.step(&hp(0.01, 0.0, 5), &mut w, &g, None).unwrap();
    late.step(&hp(0.01, 0.0, 6), &mut w, &g, None).unwrap();
    assert_eq!(late.svd_count(), 1);
}

/// The state is `4·r·(min + 2·max)` bytes, as predicted without allocating, against
/// AdamW's `8·rows·cols`: smaller by the fraction `r·(min + 2·max) / (2·rows·cols)`.
#[test]
fn state_bytes_are_as_predicted_and_smaller_than_adamws() {
    let cpu = Cpu::new();
    for (rows, cols, rank) in [(16, 64, 4), (64, 16, 4), (32, 32, 8), (9, 5, 5)] {
        let c = config(rank, 10);
        let predicted = Projector::<Cpu>::predicted_bytes(&c, rows, cols);
        let mut proj = Projector::<Cpu>::new(c, rows, cols).unwrap();
        assert_eq!(proj.state_bytes(), 0, "nothing before the first step");
        let mut w = tensor(&cpu, &f32s(rows * cols, 1), rows, cols);
        let g = tensor(&cpu, &f32s(rows * cols, 2), rows, cols);
        proj.step(&hp(0.01, 0.0, 1), &mut w, &g, None).unwrap();
        assert_eq!(proj.state_bytes(), predicted, "{rows}x{cols} rank {rank}");
        let (small, large) = (rows.min(cols), rows.max(cols));
        let adamw = 8 * rows * cols;
        // predicted / adamw = r·(min + 2·max) / (2·rows·cols), in integers.
        assert_eq!(
            predicted * (2 * rows * cols),
            adamw * rank * (small + 2 * large)
        );
        if rank < small / 2 {
            assert!(predicted < adamw);
        }
    }
    // GPT-2 small's MLP weight at the default rank 128: 3.5 MB of state instead of 18.9.
    let big = Projector::<Cpu>::predicted_bytes(&GaLoreConfig::default(), 768, 3072);
    assert_eq!(big, 4 * 128 * (768 + 2 * 3072));
    assert!(big * 5 < 8 * 768 * 3072);
    assert_eq!(
        GaLoreConfig::default(),
        GaLoreConfig {
            rank: 128,
            update_every: 200,
            scale: 0.25
        }
    );
}

/// Least squares `½‖W X − Y‖² / n` for a `[rows, cols]` weight: the loss and its
/// gradient `(W X − Y) Xᵀ / n`, on the device.
struct LeastSquares {
    x: Tensor<Cpu>,
    y: Tensor<Cpu>,
    n: usize,
}

impl LeastSquares {
    fn new(cpu: &Cpu, rows: usize, cols: usize, n: usize) -> Self {
        let target = tensor(cpu, &f32s(rows * cols, 70), rows, cols);
        let x = tensor(cpu, &f32s(cols * n, 71), cols, n);
        let y = target.matmul(&x).unwrap();
        LeastSquares { x, y, n }
    }

    fn loss_and_grad(&self, w: &Tensor<Cpu>) -> (f64, Tensor<Cpu>) {
        let r = w.matmul(&self.x).unwrap().sub(&self.y).unwrap();
        let loss = r.sum_squares().unwrap().to_scalar_f64().unwrap() / (2 * self.n) as f64;
        let g = r
            .matmul(&self.x.transpose(0, 1).unwrap())
            .unwrap()
            .scale(1.0 / self.n as f32)
            .unwrap();
        (loss, g)
    }
}

/// GaLore at rank 3 fits a full-rank 8 × 12 least-squares target: the subspace changes
/// every 10 steps, and the low-rank updates add up to a full-rank fit (§4.1).
#[test]
fn least_squares_loss_falls_with_galore() {
    let cpu = Cpu::new();
    let (rows, cols) = (8, 12);
    let problem = LeastSquares::new(&cpu, rows, cols, 48);
    let mut w = Tensor::zeros(&cpu, [rows, cols], DType::F32).unwrap();
    let c = GaLoreConfig {
        rank: 3,
        update_every: 10,
        scale: 1.0,
    };
    let mut proj = Projector::<Cpu>::new(c, rows, cols).unwrap();
    let mut losses = Vec::new();
    for step in 1..=300 {
        let (loss, g) = problem.loss_and_grad(&w);
        losses.push(loss);
        proj.step(&hp(0.02, 0.0, step), &mut w, &g, None).unwrap();
    }
    let (first, last) = (losses[0], *losses.last().unwrap());
    assert!(last < 0.02 * first, "{first} -> {last}");
    assert_eq!(proj.svd_count(), 30);
}

/// A tiny GPT, every matrix trained by GaLore (rank 4) and the rest by AdamW: the loss
/// on a repeated sequence falls.
#[test]
fn a_tiny_gpt_learns_with_galore() {
    let cpu = Cpu::new();
    let config = GptConfig {
        vocab_size: 16,
        block_size: 8,
        n_layer: 1,
        n_head: 2,
        n_embd: 16,
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut gpt = Gpt::new(&cpu, config, DType::F32, &mut rng).unwrap();
    let ids = Tensor::from_u32(&cpu, &[1, 2, 3, 4, 5, 6, 7, 8], [1, 8]).unwrap();
    let targets = Tensor::from_i32(&cpu, &[2, 3, 4, 5, 6, 7, 8, 9], [1, 8]).unwrap();
    let c = GaLoreConfig {
        rank: 4,
        update_every: 10,
        scale: 1.0,
    };
    let mut projectors: Vec<Projector<Cpu>> = gpt
        .params()
        .iter()
        .filter(|p| p.value.rank() == 2)
        .map(|p| Projector::new(c, p.value.dims()[0], p.value.dims()[1]).unwrap())
        .collect();
    assert!(projectors.len() >= 4);
    let mut adamw = AdamW::new(AdamWConfig::default());
    let mut losses = Vec::new();
    for step in 1..=40 {
        gpt.zero_grad().unwrap();
        let loss = gpt.forward_loss(&ids, &targets).unwrap();
        losses.push(loss.mean_all().unwrap().to_scalar_f64().unwrap());
        gpt.backward(1.0 / 8.0).unwrap();
        let (matrices, rest): (Vec<&mut Param<Cpu>>, Vec<_>) = gpt
            .params_mut()
            .into_iter()
            .partition(|p| p.value.rank() == 2);
        adamw.step(rest, 1e-2, 1.0).unwrap();
        for (p, proj) in matrices.into_iter().zip(&mut projectors) {
            proj.step(&hp(1e-2, 0.1, step), &mut p.value, &p.grad, None)
                .unwrap();
        }
    }
    assert!(losses[39] < 0.5 * losses[0], "{losses:?}");
}

/// `count` least-squares steps from `start`, refreshing every 3 steps.
fn run_steps(
    proj: &mut Projector<Cpu>,
    problem: &LeastSquares,
    w: &mut Tensor<Cpu>,
    start: u32,
    count: u32,
) {
    for step in start..start + count {
        let (_, g) = problem.loss_and_grad(w);
        proj.step(&hp(0.05, 0.1, step), w, &g, None).unwrap();
    }
}

/// Saving the state after 4 steps and restoring it continues bit for bit as the
/// uninterrupted run: weights and state, across a refresh (steps 7 and 10), both sides.
#[test]
fn a_checkpoint_round_trip_continues_bitwise() {
    let cpu = Cpu::new();
    for (rows, cols) in [(5, 9), (9, 5)] {
        let problem = LeastSquares::new(&cpu, rows, cols, 20);
        let c = config(2, 3);
        let w0 = tensor(&cpu, &f32s(rows * cols, 5), rows, cols);

        let mut whole = Projector::<Cpu>::new(c, rows, cols).unwrap();
        let mut w_whole = w0.deep_clone().unwrap();
        run_steps(&mut whole, &problem, &mut w_whole, 1, 10);

        let mut first = Projector::<Cpu>::new(c, rows, cols).unwrap();
        let mut w = w0.deep_clone().unwrap();
        run_steps(&mut first, &problem, &mut w, 1, 4);
        let saved = first.to_host().unwrap();
        drop(first);
        let w_saved = w.to_vec_f32().unwrap();
        let mut w = tensor(&cpu, &w_saved, rows, cols);
        let mut resumed = Projector::from_host(c, rows, cols, saved, &cpu).unwrap();
        run_steps(&mut resumed, &problem, &mut w, 5, 6);
        assert_eq!(resumed.svd_count(), 2, "refreshes at steps 7 and 10");

        let bits = |t: &Tensor<Cpu>| -> Vec<u32> {
            t.to_vec_f32()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        };
        assert_eq!(bits(&w), bits(&w_whole), "{rows}x{cols}");
        assert_eq!(resumed.to_host().unwrap(), whole.to_host().unwrap());
    }
}

/// A projector that never stepped saves empty vectors and restores to one that has no
/// state; a state for another shape, side or rank is refused with an error naming GaLore.
#[test]
fn restoring_checks_the_state() {
    let cpu = Cpu::new();
    let c = config(2, 3);
    let fresh = Projector::<Cpu>::new(c, 4, 6).unwrap().to_host().unwrap();
    assert!(fresh.projection.is_empty() && fresh.m.is_empty() && fresh.v.is_empty());
    let restored = Projector::from_host(c, 4, 6, fresh, &cpu).unwrap();
    assert_eq!(restored.state_bytes(), 0);

    let mut proj = Projector::<Cpu>::new(c, 4, 6).unwrap();
    let mut w = tensor(&cpu, &f32s(24, 1), 4, 6);
    let g = tensor(&cpu, &f32s(24, 2), 4, 6);
    proj.step(&hp(0.01, 0.0, 1), &mut w, &g, None).unwrap();
    let state = proj.to_host().unwrap();
    assert_eq!(state.side, Side::Left);
    assert_eq!(
        [state.projection.len(), state.m.len(), state.v.len()],
        [4 * 2, 2 * 6, 2 * 6]
    );
    let refused = |c: GaLoreConfig, rows, cols, s: ProjectorState| {
        let e = Projector::from_host(c, rows, cols, s, &cpu).err().unwrap();
        assert!(e.to_string().contains("GaLore"), "{e}");
    };
    refused(c, 6, 4, state.clone()); // the other side
    refused(config(3, 3), 4, 6, state.clone()); // another rank
    refused(c, 4, 7, state.clone()); // another shape
    let mut short = state.clone();
    short.v.pop();
    refused(c, 4, 6, short);
}

/// A rank of 0 or above `min(rows, cols)`, `update_every = 0`, mismatched shapes or
/// dtypes, step 0 and a non-finite gradient are errors naming GaLore, not panics.
#[test]
fn bad_inputs_are_errors_naming_galore() {
    let cpu = Cpu::new();
    let named = |e: brrr_nn::Error| assert!(e.to_string().contains("GaLore"), "{e}");
    for (rank, rows, cols) in [(0, 4, 6), (5, 4, 6), (7, 9, 6), (1, 0, 6)] {
        named(
            Projector::<Cpu>::new(config(rank, 3), rows, cols)
                .err()
                .unwrap(),
        );
    }
    named(Projector::<Cpu>::new(config(2, 0), 4, 6).err().unwrap());

    let mut proj = Projector::<Cpu>::new(config(2, 3), 4, 6).unwrap();
    let mut w = tensor(&cpu, &f32s(24, 1), 4, 6);
    let g = tensor(&cpu, &f32s(24, 2), 4, 6);
    let wrong = tensor(&cpu, &f32s(24, 2), 6, 4);
    named(
        proj.step(&hp(0.01, 0.0, 1), &mut w, &wrong, None)
            .unwrap_err(),
    );
    named(proj.step(&hp(0.01, 0.0, 0), &mut w, &g, None).unwrap_err());
    let mut w16 = w.to_dtype(DType::BF16).unwrap();
    named(
        proj.step(&hp(0.01, 0.0, 1), &mut w16, &g, None)
            .unwrap_err(),
    );
    named(proj.project(&g).unwrap_err()); // no projection yet
    let mut bad = f32s(24, 2);
    bad[5] = f32::NAN;
    let nan = tensor(&cpu, &bad, 4, 6);
    named(
        proj.step(&hp(0.01, 0.0, 1), &mut w, &nan, None)
            .unwrap_err(),
    );
    assert_eq!(proj.svd_count(), 0);
    // The refused steps changed nothing; a good one still works.
    proj.step(&hp(0.01, 0.0, 1), &mut w, &g, None).unwrap();
    assert_eq!(proj.svd_count(), 1);
}
