//! Saved activations are kept per micro-batch: forwards and backwards of several
//! micro-batches may interleave (as pipeline schedules do) and each backward still uses
//! its own micro-batch's activations.

use brrr_cpu::CpuBackend;
use brrr_nn::gradcheck::{max_rel_error, numeric_grad, probe_indices};
use brrr_nn::{DType, Gpt, GptConfig, MicroBatch, Module, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn tiny_config() -> GptConfig {
    GptConfig {
        vocab_size: 11,
        block_size: 6,
        n_layer: 2,
        n_head: 2,
        n_embd: 8,
    }
}

const B: usize = 2;
const T: usize = 5;

type Batch = (Tensor<CpuBackend>, Tensor<CpuBackend>);

/// Micro-batch `seed`'s ids and targets, `[B, T]`.
fn batch(be: &CpuBackend, seed: u64) -> Batch {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let v = tiny_config().vocab_size;
    let ids: Vec<u32> = (0..B * T).map(|_| rng.random_range(0..v as u32)).collect();
    let tg: Vec<i32> = (0..B * T).map(|_| rng.random_range(0..v as i32)).collect();
    (
        Tensor::from_u32(be, &ids, [B, T]).unwrap(),
        Tensor::from_i32(be, &tg, [B, T]).unwrap(),
    )
}

fn model(be: &CpuBackend, dtype: DType) -> Gpt<CpuBackend> {
    let mut gpt = Gpt::new(be, tiny_config(), dtype, &mut ChaCha8Rng::seed_from_u64(3)).unwrap();
    gpt.zero_grad().unwrap();
    gpt
}

#[derive(Clone, Copy, Debug)]
enum Step {
    F(u32),
    B(u32),
}

/// Each micro-batch's per-position losses as bits, by micro-batch index.
type Losses = Vec<(u32, Vec<u64>)>;

/// Runs the steps on a fresh model (micro-batch `i` is `batch(i)`, each backward with
/// the loss scale of the mean over both micro-batches); returns every parameter's
/// gradient and each micro-batch's per-position losses, as raw bits.
fn run(dtype: DType, steps: &[Step]) -> (Vec<Vec<u64>>, Losses) {
    let be = CpuBackend::new();
    let mut gpt = model(&be, dtype);
    let dloss = 1.0 / (2 * B * T) as f32;
    let mut losses = Vec::new();
    for &s in steps {
        match s {
            Step::F(i) => {
                let (ids, tg) = batch(&be, u64::from(i));
                let l = gpt.forward_loss_mb(MicroBatch(i), &ids, &tg).unwrap();
                losses.push((i, bits(&l)));
            }
            Step::B(i) => gpt.backward_mb(MicroBatch(i), dloss).unwrap(),
        }
    }
    assert!(gpt.in_flight().is_empty(), "{steps:?} left work in flight");
    losses.sort_by_key(|(i, _)| *i);
    let grads = gpt.params().iter().map(|p| bits(&p.grad)).collect();
    (grads, losses)
}

/// A tensor's values as bits, so that equality is bitwise (f64 holds f32 exactly).
fn bits(t: &Tensor<CpuBackend>) -> Vec<u64> {
    t.to_vec_f64()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

fn assert_bitwise(a: &[Step], b: &[Step]) {
    let (ga, la) = run(DType::F32, a);
    let (gb, lb) = run(DType::F32, b);
    assert_eq!(la, lb, "losses of {a:?} vs {b:?}");
    let names: Vec<String> = model(&CpuBackend::new(), DType::F32)
        .params()
        .iter()
        .map(|p| p.name.clone())
        .collect();
    for ((x, y), name) in ga.iter().zip(&gb).zip(&names) {
        assert!(
            x.iter().any(|&v| f64::from_bits(v) != 0.0),
            "{name}: zero gradient"
        );
        assert_eq!(x, y, "{name}: gradient of {a:?} differs from {b:?}");
    }
}

use Step::{B as Bw, F as Fw};

/// GPipe-like order, backwards reversed: F1 F2 B2 B1 equals F2 B2 F1 B1.
#[test]
fn interleaved_reverse_backward_matches_sequential() {
    assert_bitwise(&[Fw(1), Fw(2), Bw(2), Bw(1)], &[Fw(2), Bw(2), Fw(1), Bw(1)]);
}

/// GPipe order: F1 F2 B1 B2 equals F1 B1 F2 B2 (same backward order, so the gradients
/// accumulate in the same order).
#[test]
fn all_forwards_then_backwards_matches_sequential() {
    assert_bitwise(&[Fw(1), Fw(2), Bw(1), Bw(2)], &[Fw(1), Bw(1), Fw(2), Bw(2)]);
}

/// The two micro-batches really differ, so a backward that used the other one's
/// activations would change the gradients (the tests above can fail).
#[test]
fn micro_batches_have_different_gradients() {
    let (g1, _) = run(DType::F32, &[Fw(1), Bw(1)]);
    let (g2, _) = run(DType::F32, &[Fw(2), Bw(2)]);
    let differing = g1.iter().zip(&g2).filter(|(a, b)| a != b).count();
    assert_eq!(
        differing,
        g1.len(),
        "every parameter's gradient should differ"
    );
}

#[test]
fn backward_without_its_forward_is_an_error() {
    let be = CpuBackend::new();
    let mut gpt = model(&be, DType::F32);
    let (ids, tg) = batch(&be, 1);
    gpt.forward_loss_mb(MicroBatch(1), &ids, &tg).unwrap();
    let e = gpt.backward_mb(MicroBatch(7), 0.1).unwrap_err().to_string();
    assert!(
        e.contains("micro-batch 7") && e.contains("before forward"),
        "{e}"
    );
    // Micro-batch 1 is untouched by the failed call.
    assert_eq!(gpt.in_flight(), vec![MicroBatch(1)]);
    gpt.backward_mb(MicroBatch(1), 0.1).unwrap();
    let e = gpt.backward_mb(MicroBatch(1), 0.1).unwrap_err().to_string();
    assert!(e.contains("micro-batch 1"), "a second backward: {e}");
    // The old entry points are micro-batch 0.
    let e = gpt.backward(0.1).unwrap_err().to_string();
    assert!(e.contains("micro-batch 0"), "{e}");
}

#[test]
fn clear_saved_drops_every_micro_batch() {
    let be = CpuBackend::new();
    let mut gpt = model(&be, DType::F64);
    for i in 0..3 {
        let (ids, tg) = batch(&be, i);
        gpt.forward_loss_mb(MicroBatch(i as u32), &ids, &tg)
            .unwrap();
    }
    assert_eq!(gpt.in_flight().len(), 3);
    gpt.clear_saved();
    assert!(gpt.in_flight().is_empty());
    let dy = Tensor::from_f64(&be, &vec![0.5; B * T * 8], [B, T, 8], DType::F64).unwrap();
    for i in 0..3 {
        let e = gpt.backward_mb(MicroBatch(i), 0.1).unwrap_err().to_string();
        assert!(e.contains("before forward"), "{e}");
        for block in &mut gpt.h {
            let e = block.backward(MicroBatch(i), &dy).unwrap_err();
            assert!(e.to_string().contains("before forward"), "{e}");
        }
    }
}

/// In f64, the interleaved order F1 F2 B2 B1 gives the finite-difference gradient of
/// the mean loss over both micro-batches.
#[test]
fn interleaved_gradient_matches_finite_differences() {
    let be = CpuBackend::new();
    let mut gpt = model(&be, DType::F64);
    let batches = [batch(&be, 1), batch(&be, 2)];
    let n = (2 * B * T) as f64;
    for (i, (ids, tg)) in batches.iter().enumerate() {
        gpt.forward_loss_mb(MicroBatch(i as u32), ids, tg).unwrap();
    }
    for i in [1, 0] {
        gpt.backward_mb(MicroBatch(i), (1.0 / n) as f32).unwrap();
    }
    let loss_of = |gpt: &mut Gpt<CpuBackend>| -> f64 {
        let mut total = 0.0;
        for (ids, tg) in &batches {
            total += gpt
                .forward_loss(ids, tg)
                .unwrap()
                .to_vec_f64()
                .unwrap()
                .iter()
                .sum::<f64>();
        }
        gpt.clear_saved();
        total / n
    };
    // dloss = 1/n is rounded to f32; allow for it as gradcheck.rs does.
    let dloss_rel = ((1.0 / n) as f32 as f64 * n - 1.0).abs();
    let count = gpt.params().len();
    for pi in 0..count {
        let (name, shape, p0, grad) = {
            let p = &gpt.params()[pi];
            let (v, g) = (p.value.to_vec_f64().unwrap(), p.grad.to_vec_f64().unwrap());
            (p.name.clone(), p.value.shape().clone(), v, g)
        };
        let idx = probe_indices(p0.len(), 3);
        let num = numeric_grad(
            &mut |v: &[f64]| {
                gpt.params_mut()[pi].value =
                    Tensor::from_f64(&be, v, shape.clone(), DType::F64).unwrap();
                loss_of(&mut gpt)
            },
            &p0,
            &idx,
            1e-5,
        );
        gpt.params_mut()[pi].value = Tensor::from_f64(&be, &p0, shape.clone(), DType::F64).unwrap();
        let ana: Vec<f64> = idx.iter().map(|&i| grad[i]).collect();
        let err = max_rel_error(&ana, &num, 1e-6);
        assert!(
            err < 1e-4 + 2.0 * dloss_rel,
            "{name}: rel error {err:e}\n{ana:?}\n{num:?}"
        );
    }
}
