//! The fused attention kernel ([`Tensor::attention`], CPU) against a plain f64
//! reference, against the composite path inside a whole GPT, across thread counts, and
//! with micro-batches interleaved.

use brrr_cpu::CpuBackend;
use brrr_nn::{DType, Gpt, GptConfig, MicroBatch, Module, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// `y`, `lse` and `dqkv` of causal attention in f64, straight from the definitions
/// (`AttentionSpec`'s reference semantics and the softmax's chain rule).
fn reference(
    qkv: &[f32],
    dy: &[f32],
    (b_, t_, h_, d_): (usize, usize, usize, usize),
    scale: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let hd = h_ * d_;
    let at = |b: usize, i: usize, part: usize, h: usize, d: usize| {
        f64::from(qkv[((b * t_ + i) * 3 + part) * hd + h * d_ + d])
    };
    let mut y = vec![0.0; b_ * t_ * hd];
    let mut lse = vec![0.0; b_ * t_ * h_];
    let mut dqkv = vec![0.0; b_ * t_ * 3 * hd];
    for b in 0..b_ {
        for h in 0..h_ {
            // p[i][j] for j <= i.
            let mut p = vec![vec![0.0; t_]; t_];
            for i in 0..t_ {
                let s: Vec<f64> = (0..=i)
                    .map(|j| {
                        scale
                            * (0..d_)
                                .map(|d| at(b, i, 0, h, d) * at(b, j, 1, h, d))
                                .sum::<f64>()
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let l: f64 = s.iter().map(|x| (x - m).exp()).sum();
                lse[(b * t_ + i) * h_ + h] = m + l.ln();
                for j in 0..=i {
                    p[i][j] = (s[j] - m).exp() / l;
                    for d in 0..d_ {
                        y[(b * t_ + i) * hd + h * d_ + d] += p[i][j] * at(b, j, 2, h, d);
                    }
                }
            }
            let g = |i: usize, d: usize| f64::from(dy[(b * t_ + i) * hd + h * d_ + d]);
            let dq_at =
                |i: usize, part: usize, d: usize| ((b * t_ + i) * 3 + part) * hd + h * d_ + d;
            for i in 0..t_ {
                let dp: Vec<f64> = (0..=i)
                    .map(|j| (0..d_).map(|d| g(i, d) * at(b, j, 2, h, d)).sum())
                    .collect();
                let delta: f64 = (0..=i).map(|j| p[i][j] * dp[j]).sum();
                for j in 0..=i {
                    let ds = p[i][j] * (dp[j] - delta);
                    for d in 0..d_ {
                        dqkv[dq_at(i, 0, d)] += scale * ds * at(b, j, 1, h, d);
                        dqkv[dq_at(j, 1, d)] += scale * ds * at(b, i, 0, h, d);
                        dqkv[dq_at(j, 2, d)] += p[i][j] * g(i, d);
                    }
                }
            }
        }
    }
    (y, lse, dqkv)
}

fn max_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(&g, &w)| (f64::from(g) - w).abs() / (1.0 + w.abs()))
        .fold(0.0, f64::max)
}

struct Run {
    y: Vec<f32>,
    lse: Vec<f32>,
    dqkv: Vec<f32>,
}

fn run(be: &CpuBackend, qkv: &[f32], dy: &[f32], dims: (usize, usize, usize, usize)) -> Run {
    let (b, t, h, d) = dims;
    let scale = 1.0 / (d as f32).sqrt();
    let qkv = Tensor::from_f32(be, qkv, [b, t, 3 * h * d], DType::F32).unwrap();
    let dy = Tensor::from_f32(be, dy, [b, t, h * d], DType::F32).unwrap();
    let out = qkv.attention(h, scale).unwrap();
    let dqkv = qkv.attention_backward(h, scale, &out, &dy).unwrap();
    Run {
        y: out.y.to_vec_f32().unwrap(),
        lse: out.lse.to_vec_f32().unwrap(),
        dqkv: dqkv.to_vec_f32().unwrap(),
    }
}

/// Sizes around the kernel's 64-row blocks: one short block, exactly one, several with
/// a short last one; one head and several; odd head widths.
#[test]
fn matches_the_f64_reference() {
    let be = CpuBackend::new();
    for (i, dims) in [(1, 1, 1, 4), (2, 7, 3, 5), (1, 64, 2, 8), (2, 130, 3, 16)]
        .into_iter()
        .enumerate()
    {
        let (b, t, h, d) = dims;
        let qkv = random(b * t * 3 * h * d, 10 + i as u64);
        let dy = random(b * t * h * d, 20 + i as u64);
        let got = run(&be, &qkv, &dy, dims);
        let (y, lse, dqkv) = reference(&qkv, &dy, dims, 1.0 / (d as f64).sqrt());
        let errs = [
            max_err(&got.y, &y),
            max_err(&got.lse, &lse),
            max_err(&got.dqkv, &dqkv),
        ];
        // f32 sums of at most 130 terms of size ~1: a few ulps times the length.
        for (what, e) in ["y", "lse", "dqkv"].iter().zip(errs) {
            assert!(e < 1e-5, "{dims:?}: {what} off by {e:e}");
        }
    }
}

/// Tasks are cut by sizes only, so one thread and three give the same bits.
#[test]
fn bitwise_identical_across_thread_counts() {
    let dims = (3, 100, 2, 8);
    let (b, t, h, d) = dims;
    let qkv = random(b * t * 3 * h * d, 1);
    let dy = random(b * t * h * d, 2);
    let one = run(&CpuBackend::with_threads(1).unwrap(), &qkv, &dy, dims);
    let three = run(&CpuBackend::with_threads(3).unwrap(), &qkv, &dy, dims);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&one.y), bits(&three.y));
    assert_eq!(bits(&one.lse), bits(&three.lse));
    assert_eq!(bits(&one.dqkv), bits(&three.dqkv));
}

#[test]
fn bad_inputs_are_errors_that_name_the_op() {
    let be = CpuBackend::new();
    let qkv16 = Tensor::from_f32(&be, &random(2 * 4 * 12, 3), [2, 4, 12], DType::F16).unwrap();
    let e = qkv16.attention(2, 0.5).unwrap_err().to_string();
    assert!(e.contains("attention"), "{e}");
    let qkv = Tensor::from_f32(&be, &random(2 * 4 * 12, 3), [2, 4, 12], DType::F32).unwrap();
    let e = qkv.attention(5, 0.5).unwrap_err().to_string();
    assert!(e.contains("attention") && e.contains("5 heads"), "{e}");
    let e = qkv.attention(2, f32::NAN).unwrap_err().to_string();
    assert!(e.contains("scale"), "{e}");
    let out = qkv.attention(2, 0.5).unwrap();
    let dy = Tensor::from_f32(&be, &random(2 * 3 * 6, 4), [2, 3, 6], DType::F32).unwrap();
    let e = qkv
        .attention_backward(2, 0.5, &out, &dy)
        .unwrap_err()
        .to_string();
    assert!(e.contains("attention_backward"), "{e}");
}

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 13,
        block_size: 70,
        n_layer: 2,
        n_head: 3,
        n_embd: 24,
    }
}

const B: usize = 2;
const T: usize = 70;

fn batch(be: &CpuBackend, seed: u64) -> (Tensor<CpuBackend>, Tensor<CpuBackend>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let v = config().vocab_size;
    let ids: Vec<u32> = (0..B * T).map(|_| rng.random_range(0..v as u32)).collect();
    let tg: Vec<i32> = (0..B * T).map(|_| rng.random_range(0..v as i32)).collect();
    (
        Tensor::from_u32(be, &ids, [B, T]).unwrap(),
        Tensor::from_i32(be, &tg, [B, T]).unwrap(),
    )
}

/// Micro-batches `order` (`(i, forward?)`) through a fresh GPT; returns the losses by
/// micro-batch and every parameter's gradient.
fn train(fused: bool, order: &[(u32, bool)]) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let be = CpuBackend::new();
    let mut gpt = Gpt::new(&be, config(), DType::F32, &mut ChaCha8Rng::seed_from_u64(7)).unwrap();
    gpt.set_fused_attention(fused);
    gpt.zero_grad().unwrap();
    let mut losses = vec![Vec::new(); 3];
    for &(i, fwd) in order {
        if fwd {
            let (ids, tg) = batch(&be, u64::from(i));
            let l = gpt.forward_loss_mb(MicroBatch(i), &ids, &tg).unwrap();
            losses[i as usize] = l.to_vec_f32().unwrap();
        } else {
            gpt.backward_mb(MicroBatch(i), 1.0 / (2 * B * T) as f32)
                .unwrap();
        }
    }
    let grads = gpt
        .params()
        .iter()
        .map(|p| p.grad.to_vec_f32().unwrap())
        .collect();
    (losses, grads)
}

/// A whole GPT with the fused core gives the composite path's losses and gradients
/// to f32 rounding (70 positions: a full 64-row block and a short one).
#[test]
fn gpt_with_fused_attention_matches_the_composite_path() {
    let order = [(1, true), (1, false)];
    let (l0, g0) = train(false, &order);
    let (l1, g1) = train(true, &order);
    let flat = |v: &[Vec<f32>]| v.concat();
    let worst = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs() / (1e-3 + y.abs()))
            .fold(0.0f32, f32::max)
    };
    let (el, eg) = (worst(&flat(&l1), &flat(&l0)), worst(&flat(&g1), &flat(&g0)));
    assert!(el < 1e-5, "losses differ by {el:e}");
    assert!(
        eg < 1e-3,
        "gradients differ by {eg:e} (relative, floor 1e-3)"
    );
    // Not trivially equal: the fused path really ran (different summation order).
    assert_ne!(flat(&g0), flat(&g1), "the fused path did not run");
}

/// F1 F2 B2 B1 gives the gradients of F2 B2 F1 B1 bit for bit on the fused path too.
#[test]
fn fused_micro_batches_interleave() {
    let (la, ga) = train(true, &[(1, true), (2, true), (2, false), (1, false)]);
    let (lb, gb) = train(true, &[(2, true), (2, false), (1, true), (1, false)]);
    assert_eq!(la, lb);
    assert_eq!(ga, gb);
}
