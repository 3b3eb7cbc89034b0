//! brrr's crates used from a program of your own, outside brrr's workspace:
//!
//! 1. brrr-tensor + brrr-cpu + brrr-nn: a small GPT trained in this file's own loop;
//! 2. brrr-perf: its memory estimate, checked against the bytes the model really holds;
//! 3. brrr-collectives: data parallelism by hand, two threads whose averaged half-batch
//!    gradients (an all-reduce) match one thread's full-batch gradient.
//!
//! Run it with `cargo run` in this directory; it exits non-zero if any check fails.

use brrr_collectives::{CollError, ReduceOp, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, DType, Gpt, GptConfig, Module};
use brrr_perf::memory::{Optimizer, Precision, model_state_bytes};
use brrr_tensor::Tensor;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::error::Error;

type Res<T> = Result<T, Box<dyn Error>>;

const BATCH: usize = 4;
const SEQ: usize = 8;

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 11,
        block_size: SEQ,
        n_layer: 2,
        n_head: 2,
        n_embd: 32,
    }
}

/// A batch of a sequence a GPT can learn: each token is the previous one plus 3,
/// modulo the vocabulary, from random starting points. Returns (inputs, targets).
fn batch(rng: &mut impl Rng, rows: usize) -> (Vec<u32>, Vec<i32>) {
    let v = config().vocab_size as u32;
    let (mut ids, mut targets) = (Vec::new(), Vec::new());
    for _ in 0..rows {
        let start = rng.random_range(0..v);
        for t in 0..SEQ as u32 {
            ids.push((start + 3 * t) % v);
            targets.push(((start + 3 * (t + 1)) % v) as i32);
        }
    }
    (ids, targets)
}

/// One forward and backward of the mean loss over `ids`; returns that loss.
fn forward_backward(gpt: &mut Gpt<CpuBackend>, ids: &[u32], targets: &[i32]) -> Res<f32> {
    let be = gpt.wte.weight.value.backend().clone();
    let rows = ids.len() / SEQ;
    let ids = Tensor::from_u32(&be, ids, [rows, SEQ])?;
    let targets = Tensor::from_i32(&be, targets, [rows, SEQ])?;
    let losses = gpt.forward_loss(&ids, &targets)?.to_vec_f32()?;
    gpt.backward(1.0 / losses.len() as f32)?;
    Ok(losses.iter().sum::<f32>() / losses.len() as f32)
}

/// Trains in our own loop and returns the model, its optimizer and the first and last
/// losses.
fn train() -> Res<(Gpt<CpuBackend>, AdamW<CpuBackend>, f32, f32)> {
    let be = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut gpt = Gpt::new(&be, config(), DType::F32, &mut rng)?;
    let mut adam = AdamW::new(AdamWConfig::default());
    let (mut first, mut last) = (f32::NAN, f32::NAN);
    for step in 0..80 {
        let (ids, targets) = batch(&mut rng, BATCH);
        gpt.zero_grad()?;
        last = forward_backward(&mut gpt, &ids, &targets)?;
        if step == 0 {
            first = last;
        }
        adam.step(gpt.params_mut(), 1e-2, 1.0)?;
    }
    Ok((gpt, adam, first, last))
}

/// brrr-perf's model-state estimate for fp32 AdamW without ZeRO, against the bytes of
/// the weights, gradients and both moments this model holds.
fn memory(gpt: &Gpt<CpuBackend>, adam: &AdamW<CpuBackend>) -> Res<(f64, usize)> {
    let params = gpt.num_params() as f64;
    let estimate = model_state_bytes(params, Precision::Fp32, Optimizer::Adam, 0, 1)?.total();
    let held: usize = gpt
        .params()
        .iter()
        .map(|p| p.value.size_in_bytes() + p.grad.size_in_bytes())
        .chain(std::iter::once(adam.state_bytes()))
        .sum();
    Ok((estimate, held))
}

/// Every gradient of the model, flattened in parameter order.
fn grads(gpt: &Gpt<CpuBackend>) -> Res<Vec<f32>> {
    let mut out = Vec::new();
    for p in gpt.params() {
        out.extend(p.grad.to_vec_f32()?);
    }
    Ok(out)
}

/// An error of this program inside a rank, as the collectives' error type.
fn on_rank(e: Box<dyn Error>) -> CollError {
    CollError::Invalid {
        op: "data-parallel rank",
        msg: e.to_string(),
    }
}

/// The gradient of one batch's mean loss, on one thread and on two data-parallel ranks
/// (half the rows each, then an averaging all-reduce); returns the largest difference
/// relative to the largest gradient.
fn data_parallel() -> Res<f32> {
    let (ids, targets) = batch(&mut ChaCha8Rng::seed_from_u64(2), BATCH);
    let fresh = || {
        Gpt::new(
            &CpuBackend::new(),
            config(),
            DType::F32,
            &mut ChaCha8Rng::seed_from_u64(3),
        )
    };
    let mut whole = fresh()?;
    forward_backward(&mut whole, &ids, &targets)?;
    let reference = grads(&whole)?;

    let half = ids.len() / 2;
    let ranks = run_in_process(2, |comm| {
        let r = comm.rank();
        let mut gpt = fresh()?;
        let rows = r * half..(r + 1) * half;
        forward_backward(&mut gpt, &ids[rows.clone()], &targets[rows]).map_err(on_rank)?;
        let mut g = grads(&gpt).map_err(on_rank)?;
        comm.all_reduce(&mut g, ReduceOp::Avg)?;
        Ok(g)
    });
    let scale = reference.iter().fold(0f32, |m, x| m.max(x.abs()));
    let mut worst = 0f32;
    for rank in ranks {
        for (a, b) in rank?.iter().zip(&reference) {
            worst = worst.max((a - b).abs() / scale);
        }
    }
    Ok(worst)
}

fn main() -> Res<()> {
    let (gpt, adam, first, last) = train()?;
    println!(
        "train: loss {first:.3} -> {last:.3} in 80 steps (uniform: {:.3})",
        (11f32).ln()
    );
    if last >= 0.25 * first {
        return Err(format!("the loss did not fall to a quarter: {first} -> {last}").into());
    }

    let (estimate, held) = memory(&gpt, &adam)?;
    println!(
        "memory: brrr-perf estimates {estimate} bytes of model states; the model holds {held}"
    );
    if estimate != held as f64 {
        return Err("the estimate and the bytes held differ".into());
    }

    let worst = data_parallel()?;
    println!(
        "data parallel: 2 ranks' averaged gradients match one rank's to {worst:.1e} (relative)"
    );
    if worst > 1e-5 {
        return Err(format!("data-parallel gradients differ by {worst:e}").into());
    }
    println!("ok");
    Ok(())
}
