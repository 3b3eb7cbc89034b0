//! The executor against one device: every schedule with p = 2 and p = 4 (and with
//! dp = 2) gives the losses and gradients of the unsplit model on the same global
//! batch.
//!
//! Tolerances: gradients within `2e-5 · max|g|` of the reference per tensor, losses
//! within 2e-5 absolute. The pipeline sums each gradient over the micro-batches in the
//! schedule's order (and the tied embedding/head parts after all micro-batches), the
//! reference in micro-batch order, so they agree to f32 rounding, not bitwise.

use brrr_backend::Backend;
use brrr_collectives::{ParallelGroups, ParallelLayout, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, DType, Gpt, GptConfig, MicroBatch, Module, Tensor, grad_norm};
use brrr_pp::{MicroBatchData, PipelineStage, ScheduleKind, generate, step_loss};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

const SEED: u64 = 7;
const STEPS: usize = 2;
const ROWS: usize = 2; // rows per micro-batch
const LR: f32 = 1e-2;
const CLIP: f64 = 1.0;

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 32,
        block_size: 8,
        n_layer: 8,
        n_head: 2,
        n_embd: 16,
    }
}

type Host = (Vec<u32>, Vec<i32>);

/// `m` micro-batches of `ROWS × T` random tokens for step `step`.
fn batches(step: usize, m: usize) -> Vec<Host> {
    let mut rng = ChaCha8Rng::seed_from_u64(1000 + step as u64);
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

struct Outcome {
    losses: Vec<f64>,
    /// The first step's gradients by name (the tied weight may appear twice).
    grads: Vec<(String, Vec<f32>)>,
}

/// One device, gradient accumulation over the `m` micro-batches.
fn reference(m: usize) -> Outcome {
    let b = CpuBackend::new();
    let mut gpt = model(&b);
    let mut opt = AdamW::new(AdamWConfig::default());
    let dloss = 1.0 / (ROWS * config().block_size * m) as f32;
    let mut out = Outcome {
        losses: vec![],
        grads: vec![],
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
        if step == 0 {
            out.grads = gpt
                .params()
                .iter()
                .map(|p| (p.name.clone(), p.grad.to_vec_f32().unwrap()))
                .collect();
        }
        let norm = grad_norm(&gpt.params()).unwrap();
        let coef = (CLIP / (norm + 1e-6)).min(1.0) as f32;
        opt.step(gpt.params_mut(), LR, coef).unwrap();
    }
    out
}

/// `dp` pipelines of `p` stages; dp replica `d` takes micro-batches `d·m/dp ..`.
fn pipeline(kind: ScheduleKind, p: usize, dp: usize, m: usize) -> Outcome {
    let m_local = m / dp;
    let schedule = generate(kind, p, m_local).unwrap();
    let results = run_in_process(p * dp, |world| {
        let layout = ParallelLayout { dp, tp: 1, pp: p };
        let g = ParallelGroups::new(world, layout)?;
        let (d, _, r) = layout.coords(world.rank());
        let b = CpuBackend::new();
        let mut stage = PipelineStage::new(model(&b), r, p, kind.chunks(), AdamWConfig::default())?;
        let dloss = 1.0 / (ROWS * config().block_size * m_local) as f32;
        let mut out = Outcome {
            losses: vec![],
            grads: vec![],
        };
        for step in 0..STEPS {
            let all = batches(step, m);
            let data = upload(&b, &all[d * m_local..(d + 1) * m_local]);
            let run = stage.run(&g.pp, &schedule, &data, dloss)?;
            stage.reduce_grads(&g.pp, Some(&g.dp))?;
            out.losses
                .push(step_loss(&run, m_local, &g.pp, Some(&g.dp))?);
            if step == 0 {
                out.grads = stage.named_grads()?;
            }
            stage.update(&g.pp, LR, CLIP)?;
        }
        Ok(out)
    });
    let mut merged = Outcome {
        losses: vec![],
        grads: vec![],
    };
    for (rank, r) in results.into_iter().enumerate() {
        let o = r.unwrap_or_else(|e| panic!("{kind} p={p} dp={dp}: rank {rank}: {e}"));
        if rank == 0 {
            merged.losses = o.losses;
        }
        merged.grads.extend(o.grads);
    }
    merged
}

fn check(kind: ScheduleKind, p: usize, dp: usize, m: usize) {
    let want = reference(m);
    let got = pipeline(kind, p, dp, m);
    for (s, (a, b)) in got.losses.iter().zip(&want.losses).enumerate() {
        assert!(
            (a - b).abs() < 2e-5,
            "{kind} p={p} dp={dp} step {s}: loss {a} vs {b}"
        );
    }
    assert_eq!(got.losses.len(), STEPS);
    let reference: HashMap<_, _> = want.grads.into_iter().collect();
    let mut seen = 0;
    for (name, g) in &got.grads {
        let r = reference
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not in the model"));
        let scale = r.iter().fold(0.0f32, |a, x| a.max(x.abs())).max(1e-12);
        let worst = g
            .iter()
            .zip(r)
            .fold(0.0f32, |a, (x, y)| a.max((x - y).abs()));
        assert!(
            worst <= 2e-5 * scale,
            "{kind} p={p} dp={dp}: {name} off by {worst} (max |g| {scale})"
        );
        seen += 1;
    }
    // Every parameter, the tied one on both ends (once with p = 1), dp times.
    assert_eq!(seen, dp * (reference.len() + 1), "{kind} p={p} dp={dp}");
}

#[test]
fn gpipe_p2_and_p4() {
    check(ScheduleKind::GPipe, 2, 1, 4);
    check(ScheduleKind::GPipe, 4, 1, 4);
}

#[test]
fn one_f_one_b_p2_and_p4() {
    check(ScheduleKind::OneFOneB, 2, 1, 4);
    check(ScheduleKind::OneFOneB, 4, 1, 8);
}

#[test]
fn interleaved_p2_and_p4() {
    check(ScheduleKind::Interleaved { v: 2 }, 2, 1, 4);
    check(ScheduleKind::Interleaved { v: 2 }, 4, 1, 4);
}

#[test]
fn zb_h1_p2_and_p4() {
    check(ScheduleKind::ZbH1, 2, 1, 4);
    check(ScheduleKind::ZbH1, 4, 1, 8);
}

#[test]
fn zb_h2_p2_and_p4() {
    check(ScheduleKind::ZbH2, 2, 1, 4);
    check(ScheduleKind::ZbH2, 4, 1, 8);
}

#[test]
fn with_dp2_every_schedule() {
    for kind in ScheduleKind::all(2) {
        check(kind, 2, 2, 8);
    }
}

/// One measured step of `kind` on `p` in-process stages: the gathered timeline and each
/// stage's activation bytes at its peak.
fn measured(kind: ScheduleKind, p: usize, m: usize) -> (brrr_pp::Timeline, Vec<u64>) {
    let schedule = generate(kind, p, m).unwrap();
    let results = run_in_process(p, |comm| {
        let b = CpuBackend::new();
        let mut stage = PipelineStage::new(
            model(&b),
            comm.rank(),
            p,
            kind.chunks(),
            AdamWConfig::default(),
        )?;
        let data = upload(&b, &batches(0, m));
        let run = stage.run(comm, &schedule, &data, 1.0)?;
        let t = brrr_pp::gather_timeline(comm, &run.spans)?;
        Ok((t, run.peak_bytes - run.start_bytes))
    });
    let mut timeline = None;
    let mut bytes = vec![];
    for r in results {
        let (t, b) = r.unwrap();
        timeline = timeline.or(t);
        bytes.push(b);
    }
    (timeline.unwrap(), bytes)
}

#[test]
fn measured_in_flight_matches_the_plan() {
    let (p, m) = (4, 8);
    let mut gpipe_bytes = vec![];
    for kind in ScheduleKind::all(2) {
        let (t, bytes) = measured(kind, p, m);
        let plan =
            brrr_pp::simulate(&generate(kind, p, m).unwrap(), brrr_pp::Costs::unit()).unwrap();
        assert_eq!(t.peak_in_flight, plan.peak_in_flight, "{kind}");
        assert_eq!(t.spans.len(), plan.spans.len(), "{kind}");
        assert!(
            t.makespan > 0.0 && t.bubble_fraction() > 0.0 && t.bubble_fraction() < 1.0,
            "{kind}"
        );
        if kind == ScheduleKind::GPipe {
            gpipe_bytes = bytes;
        } else if kind == ScheduleKind::OneFOneB {
            // GPipe's stage 0 holds 8 micro-batches of activations, 1F1B's 4.
            assert!(
                gpipe_bytes[0] > bytes[0],
                "gpipe {gpipe_bytes:?} vs 1f1b {bytes:?}"
            );
        }
    }
}

/// The zero-bubble schedules run real W passes (the weight gradients after the input
/// gradients, from the layers' W stash). Each stage still adds every micro-batch's
/// contribution to a gradient in increasing micro-batch order (ZB-H1 and ZB-H2 run
/// their B and their W passes in micro-batch order, as 1F1B runs its fused
/// backwards), so their losses and gradients equal 1F1B's bitwise, not only to f32
/// rounding.
#[test]
fn zero_bubble_losses_and_gradients_equal_one_f_one_b_bitwise() {
    for p in [2, 4] {
        let m = 8;
        let want = pipeline(ScheduleKind::OneFOneB, p, 1, m);
        for kind in [ScheduleKind::ZbH1, ScheduleKind::ZbH2] {
            let s = generate(kind, p, m).unwrap();
            assert!(
                s.stages
                    .iter()
                    .flatten()
                    .any(|a| matches!(a, brrr_pp::Action::W { .. })),
                "{kind} has no W action to run"
            );
            let got = pipeline(kind, p, 1, m);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got.losses), bits(&want.losses), "{kind} p={p}");
            assert_eq!(got.grads.len(), want.grads.len());
            for ((n1, g1), (n2, g2)) in got.grads.iter().zip(&want.grads) {
                assert_eq!(n1, n2);
                let b1: Vec<u32> = g1.iter().map(|x| x.to_bits()).collect();
                let b2: Vec<u32> = g2.iter().map(|x| x.to_bits()).collect();
                assert!(b1 == b2, "{kind} p={p}: {n1} differs from 1F1B's");
            }
        }
    }
}

/// Steps `steps` of a `p`-stage pipeline: restored from `load` first when given, saved
/// to `save` after the last step when given. Returns the losses.
fn run_steps(
    kind: ScheduleKind,
    p: usize,
    m: usize,
    steps: std::ops::Range<usize>,
    load: Option<&std::path::Path>,
    save: Option<&std::path::Path>,
) -> Vec<f64> {
    let schedule = generate(kind, p, m).unwrap();
    let results = run_in_process(p, |world| {
        let b = CpuBackend::new();
        let mut stage = PipelineStage::new(model(&b), world.rank(), p, 1, AdamWConfig::default())?;
        if let Some(dir) = load {
            let h = stage.load_checkpoint(dir)?;
            assert_eq!(h.step as usize, steps.start);
        }
        let dloss = 1.0 / (ROWS * config().block_size * m) as f32;
        let mut losses = vec![];
        for step in steps.clone() {
            let data = upload(&b, &batches(step, m));
            let run = stage.run(world, &schedule, &data, dloss)?;
            stage.reduce_grads(world, None)?;
            losses.push(step_loss(&run, m, world, None)?);
            stage.update(world, LR, CLIP)?;
        }
        if let Some(dir) = save {
            stage.save_checkpoint(dir, steps.end as u64, "")?;
        }
        Ok(losses)
    });
    results.into_iter().next().unwrap().unwrap()
}

/// Each stage saves its own parameters and AdamW state; a run resumed from them gives
/// bitwise the losses of the uninterrupted run.
#[test]
fn resume_from_stage_checkpoints_gives_bitwise_the_same_losses() {
    let dir = std::env::temp_dir().join(format!("brrr-pp-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (p, m) = (2, 4);
    let whole = run_steps(ScheduleKind::ZbH1, p, m, 0..4, None, None);
    let first = run_steps(ScheduleKind::ZbH1, p, m, 0..2, None, Some(&dir));
    for s in 0..p {
        assert!(brrr_pp::stage_path(&dir, s, p).exists());
    }
    let rest = run_steps(ScheduleKind::ZbH1, p, m, 2..4, Some(&dir), None);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let resumed: Vec<f64> = first.iter().chain(&rest).copied().collect();
    assert_eq!(bits(&resumed), bits(&whole));

    // A checkpoint of another layout is refused, naming what differs.
    let e = run_in_process(1, |_| {
        let b = CpuBackend::new();
        let mut stage = PipelineStage::new(model(&b), 0, 4, 1, AdamWConfig::default())?;
        Ok(stage.load_checkpoint(&dir).map(|_| ())?)
    })
    .remove(0)
    .unwrap_err()
    .to_string();
    assert!(e.contains("pp-stage0-of4.bin"), "{e}");
    let load_stage_1 = || {
        run_in_process(1, |_| {
            let b = CpuBackend::new();
            let mut stage = PipelineStage::new(model(&b), 1, p, 1, AdamWConfig::default())?;
            Ok(stage.load_checkpoint(&dir).map(|_| ())?)
        })
        .remove(0)
        .unwrap_err()
        .to_string()
    };
    // One flipped bit in the floats: the checksum catches it.
    let path1 = brrr_pp::stage_path(&dir, 1, p);
    let good = std::fs::read(&path1).unwrap();
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 0x04;
    std::fs::write(&path1, &flipped).unwrap();
    let e = load_stage_1();
    assert!(
        e.contains("pp-stage1-of2.bin") && e.contains("checksum mismatch"),
        "{e}"
    );
    // A NaN written by a run that had diverged (its checksum valid): refused by name.
    let hlen = u64::from_le_bytes(good[8..16].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&good[16..16 + hlen]).unwrap();
    let first = header["params"][0][0].as_str().unwrap().to_string();
    let mut data = good[16 + hlen..].to_vec();
    data[4..8].copy_from_slice(&f32::NAN.to_le_bytes());
    header["checksum"] = brrr_train::data::fingerprint(&data).into();
    let header = serde_json::to_vec(&header).unwrap();
    let mut nan = good[..8].to_vec();
    nan.extend_from_slice(&(header.len() as u64).to_le_bytes());
    nan.extend_from_slice(&header);
    nan.extend_from_slice(&data);
    std::fs::write(&path1, &nan).unwrap();
    let e = load_stage_1();
    assert!(
        e.contains(&format!("value of {first:?} holds NaN at element 1")) && e.contains("diverged"),
        "{e}"
    );
    std::fs::write(brrr_pp::stage_path(&dir, 0, p), b"garbage").unwrap();
    let e = run_in_process(1, |_| {
        let b = CpuBackend::new();
        let mut stage = PipelineStage::new(model(&b), 0, p, 1, AdamWConfig::default())?;
        Ok(stage.load_checkpoint(&dir).map(|_| ())?)
    })
    .remove(0)
    .unwrap_err()
    .to_string();
    assert!(e.contains("not a brrr pipeline stage file"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The validation loss (forwards only, through the pieces in order) equals the
/// one-device model's mean loss on the same batches, and leaves nothing in flight.
#[test]
fn eval_loss_matches_one_device_and_keeps_nothing() {
    let m = 3;
    let b = CpuBackend::new();
    let mut gpt = model(&b);
    let data = upload(&b, &batches(9, m));
    let want: f64 = data
        .iter()
        .map(|d| {
            let l = gpt.forward_loss(&d.ids, &d.targets).unwrap();
            f64::from(l.mean_all().unwrap().to_vec_f32().unwrap()[0])
        })
        .sum::<f64>()
        / m as f64;
    for (p, v) in [(1, 1), (2, 2), (4, 1)] {
        let results = run_in_process(p, |world| {
            let b = CpuBackend::new();
            let mut stage =
                PipelineStage::new(model(&b), world.rank(), p, v, AdamWConfig::default())?;
            let data = upload(&b, &batches(9, m));
            let before = b.memory_stats().bytes_in_use;
            let loss = stage.eval_loss(world, &data)?;
            assert_eq!(
                b.memory_stats().bytes_in_use,
                before,
                "stage {}",
                world.rank()
            );
            Ok(loss)
        });
        for r in results {
            let got = r.unwrap();
            assert!((got - want).abs() < 1e-6, "p={p} v={v}: {got} vs {want}");
        }
    }
}
