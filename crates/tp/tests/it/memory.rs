//! Measured per-rank memory against brrr-perf's estimate for tensor and sequence
//! parallelism: parameters within 1 %, the activations a forward keeps within 5 %
//! (the estimate leaves out per-row LayerNorm statistics, ids and masks).

use brrr_collectives::{ParallelGroups, ParallelLayout, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_nn::GptConfig;
use brrr_tp::memory::measure_rank;
use std::sync::Arc;

#[test]
fn measured_memory_matches_the_estimate() {
    let model = GptConfig {
        vocab_size: 256,
        block_size: 32,
        n_layer: 2,
        n_head: 4,
        n_embd: 64,
    };
    for (tp, sp) in [(1, false), (2, false), (2, true), (4, false), (4, true)] {
        let res = run_in_process(tp, |world| {
            let groups = ParallelGroups::new(world, ParallelLayout { dp: 1, tp, pp: 1 })?;
            Ok(measure_rank(
                &CpuBackend::new(),
                Arc::new(groups.tp),
                &model,
                4,
                32,
                sp,
            )?)
        });
        for (rank, r) in res.into_iter().enumerate() {
            let m = r.unwrap();
            println!("tp {tp} sp {sp} rank {rank}: {m:?}");
            let rel = |a: u64, b: f64| (a as f64 - b).abs() / b;
            assert!(
                rel(m.param_bytes, m.param_bytes_estimate) < 0.01,
                "tp {tp}: {m:?}"
            );
            assert!(
                rel(m.activation_bytes, m.activation_bytes_estimate) < 0.05,
                "tp {tp} sp {sp}: {m:?}"
            );
        }
    }
}
