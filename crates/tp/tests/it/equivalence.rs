//! Tensor- (and sequence-, and data-) parallel training against one device: the same
//! seed, the same global batches, the same losses and gradients within a stated
//! tolerance. In-process ranks (threads), a tiny GPT, three steps.

use brrr_backend::DType;
use brrr_collectives::{ParallelGroups, ParallelLayout, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, Gpt, GptConfig, Module, Tensor, clip_grad_norm};
use brrr_tp::{TpConfig, TpTrainer, shard::shard_by_name};
use brrr_train::{Batch, TrainConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Relative tolerance on the losses: the shards sum the same products in another order
/// (f32), and the vocabulary-parallel loss adds its terms differently from the fused
/// kernel.
const LOSS_RTOL: f64 = 1e-5;
/// Gradients: `|g_tp − g_1| ≤ GRAD_ATOL + GRAD_RTOL · max|g_1|` per parameter.
const GRAD_ATOL: f32 = 1e-6;
const GRAD_RTOL: f32 = 1e-4;
const STEPS: usize = 3;
/// Weights after `STEPS` AdamW steps, gathered from the shards into a checkpoint.
const WEIGHT_ATOL: f32 = 1e-4;

fn config() -> TrainConfig {
    TrainConfig {
        model: GptConfig {
            vocab_size: 256,
            block_size: 16,
            n_layer: 2,
            n_head: 4,
            n_embd: 32,
        },
        steps: 10,
        batch_size: 4,
        seq_len: 8,
        grad_accum: 1,
        warmup_steps: 2,
        lr: 1e-2,
        ..TrainConfig::default()
    }
}

fn batches(cfg: &TrainConfig) -> Vec<Batch> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let n = cfg.batch_size * cfg.seq_len;
    let v = cfg.model.vocab_size as u32;
    (0..STEPS)
        .map(|_| Batch {
            inputs: (0..n).map(|_| rng.random_range(0..v)).collect(),
            targets: (0..n).map(|_| rng.random_range(0..v)).collect(),
            batch: cfg.batch_size,
            seq: cfg.seq_len,
            mask: None,
        })
        .collect()
}

/// Host copies of the single-device gradients of the first batch, and the losses of
/// `STEPS` steps (the same step as `brrr-train`'s `Trainer`: mean loss, clip, AdamW).
struct Reference {
    grads: BTreeMap<String, (Vec<f32>, Vec<usize>)>,
    losses: Vec<f64>,
    /// The weights after the last step.
    weights: BTreeMap<String, Vec<f32>>,
}

fn reference(cfg: &TrainConfig, data: &[Batch]) -> Reference {
    let be = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut gpt = Gpt::new(&be, cfg.model.clone(), DType::F32, &mut rng).unwrap();
    let mut opt = AdamW::new(AdamWConfig {
        weight_decay: cfg.weight_decay,
        ..AdamWConfig::default()
    });
    let (mut grads, mut losses) = (BTreeMap::new(), Vec::new());
    for (step, b) in data.iter().enumerate() {
        let dims = [b.batch, b.seq];
        let ids = Tensor::from_u32(&be, &b.inputs, dims).unwrap();
        let t: Vec<i32> = b.targets.iter().map(|&t| t as i32).collect();
        let targets = Tensor::from_i32(&be, &t, dims).unwrap();
        gpt.zero_grad().unwrap();
        let l = gpt.forward_loss(&ids, &targets).unwrap();
        losses.push(l.mean_all().unwrap().to_scalar_f64().unwrap());
        gpt.backward(1.0 / (b.batch * b.seq) as f32).unwrap();
        if step == 0 {
            for p in gpt.params() {
                let g = (p.grad.to_vec_f32().unwrap(), p.grad.dims().to_vec());
                grads.insert(p.name.clone(), g);
            }
        }
        let (_, coef) = clip_grad_norm(&gpt.params(), cfg.grad_clip).unwrap();
        let lr = cfg.schedule().lr(step as u64) as f32;
        opt.step(gpt.params_mut(), lr, coef).unwrap();
    }
    let weights = gpt
        .params()
        .iter()
        .map(|p| (p.name.clone(), p.value.to_vec_f32().unwrap()))
        .collect();
    Reference {
        grads,
        losses,
        weights,
    }
}

/// Runs `dp × tp` ranks; each checks its gradient shards against the reference's and
/// returns its losses.
fn run(dp: usize, tp: usize, sp: bool) {
    let cfg = config();
    let data = batches(&cfg);
    let want = reference(&cfg, &data);
    let layout = ParallelLayout { dp, tp, pp: 1 };
    let results = run_in_process(dp * tp, |world| {
        let be = CpuBackend::new();
        let groups = ParallelGroups::new(world, layout)?;
        let (tp_rank, n_head) = (groups.tp.rank(), cfg.model.n_head);
        let mut trainer = TpTrainer::new(&be, cfg.clone(), TpConfig { tp, sp }, groups)?;
        trainer.forward_backward(&data[..1])?;
        trainer.finish_grads()?;
        let mut checked = 0;
        for p in trainer.model.params() {
            let (g, dims) = &want.grads[&p.name];
            let full = Tensor::from_f32(&be, g, dims.clone(), DType::F32)?;
            let expect = shard_by_name(&p.name, &full, n_head, tp_rank, tp)?.to_vec_f32()?;
            let got = p.grad.to_vec_f32()?;
            assert_eq!(got.len(), expect.len(), "{}", p.name);
            let scale = expect.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            for (i, (a, b)) in got.iter().zip(&expect).enumerate() {
                assert!(
                    (a - b).abs() <= GRAD_ATOL + GRAD_RTOL * scale,
                    "{} [{i}]: tp {a} vs one device {b} (max |g| {scale})",
                    p.name
                );
            }
            checked += 1;
        }
        assert_eq!(checked, want.grads.len(), "every parameter compared");
        let mut losses = Vec::new();
        for b in &data {
            losses.push(f64::from(trainer.step(std::slice::from_ref(b))?.loss));
        }
        // The gathered checkpoint state is the single-device model's.
        let state = trainer.state(String::new(), String::new())?;
        assert_eq!(state.params.len(), want.weights.len());
        for p in &state.params {
            let got = p.value.to_f32();
            let expect = &want.weights[&p.name];
            assert_eq!(got.len(), expect.len(), "{}", p.name);
            for (a, b) in got.iter().zip(expect) {
                assert!((a - b).abs() <= WEIGHT_ATOL, "{}: {a} vs {b}", p.name);
            }
        }
        Ok(losses)
    });
    for (rank, r) in results.into_iter().enumerate() {
        let losses = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        for (step, (a, b)) in losses.iter().zip(&want.losses).enumerate() {
            assert!(
                (a - b).abs() <= LOSS_RTOL * b.abs(),
                "rank {rank} step {step}: loss {a} vs one device {b}"
            );
        }
    }
}

#[test]
fn tp2_matches_one_device() {
    run(1, 2, false);
}

#[test]
fn tp2_sequence_parallel_matches_one_device() {
    run(1, 2, true);
}

#[test]
fn tp4_matches_one_device() {
    run(1, 4, false);
}

#[test]
fn tp4_sequence_parallel_matches_one_device() {
    run(1, 4, true);
}

#[test]
fn tp2_dp2_matches_one_device() {
    run(2, 2, false);
}

#[test]
fn tp2_dp2_sequence_parallel_matches_one_device() {
    run(2, 2, true);
}

/// `--checkpoint` under `--tp` (with and without `--sp`, and `--dp 2 --tp 2`): the
/// shard is walked by brrr-checkpoint's executor with one device's plan, so each rank's
/// losses, gradient norms and weights are bit for bit those of the same layout keeping
/// every activation, and the step's activation peak is lower.
#[test]
fn recomputation_changes_no_bit_and_lowers_the_peak() {
    let mut cfg = config();
    cfg.model.n_layer = 4;
    cfg.grad_accum = 2;
    let data = batches(&cfg);
    let steps: Vec<&[Batch]> = data.chunks(2).filter(|c| c.len() == 2).collect();
    let run = |cfg: &TrainConfig, dp: usize, tp: usize, sp: bool| {
        let layout = ParallelLayout { dp, tp, pp: 1 };
        run_in_process(dp * tp, |world| {
            let be = CpuBackend::new();
            let groups = ParallelGroups::new(world, layout)?;
            let mut t = TpTrainer::new(&be, cfg.clone(), TpConfig { tp, sp }, groups)?;
            let mut stats = Vec::new();
            for s in &steps {
                let st = t.step(s)?;
                stats.push((st.loss, st.grad_norm, st.activation_peak_bytes));
            }
            let weights: Vec<Vec<f32>> = t
                .model
                .params()
                .iter()
                .map(|p| p.value.to_vec_f32())
                .collect::<brrr_backend::Result<_>>()?;
            Ok((stats, weights))
        })
        .into_iter()
        .map(|r| r.unwrap())
        .collect::<Vec<_>>()
    };
    for (dp, tp, sp) in [(1, 2, false), (1, 2, true), (2, 2, false)] {
        let plain = run(&cfg, dp, tp, sp);
        for strategy in ["every:2", "selective"] {
            let mut rc = cfg.clone();
            rc.checkpoint = strategy.parse().unwrap();
            let got = run(&rc, dp, tp, sp);
            let what = format!("{strategy}, dp {dp} tp {tp} sp {sp}");
            for ((a, wa), (b, wb)) in plain.iter().zip(&got) {
                assert_eq!(wa, wb, "{what}: weights");
                for ((la, na, pa), (lb, nb, pb)) in a.iter().zip(b) {
                    assert_eq!((la, na), (lb, nb), "{what}: loss and norm");
                    assert!(pb < pa, "{what}: activation peak {pb} B vs {pa} B");
                }
            }
        }
    }
}

/// `--dp 2 --tp 2 --zero 1`: each data-parallel rank keeps the moments of about half
/// of its shard's parameters and broadcasts what it updated, so losses, norms, weights
/// and the gathered checkpoint (moments included) are bit for bit `--zero 0`'s; small
/// gradient buckets (`--bucket-mb`) change no bit either with two replicas (a sum of
/// two is the same in any order).
#[test]
fn zero1_and_buckets_change_no_bit() {
    let mut cfg = config();
    cfg.grad_accum = 1;
    let data = batches(&cfg);
    let run = |cfg: &TrainConfig, sp: bool| {
        let layout = ParallelLayout {
            dp: 2,
            tp: 2,
            pp: 1,
        };
        run_in_process(4, |world| {
            let be = CpuBackend::new();
            let groups = ParallelGroups::new(world, layout)?;
            let mut t = TpTrainer::new(&be, cfg.clone(), TpConfig { tp: 2, sp }, groups)?;
            let mut stats = Vec::new();
            for b in &data {
                let st = t.step(std::slice::from_ref(b))?;
                stats.push((st.loss, st.grad_norm));
            }
            let moments = t.opt_moments();
            let state = t.state(String::new(), String::new())?;
            let saved: Vec<_> = state
                .params
                .iter()
                .map(|p| {
                    (
                        p.value.to_f32(),
                        p.moments.as_ref().map(|(m, v)| (m.to_f32(), v.to_f32())),
                    )
                })
                .collect();
            Ok((stats, saved, moments))
        })
        .into_iter()
        .map(|r| r.unwrap())
        .collect::<Vec<_>>()
    };
    for sp in [false, true] {
        let plain = run(&cfg, sp);
        let mut z = cfg.clone();
        z.layout.zero = 1;
        let sharded = run(&z, sp);
        let mut b = cfg.clone();
        b.layout.bucket_mb = Some(0.001);
        let bucketed = run(&b, sp);
        for (r, ((a, sa, ma), ((z, sz, mz), (b, sb, _)))) in
            plain.iter().zip(sharded.iter().zip(&bucketed)).enumerate()
        {
            assert_eq!(a, z, "sp {sp} rank {r}: --zero 1 losses and norms");
            assert_eq!(sa, sz, "sp {sp} rank {r}: --zero 1 checkpoint");
            assert_eq!(a, b, "sp {sp} rank {r}: --bucket-mb losses and norms");
            assert_eq!(sa, sb, "sp {sp} rank {r}: --bucket-mb checkpoint");
            // Each replica holds the moments of part of the shard's parameters.
            assert!(
                *mz < *ma && *mz > 0,
                "sp {sp} rank {r}: {mz} of {ma} moments"
            );
        }
    }
}
