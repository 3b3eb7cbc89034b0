//! Prints the table in `bench/RESULTS.md`: per-rank parameter and activation memory of
//! `brrr train`'s default model (4 layers, 4 heads, 128 wide, vocabulary 256, context 128)
//! for one micro-batch of 16 × 128 tokens, measured on each rank's own CPU device against
//! brrr-perf's estimate, and the step time of in-process ranks.
//!
//! `cargo run --release -p brrr-tp --example tp_memory`

use brrr_collectives::{ParallelGroups, ParallelLayout, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_tp::memory::measure_rank;
use brrr_tp::{TpConfig, TpTrainer};
use brrr_train::{Batch, TrainConfig};
use std::sync::Arc;

const BATCH: usize = 16;
const SEQ: usize = 128;
const TIMED_STEPS: usize = 3;

fn mib(b: f64) -> String {
    format!("{:.2}", b / (1024.0 * 1024.0))
}

/// Mean seconds of `TIMED_STEPS` steps after one warm-up step, on rank 0.
fn step_seconds(tp: usize, sp: bool) -> f64 {
    let cfg = TrainConfig {
        batch_size: BATCH,
        seq_len: SEQ,
        ..TrainConfig::default()
    };
    let n = BATCH * SEQ;
    let batch = Batch {
        inputs: (0..n).map(|i| (i * 7 % 256) as u32).collect(),
        targets: (0..n).map(|i| (i * 11 % 256) as u32).collect(),
        batch: BATCH,
        seq: SEQ,
        mask: None,
    };
    let res = run_in_process(tp, |world| {
        let groups = ParallelGroups::new(world, ParallelLayout { dp: 1, tp, pp: 1 })?;
        let mut t = TpTrainer::new(&CpuBackend::new(), cfg.clone(), TpConfig { tp, sp }, groups)?;
        t.step(std::slice::from_ref(&batch))?;
        let mut secs = 0.0;
        for _ in 0..TIMED_STEPS {
            secs += t.step(std::slice::from_ref(&batch))?.seconds.unwrap_or(0.0);
        }
        Ok(secs / TIMED_STEPS as f64)
    });
    res.into_iter()
        .next()
        .and_then(|r| r.ok())
        .unwrap_or(f64::NAN)
}

fn main() {
    let model = TrainConfig::default().model;
    println!(
        "| tp | sp | params MiB (measured) | params MiB (estimate) | activations MiB (measured) | activations MiB (estimate) | peak above params MiB | step s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (tp, sp) in [(1, false), (2, false), (2, true), (4, false), (4, true)] {
        let res = run_in_process(tp, |world| {
            let groups = ParallelGroups::new(world, ParallelLayout { dp: 1, tp, pp: 1 })?;
            Ok(measure_rank(
                &CpuBackend::new(),
                Arc::new(groups.tp),
                &model,
                BATCH,
                SEQ,
                sp,
            )?)
        });
        let ranks: Vec<_> = res.into_iter().map(|r| r.expect("rank")).collect();
        assert!(
            ranks.iter().all(|r| *r == ranks[0]),
            "ranks differ: {ranks:?}"
        );
        let m = ranks[0];
        println!(
            "| {tp} | {} | {} | {} | {} | {} | {} | {:.3} |",
            if sp { "yes" } else { "no" },
            mib(m.param_bytes as f64),
            mib(m.param_bytes_estimate),
            mib(m.activation_bytes as f64),
            mib(m.activation_bytes_estimate),
            mib(m.step_peak_bytes as f64),
            step_seconds(tp, sp),
        );
    }
}
