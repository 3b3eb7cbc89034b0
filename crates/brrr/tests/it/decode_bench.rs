//! `brrr bench decode` on the CPU: every batch size measured, each step producing a
//! token per request, and bad sizes refused by name.

use brrr::decode_bench::{DecodeBenchArgs, run_on, table};
use brrr::train::BackendKind;
use brrr_backend::DType;
use brrr_cpu::CpuBackend;

fn args() -> DecodeBenchArgs {
    DecodeBenchArgs {
        backend: BackendKind::Cpu,
        preset: None,
        dtype: DType::F32,
        batches: vec![1, 3],
        prompt_len: 9,
        new_tokens: 3,
        warmup: 1,
        // A named GPU: the bound is computed without measuring this machine.
        gpu: Some("h100".into()),
    }
}

#[test]
fn measures_every_batch_against_the_bound() {
    let mut heard = Vec::new();
    let d = run_on(&CpuBackend::new(), &args(), &mut |w| {
        heard.push(w.to_string())
    })
    .unwrap();
    assert_eq!(heard, ["batch 1", "batch 3"]);
    assert_eq!(d.rows.iter().map(|r| r.batch).collect::<Vec<_>>(), [1, 3]);
    for r in &d.rows {
        assert!(r.step_s > 0.0 && r.prefill_s > 0.0, "{r:?}");
        assert!((r.tokens_per_s - r.batch as f64 / r.step_s).abs() < 1e-6 * r.tokens_per_s);
        assert!(r.bound_tokens_per_s > 0.0 && r.memory_bound, "{r:?}");
    }
    // Three requests read the weights once, so their step reads less than 3× one's.
    assert!(d.rows[1].bytes_per_step < 3.0 * d.rows[0].bytes_per_step);
    let t = table(&d);
    assert!(t.contains("| 3 |") && t.contains("H100"), "{t}");
}

#[test]
fn sizes_beyond_the_context_or_zero_are_refused() {
    let too_long = DecodeBenchArgs {
        prompt_len: 200,
        ..args()
    };
    let e = run_on(&CpuBackend::new(), &too_long, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("context of 128"), "{e}");
    let zero = DecodeBenchArgs {
        batches: vec![0],
        ..args()
    };
    let e = run_on(&CpuBackend::new(), &zero, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("--batches"), "{e}");
}
