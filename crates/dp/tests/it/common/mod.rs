//! A tiny GPT run shared by the tests: one device through `brrr_train::Trainer`, or
//! `world` in-process ranks through `brrr_dp::DataParallel`.
#![allow(dead_code)]

use brrr_collectives::run_in_process;
use brrr_cpu::CpuBackend;
use brrr_dp::{DataParallel, DpConfig, StepReport};
use brrr_nn::GptConfig;
use brrr_train::{Batcher, TrainConfig, Trainer};

pub const WORLD: usize = 4;

pub fn text() -> Vec<u8> {
    "It is a truth universally acknowledged, that a single man in possession of a good \
     fortune, must be in want of a wife. However little known the feelings or views of \
     such a man may be on his first entering a neighbourhood, this truth is so well fixed."
        .repeat(8)
        .into_bytes()
}

/// 2 layers, 32 wide, global batch 8 × 16 tokens, a high learning rate so that the
/// steps move the weights.
pub fn config(steps: u64, grad_accum: usize) -> TrainConfig {
    TrainConfig {
        model: GptConfig {
            vocab_size: 256,
            block_size: 16,
            n_layer: 2,
            n_head: 2,
            n_embd: 32,
        },
        steps,
        batch_size: 8,
        seq_len: 16,
        grad_accum,
        lr: 1e-2,
        min_lr: 1e-3,
        warmup_steps: 1,
        eval_every: 1000,
        ..TrainConfig::default()
    }
}

pub fn batcher(c: &TrainConfig) -> Box<Batcher> {
    Box::new(Batcher::new(&text(), c.batch_size, c.seq_len, c.seed).unwrap())
}

/// The one-device losses.
pub fn single(c: &TrainConfig) -> Vec<f32> {
    let b = CpuBackend::new();
    let mut t = Trainer::new(&b, c.clone(), batcher(c), Vec::new()).unwrap();
    (0..c.steps)
        .map(|_| t.step_blocking().unwrap().loss)
        .collect()
}

/// Small buckets (4 KiB, first 1 KiB) so that the tiny model has several.
pub fn dp_config(zero: u8) -> DpConfig {
    DpConfig {
        world: WORLD,
        zero,
        bucket_bytes: 4 << 10,
        first_bucket_bytes: 1 << 10,
    }
}

/// Every rank's losses and last step report.
pub fn data_parallel(c: &TrainConfig, dp: &DpConfig) -> Vec<(Vec<f32>, StepReport)> {
    run_in_process(dp.world, |comm| {
        let b = CpuBackend::new();
        let mut e = DataParallel::new(&b, c.clone(), dp.clone(), comm, batcher(c))?;
        let mut losses = Vec::new();
        for _ in 0..c.steps {
            losses.push(e.step()?.loss);
        }
        Ok((losses, e.report().clone()))
    })
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}
