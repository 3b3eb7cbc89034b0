//! `--dp` with `--amp bf16|fp16` at every ZeRO stage trains like one device with the
//! same `--amp`, and an fp16 overflow on any rank skips the step on every rank.
//!
//! Tolerance: the ranks compute the same 16-bit forward per row as one device; the f32
//! weight gradients differ by f32 rounding (each rank sums its rows, the ring sums the
//! ranks), and after an update a master that sits next to a 16-bit rounding boundary can
//! round its compute copy the other way (one bf16 ulp is 2^-8 relative). Measured over
//! three steps at lr 1e-2: at most 1.6e-5 nats (fp16) and 5.0e-5 nats (bf16) with losses
//! near 5, the same at every stage for a given `--dp`; the bound is 2e-4.

use crate::common::*;
use brrr_amp::{AmpConfig, AmpMode};
use brrr_collectives::run_in_process;
use brrr_cpu::CpuBackend;
use brrr_dp::{DataParallel, DpConfig};
use brrr_nn::Module;
use brrr_train::{StepStats, TrainConfig, Trainer};

/// Loss difference allowed against one device, nats (losses near 5).
const TOL: f32 = 2e-4;

fn amp_config(mode: AmpMode, init_scale: f32) -> TrainConfig {
    let mut c = config(3, 1);
    c.amp = AmpConfig::new(mode);
    c.amp.scaler.init_scale = init_scale;
    c
}

fn single_stats(c: &TrainConfig) -> Vec<StepStats> {
    let b = CpuBackend::new();
    let mut t = Trainer::new(&b, c.clone(), batcher(c), Vec::new()).unwrap();
    (0..c.steps).map(|_| t.step_blocking().unwrap()).collect()
}

/// Every rank's step stats and its full parameters (as the model's compute copies) at
/// the end; rank `inject` (if any) injects an inf gradient at step `at`.
fn dp_stats(
    c: &TrainConfig,
    dp: &DpConfig,
    inject: Option<(usize, u64)>,
) -> Vec<(Vec<StepStats>, Vec<Vec<f32>>)> {
    run_in_process(dp.world, |comm| {
        let b = CpuBackend::new();
        let mut e = DataParallel::new(&b, c.clone(), dp.clone(), comm, batcher(c))?;
        let mut stats = Vec::new();
        for s in 1..=c.steps {
            if inject == Some((comm.rank(), s)) {
                e.inject_overflow();
            }
            stats.push(e.step()?);
        }
        e.gather_all()?;
        let params = e
            .model()
            .params()
            .iter()
            .map(|p| p.value.to_vec_f32())
            .collect::<brrr_backend::Result<Vec<_>>>()?;
        e.free_all()?;
        Ok((stats, params))
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

fn with_world(zero: u8, world: usize) -> DpConfig {
    DpConfig {
        world,
        ..dp_config(zero)
    }
}

fn check(mode: AmpMode, world: usize) {
    let c = amp_config(mode, 65536.0);
    let reference = single_stats(&c);
    for zero in 0..=3u8 {
        let ranks = dp_stats(&c, &with_world(zero, world), None);
        let mut worst = 0.0f32;
        for (r, (stats, params)) in ranks.iter().enumerate() {
            assert_eq!(
                params, &ranks[0].1,
                "{mode:?} zero {zero}: rank {r}'s weights"
            );
            for (s, (a, b)) in stats.iter().zip(&reference).enumerate() {
                let d = (a.loss - b.loss).abs();
                worst = worst.max(d);
                assert!(
                    d <= TOL,
                    "{mode:?} --dp {world} zero {zero} step {s}: {} vs one device {}",
                    a.loss,
                    b.loss
                );
                assert_eq!((a.skipped, a.loss_scale), (b.skipped, b.loss_scale));
            }
        }
        println!("{mode:?} --dp {world} --zero {zero}: largest loss difference {worst:e}");
    }
    assert!(
        reference[0].loss != reference[2].loss,
        "the run learned nothing"
    );
}

#[test]
fn bf16_matches_one_device_at_every_stage() {
    check(AmpMode::Bf16, 2);
    check(AmpMode::Bf16, 4);
}

#[test]
fn fp16_matches_one_device_at_every_stage() {
    check(AmpMode::Fp16, 2);
    check(AmpMode::Fp16, 4);
}

/// A scale of 2^40 overflows fp16 in the first backward: one device and every rank of
/// every stage skip the same steps and halve the scale the same way.
#[test]
fn a_huge_scale_skips_the_same_steps_everywhere() {
    let c = amp_config(AmpMode::Fp16, 2f32.powi(40));
    let reference = single_stats(&c);
    assert!(reference[0].skipped, "2^40 did not overflow fp16");
    for zero in 0..=3u8 {
        for (r, (stats, _)) in dp_stats(&c, &with_world(zero, 2), None).iter().enumerate() {
            let got: Vec<_> = stats.iter().map(|s| (s.skipped, s.loss_scale)).collect();
            let want: Vec<_> = reference
                .iter()
                .map(|s| (s.skipped, s.loss_scale))
                .collect();
            assert_eq!(got, want, "zero {zero} rank {r}");
        }
    }
}

/// An inf in rank 1's gradients only (after the reduction, where at stages 1-3 only the
/// owner of the chunk sees it) skips step 2 on every rank: the flags are all-reduced
/// with MAX. Rank 0 alone would have updated, and the replicas would differ.
#[test]
fn an_overflow_on_one_rank_skips_the_step_on_every_rank() {
    let c = amp_config(AmpMode::Fp16, 1024.0);
    for zero in 0..=3u8 {
        let ranks = dp_stats(&c, &with_world(zero, 4), Some((1, 2)));
        for (r, (stats, params)) in ranks.iter().enumerate() {
            let skipped: Vec<bool> = stats.iter().map(|s| s.skipped).collect();
            assert_eq!(skipped, [false, true, false], "zero {zero} rank {r}");
            assert_eq!(
                stats[1].loss_scale, 512.0,
                "zero {zero} rank {r}: backed off"
            );
            assert_eq!(
                params, &ranks[0].1,
                "zero {zero}: rank {r}'s weights differ"
            );
        }
    }
}

/// Stage 0 replicates the f32 masters; stages 1-3 keep them only in the shards: the
/// model's parameters are bf16 copies without a master, and the model states on the
/// device shrink with the stage.
#[test]
fn masters_live_only_in_the_owners_shard() {
    let c = amp_config(AmpMode::Bf16, 65536.0);
    for zero in 0..=3u8 {
        let ranks = run_in_process(2, |comm| {
            let b = CpuBackend::new();
            let mut e = DataParallel::new(&b, c.clone(), with_world(zero, 2), comm, batcher(&c))?;
            e.step()?;
            e.gather_all()?;
            let ps = e.model().params();
            let masters = ps.iter().filter(|p| p.master.is_some()).count();
            let bf16 = ps
                .iter()
                .all(|p| p.value.dtype() == brrr_backend::DType::BF16);
            Ok((masters, bf16, ps.len()))
        });
        for r in ranks {
            let (masters, bf16, n) = r.unwrap();
            assert!(bf16, "zero {zero}: the compute copies are not bf16");
            let want = if zero == 0 { n } else { 0 };
            assert_eq!(masters, want, "zero {zero}: masters in the model");
        }
    }
}
