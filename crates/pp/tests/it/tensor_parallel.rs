//! Pipeline stages split over tensor-parallel groups (`--pp P --tp T`, Megatron's 3D
//! layout) against one device: p = 2 stages × t = 2 tensor ranks (4 in-process ranks)
//! for every schedule, with and without sequence parallelism, and dp 2 × pp 2 × tp 2
//! (8 ranks). Each rank's gradient shards are gathered back to the full shapes
//! (`brrr_tp::shard::unshard_by_name`, the inverse of how the shards were cut) and
//! compared with the unsplit model's, parameter by parameter; the losses of two steps
//! and the first step's global gradient norm (the clipping input) too.
//!
//! Tolerances: gradients within `1e-5 · max|g|` of the reference per tensor, losses and
//! norms within `2e-6` relative (measured worst: 5.1e-7, 5.1e-8 and 1.1e-7). Tensor parallelism sums partial products over the
//! ranks (the row-parallel projections, the vocabulary-parallel loss) in another order
//! than one GEMM does, and the pipeline accumulates the tied gradient in another order,
//! so the results agree to f32 rounding, not bitwise. A deliberately wrong gather
//! (the tensor ranks' shards put back in reverse order) is caught by the same check.

use brrr_collectives::{ParallelGroups, ParallelLayout, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, DType, Gpt, GptConfig, MicroBatch, Module, Tensor, grad_norm};
use brrr_pp::{MicroBatchData, PipelineStage, ScheduleKind, generate, step_loss};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

const SEED: u64 = 11;
const STEPS: usize = 2;
const ROWS: usize = 2; // rows per micro-batch
const LR: f32 = 1e-2;
const CLIP: f64 = 1.0;
const GRAD_TOL: f32 = 1e-5;
const LOSS_TOL: f64 = 2e-6;

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 32,
        block_size: 8,
        n_layer: 4,
        n_head: 2,
        n_embd: 16,
    }
}

type Host = (Vec<u32>, Vec<i32>);

/// `m` micro-batches of `ROWS × T` random tokens for step `step`.
fn batches(step: usize, m: usize) -> Vec<Host> {
    let mut rng = ChaCha8Rng::seed_from_u64(2000 + step as u64);
    let t = config().block_size;
    (0..m)
        .map(|_| {
            let ids: Vec<u32> = (0..ROWS * t).map(|_| rng.random_range(0..32)).collect();
            let tg: Vec<i32> = (0..ROWS * t).map(|_| rng.random_range(0..32)).collect();
            (ids, tg)
        })
        .collect()
}

fn upload(b: &CpuBackend, h: &[Host]) -> Vec<MicroBatchData<CpuBackend>> {
    let t = config().block_size;
    h.iter()
        .map(|(i, g)| {
            (
                Tensor::from_u32(b, i, [ROWS, t]).unwrap(),
                Tensor::from_i32(b, g, [ROWS, t]).unwrap(),
            )
                .into()
        })
        .collect()
}

fn model(b: &CpuBackend) -> Gpt<CpuBackend> {
    Gpt::new(
        b,
        config(),
        DType::F32,
        &mut ChaCha8Rng::seed_from_u64(SEED),
    )
    .unwrap()
}

/// Losses of every step, the first step's global gradient norm and its gradients.
struct Outcome {
    losses: Vec<f64>,
    norm: f64,
    grads: BTreeMap<String, Vec<f32>>,
}

/// One device, gradient accumulation over the `m` micro-batches.
fn reference(m: usize) -> Outcome {
    let b = CpuBackend::new();
    let mut gpt = model(&b);
    let mut opt = AdamW::new(AdamWConfig::default());
    let dloss = 1.0 / (ROWS * config().block_size * m) as f32;
    let mut out = Outcome {
        losses: vec![],
        norm: 0.0,
        grads: BTreeMap::new(),
    };
    for step in 0..STEPS {
        gpt.zero_grad().unwrap();
        let data = upload(&b, &batches(step, m));
        let mut loss = 0.0;
        for (
            i,
            MicroBatchData {
                ids, targets: tg, ..
            },
        ) in data.iter().enumerate()
        {
            let l = gpt.forward_loss_mb(MicroBatch(i as u32), ids, tg).unwrap();
            loss += f64::from(l.mean_all().unwrap().to_vec_f32().unwrap()[0]);
            gpt.backward_mb(MicroBatch(i as u32), dloss).unwrap();
        }
        out.losses.push(loss / m as f64);
        let norm = grad_norm(&gpt.params()).unwrap();
        if step == 0 {
            out.norm = norm;
            for p in gpt.params() {
                out.grads
                    .insert(p.name.clone(), p.grad.to_vec_f32().unwrap());
            }
        }
        let coef = (CLIP / (norm + 1e-6)).min(1.0) as f32;
        opt.step(gpt.params_mut(), LR, coef).unwrap();
    }
    out
}

/// One parameter's gradient shard as a rank saw it after the first step.
struct Shard {
    /// (data-parallel replica, stage, tensor rank).
    at: (usize, usize, usize),
    /// Its place in the stage's parameters (the tied weight appears twice with p = 1).
    index: usize,
    name: String,
    dims: Vec<usize>,
    grad: Vec<f32>,
    replicated: bool,
}

/// What every rank returns: losses and norm (the same everywhere) and its shards.
struct RankOut {
    losses: Vec<f64>,
    norm: f64,
    shards: Vec<Shard>,
}

/// `dp` pipelines of `p` stages, each stage `t` tensor ranks wide; replica `d` takes
/// micro-batches `d·m/dp ..`.
fn grid(kind: ScheduleKind, p: usize, t: usize, dp: usize, sp: bool, m: usize) -> Vec<RankOut> {
    let m_local = m / dp;
    let schedule = generate(kind, p, m_local).unwrap();
    let layout = ParallelLayout { dp, tp: t, pp: p };
    let results = run_in_process(p * t * dp, |world| {
        let ParallelGroups {
            dp: dpc, tp, pp, ..
        } = ParallelGroups::new(world, layout)?;
        let (d, r, s) = layout.coords(world.rank());
        let b = CpuBackend::new();
        let opt = AdamWConfig::default();
        let mut stage = PipelineStage::new_tensor_parallel(
            model(&b),
            s,
            p,
            kind.chunks(),
            opt,
            Arc::new(tp),
            sp,
        )?;
        let dloss = 1.0 / (ROWS * config().block_size * m_local) as f32;
        let mut out = RankOut {
            losses: vec![],
            norm: 0.0,
            shards: vec![],
        };
        for step in 0..STEPS {
            let all = batches(step, m);
            let data = upload(&b, &all[d * m_local..(d + 1) * m_local]);
            let run = stage.run(&pp, &schedule, &data, dloss)?;
            stage.reduce_grads(&pp, Some(&dpc))?;
            out.losses.push(step_loss(&run, m_local, &pp, Some(&dpc))?);
            if step == 0 {
                for (index, q) in stage.params().into_iter().enumerate() {
                    out.shards.push(Shard {
                        at: (d, s, r),
                        index,
                        name: q.name.clone(),
                        dims: q.value.dims().to_vec(),
                        grad: q.grad.to_vec_f32()?,
                        replicated: stage.is_replicated(&q.name),
                    });
                }
            }
            let norm = stage.update(&pp, LR, CLIP)?;
            if step == 0 {
                out.norm = norm;
            }
        }
        Ok(out)
    });
    results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.unwrap_or_else(|e| panic!("{kind} p={p} t={t}: rank {rank}: {e}")))
        .collect()
}

/// Every (replica, stage, parameter)'s gradient gathered over the tensor ranks to its
/// full shape; `reversed` puts the shards back in the wrong order (the check must fail).
fn gather(ranks: &[RankOut], t: usize, reversed: bool) -> Vec<(String, Vec<f32>)> {
    let mut groups: BTreeMap<(usize, usize, usize), Vec<&Shard>> = BTreeMap::new();
    for s in ranks.iter().flat_map(|r| &r.shards) {
        groups.entry((s.at.0, s.at.1, s.index)).or_default().push(s);
    }
    let mut out = Vec::new();
    for (_, mut shards) in groups {
        // One parameter of one stage of one replica: a shard per tensor rank.
        let name = shards[0].name.clone();
        assert_eq!(shards.len(), t, "{name}");
        assert!(shards.iter().all(|s| s.name == name), "{name}");
        shards.sort_by_key(|s| s.at.2);
        if shards[0].replicated {
            // A full copy on every tensor rank: the copies must agree.
            for s in &shards[1..] {
                assert_eq!(
                    s.grad, shards[0].grad,
                    "{name}: replicated gradient differs on tensor rank {}",
                    s.at.2
                );
            }
        }
        if reversed {
            shards.reverse();
        }
        let flat: Vec<f32> = shards.iter().flat_map(|s| s.grad.iter().copied()).collect();
        let (whole, _) = brrr_tp::shard::unshard_by_name(&name, &flat, &shards[0].dims, t)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push((name, whole));
    }
    out
}

/// The worst mismatch, as an error naming it.
fn compare(got: &[(String, Vec<f32>)], want: &BTreeMap<String, Vec<f32>>) -> Result<(), String> {
    for (name, g) in got {
        let r = want
            .get(name)
            .ok_or_else(|| format!("{name} is not in the model"))?;
        if g.len() != r.len() {
            return Err(format!("{name}: {} values, expected {}", g.len(), r.len()));
        }
        let scale = r.iter().fold(0.0f32, |a, x| a.max(x.abs())).max(1e-12);
        let worst = g
            .iter()
            .zip(r)
            .fold(0.0f32, |a, (x, y)| a.max((x - y).abs()));
        if worst > GRAD_TOL * scale {
            return Err(format!("{name} off by {worst} (max |g| {scale})"));
        }
    }
    Ok(())
}

fn check(kind: ScheduleKind, p: usize, t: usize, dp: usize, sp: bool, m: usize) {
    let want = reference(m);
    let ranks = grid(kind, p, t, dp, sp, m);
    let what = format!("{kind} p={p} t={t} dp={dp} sp={sp}");
    for r in &ranks {
        assert_eq!(r.losses.len(), STEPS);
        for (s, (a, b)) in r.losses.iter().zip(&want.losses).enumerate() {
            assert!(
                (a - b).abs() <= LOSS_TOL * b.abs(),
                "{what} step {s}: loss {a} vs {b}"
            );
        }
        assert!(
            (r.norm - want.norm).abs() <= LOSS_TOL * want.norm,
            "{what}: gradient norm {} vs {}",
            r.norm,
            want.norm
        );
    }
    let got = gather(&ranks, t, false);
    // Every parameter once per replica, the tied weight on both ends.
    assert_eq!(got.len(), dp * (want.grads.len() + 1), "{what}");
    compare(&got, &want.grads).unwrap_or_else(|e| panic!("{what}: {e}"));
}

#[test]
fn every_schedule_p2_t2_matches_one_device() {
    for kind in ScheduleKind::all(2) {
        check(kind, 2, 2, 1, false, 4);
    }
}

#[test]
fn every_schedule_p2_t2_with_sequence_parallelism_matches_one_device() {
    for kind in ScheduleKind::all(2) {
        check(kind, 2, 2, 1, true, 4);
    }
}

#[test]
fn dp2_pp2_tp2_matches_one_device() {
    check(ScheduleKind::OneFOneB, 2, 2, 2, false, 8);
    check(ScheduleKind::ZbH1, 2, 2, 2, true, 8);
}

#[test]
fn one_stage_wide_and_tensor_parallel_matches_one_device() {
    // p = 1: the tied embedding and head on the same ranks.
    check(ScheduleKind::OneFOneB, 1, 2, 1, false, 2);
}

/// The comparison can fail: the same gradients gathered with the tensor ranks' shards
/// in the wrong order are far from the reference.
#[test]
fn a_wrong_gather_is_caught() {
    let want = reference(4);
    let ranks = grid(ScheduleKind::OneFOneB, 2, 2, 1, false, 4);
    compare(&gather(&ranks, 2, false), &want.grads).unwrap();
    let e = compare(&gather(&ranks, 2, true), &want.grads).unwrap_err();
    assert!(e.contains("off by"), "{e}");
}

/// Tensor ranks of one stage write separate checkpoint files, and a run restored from
/// them goes on bitwise as the uninterrupted run.
#[test]
fn tensor_parallel_stage_checkpoints_resume_bitwise() {
    let dir = std::env::temp_dir().join(format!("brrr-pptp-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (p, t, m) = (2, 2, 4);
    let run = |steps: std::ops::Range<usize>, load: bool, save: bool| -> Vec<f64> {
        let schedule = generate(ScheduleKind::ZbH1, p, m).unwrap();
        let layout = ParallelLayout {
            dp: 1,
            tp: t,
            pp: p,
        };
        let dir = dir.clone();
        let out = run_in_process(p * t, move |world| {
            let g = ParallelGroups::new(world, layout)?;
            let (_, _, s) = layout.coords(world.rank());
            let b = CpuBackend::new();
            let (tp, pp) = (Arc::new(g.tp), g.pp);
            let opt = AdamWConfig::default();
            let mut stage = PipelineStage::new_tensor_parallel(model(&b), s, p, 1, opt, tp, true)?;
            if load {
                assert_eq!(stage.load_checkpoint(&dir)?.step as usize, steps.start);
            }
            let dloss = 1.0 / (ROWS * config().block_size * m) as f32;
            let mut losses = vec![];
            for step in steps.clone() {
                let data = upload(&b, &batches(step, m));
                let r = stage.run(&pp, &schedule, &data, dloss)?;
                stage.reduce_grads(&pp, None)?;
                losses.push(step_loss(&r, m, &pp, None)?);
                stage.update(&pp, LR, CLIP)?;
            }
            if save {
                stage.save_checkpoint(&dir, steps.end as u64, "")?;
            }
            Ok(losses)
        });
        out.into_iter().next().unwrap().unwrap()
    };
    let whole = run(0..4, false, false);
    let first = run(0..2, false, true);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "pp-stage0-of2-tp0-of2.bin",
            "pp-stage0-of2-tp1-of2.bin",
            "pp-stage1-of2-tp0-of2.bin",
            "pp-stage1-of2-tp1-of2.bin"
        ]
    );
    let rest = run(2..4, true, false);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let resumed: Vec<f64> = first.iter().chain(&rest).copied().collect();
    assert_eq!(bits(&resumed), bits(&whole));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Sizes that do not divide by the tensor-parallel group are refused by name.
#[test]
fn indivisible_heads_are_refused() {
    let e = run_in_process(3, |world| {
        let b = CpuBackend::new();
        let tp = Arc::new(world.split(0, world.rank() as u32)?);
        let opt = AdamWConfig::default();
        Ok(PipelineStage::new_tensor_parallel(model(&b), 0, 1, 1, opt, tp, false).map(|_| ())?)
    })
    .remove(0)
    .unwrap_err()
    .to_string();
    assert!(e.contains("heads"), "{e}");
}

/// A reference that cannot be matched: the check is not vacuous for the 3D grid.
#[test]
fn a_wrong_reference_is_caught() {
    let mut want = reference(4);
    let ranks = grid(ScheduleKind::GPipe, 2, 2, 1, true, 4);
    let g = want.grads.get_mut("h.1.mlp.c_fc.weight").unwrap();
    g[3] += 1e-2 * g.iter().fold(0.0f32, |a, x| a.max(x.abs()));
    let e = compare(&gather(&ranks, 2, false), &want.grads).unwrap_err();
    assert!(e.contains("h.1.mlp.c_fc.weight"), "{e}");
}

/// The tensor-parallel blocks' and head's zero-bubble split is exact: ZB-H1 and ZB-H2
/// run B (with every tensor-parallel collective) and then the local W of each
/// micro-batch in 1F1B's order, so their losses and gradient shards equal 1F1B's
/// bitwise, with and without sequence parallelism.
#[test]
fn zero_bubble_with_tensor_parallel_stages_equals_one_f_one_b_bitwise() {
    for sp in [false, true] {
        let want = grid(ScheduleKind::OneFOneB, 2, 2, 1, sp, 4);
        for kind in [ScheduleKind::ZbH1, ScheduleKind::ZbH2] {
            let got = grid(kind, 2, 2, 1, sp, 4);
            for (g, w) in got.iter().zip(&want) {
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&g.losses), bits(&w.losses), "{kind} sp={sp}");
                assert_eq!(g.shards.len(), w.shards.len());
                for (a, b) in g.shards.iter().zip(&w.shards) {
                    let ab: Vec<u32> = a.grad.iter().map(|x| x.to_bits()).collect();
                    let bb: Vec<u32> = b.grad.iter().map(|x| x.to_bits()).collect();
                    assert!(ab == bb, "{kind} sp={sp}: {} differs from 1F1B's", a.name);
                }
            }
        }
    }
}

/// What one rank's communicators moved during one step's schedule (after the
/// barrier at its start, before the gradient reductions).
struct Traffic {
    stage: usize,
    /// Elements this rank sent to the neighbouring stage.
    boundary_sent: u64,
    /// The tensor-parallel group's collectives, as brrr-tp's theory counts them.
    tp: brrr_tp::theory::PassComm,
}

fn traffic(p: usize, t: usize, sp: bool, m: usize) -> Vec<Traffic> {
    let schedule = generate(ScheduleKind::OneFOneB, p, m).unwrap();
    let layout = ParallelLayout {
        dp: 1,
        tp: t,
        pp: p,
    };
    run_in_process(p * t, |world| {
        let g = ParallelGroups::new(world, layout)?;
        let (_, _, s) = layout.coords(world.rank());
        let b = CpuBackend::new();
        let tp = Arc::new(g.tp);
        let opt = AdamWConfig::default();
        let mut stage =
            PipelineStage::new_tensor_parallel(model(&b), s, p, 1, opt, tp.clone(), sp)?;
        let data = upload(&b, &batches(0, m));
        let dloss = 1.0 / (ROWS * config().block_size * m) as f32;
        g.pp.reset_stats();
        tp.reset_stats();
        stage.run(&g.pp, &schedule, &data, dloss)?;
        let st = tp.stats();
        let mut pass = brrr_tp::theory::PassComm::default();
        for (name, c) in [
            ("all-reduce", &mut pass.all_reduce),
            ("reduce-scatter", &mut pass.reduce_scatter),
            ("all-gather", &mut pass.all_gather),
        ] {
            c.calls = st.op(name).calls;
            c.elements = st.op(name).elements;
        }
        Ok(Traffic {
            stage: s,
            boundary_sent: g.pp.stats().op("send/recv").elements_sent,
            tp: pass,
        })
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

/// Each tensor rank sends the residual stream it holds across the boundary: the whole
/// `[b, T, C]` per micro-batch without sequence parallelism, its `1/t` shard with it
/// (plus a 3-element tag per message). Inside a stage the tensor-parallel group runs
/// exactly brrr-tp's collectives for that stage's blocks, plus the embedding's exit on
/// the first stage and the head's entry and the cross-entropy's two all-reduces on the
/// last, per micro-batch (`brrr_tp::theory`).
#[test]
fn each_tensor_rank_moves_what_it_holds() {
    use brrr_tp::theory::{PassComm, block_pass};
    let (p, t, m) = (2, 2, 4);
    let c = config();
    let (b, seq) = (ROWS, c.block_size);
    let act = (b * seq * c.n_embd) as u64;
    let n = (b * seq) as u64;
    for sp in [false, true] {
        let held = if sp { act / t as u64 } else { act };
        for r in traffic(p, t, sp, m) {
            // 1F1B at p = 2: stage 0 sends m activations, stage 1 m gradients.
            assert_eq!(
                r.boundary_sent,
                m as u64 * (3 + held),
                "sp={sp} stage {}",
                r.stage
            );
            let blocks = (c.n_layer / p) as u64;
            let mut want = PassComm::default();
            for backward in [false, true] {
                let blk = block_pass(b, seq, c.n_embd, sp, backward);
                for (w, k) in [
                    (&mut want.all_reduce, blk.all_reduce),
                    (&mut want.reduce_scatter, blk.reduce_scatter),
                    (&mut want.all_gather, blk.all_gather),
                ] {
                    w.calls += blocks * k.calls;
                    w.elements += blocks * k.elements;
                }
            }
            match (r.stage, sp) {
                (0, false) => want.all_reduce.add(1, act), // embedding exit
                (0, true) => {
                    want.reduce_scatter.add(1, act); // embedding exit, forward
                    want.all_gather.add(1, act); // and backward
                }
                (_, false) => want.all_reduce.add(1, act), // head entry, backward
                (_, true) => {
                    want.all_gather.add(1, act); // head entry, forward
                    want.reduce_scatter.add(1, act); // and backward
                }
            }
            if r.stage == p - 1 {
                want.all_reduce.add(1, n); // the loss's maximum
                want.all_reduce.add(1, 2 * n); // its sums
            }
            for x in [
                &mut want.all_reduce,
                &mut want.reduce_scatter,
                &mut want.all_gather,
            ] {
                x.calls *= m as u64;
                x.elements *= m as u64;
            }
            assert_eq!(r.tp, want, "sp={sp} stage {}", r.stage);
        }
    }
}
