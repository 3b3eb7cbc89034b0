//! Inputs a user can type that once gave wrapped integers, `inf`/`NaN` in reports, or a
//! fits/doesn't-fit verdict in the wrong unit. Each must be an error that names the input, or
//! a finite, correct figure.

use brrr_perf::PerfError;
use brrr_perf::comms::{self, Algorithm, Collective, Link};
use brrr_perf::memory::{PipelineSchedule, TrainingSetup, TransformerConfig, estimate_memory};
use brrr_perf::report::{CommsInputs, comms_report, memory_report};
use brrr_perf::roofline::{OpCost, gemm_quantization, round_up};
use brrr_perf::specs::{DType, gpu, gpus};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn comms(gpus: u64) -> CommsInputs {
    CommsInputs {
        gpu: gpu("h100").unwrap(),
        gpus,
        bytes: 1e9,
        dtype: DType::Bf16,
        d_model: None,
        d_ff: None,
        tokens_per_gpu: None,
        moe: None,
        alpha_s: None,
    }
}

/// Vendors' "80 GB" of HBM is 80 GiB: `nvidia-smi` reports 81559 MiB on an H100 80GB, more
/// than 80e9 bytes. Every card's capacity is a whole number of GiB.
#[test]
fn capacities_are_binary() {
    assert_eq!(gpu("h100").unwrap().memory_bytes, 80.0 * GIB);
    assert_eq!(gpu("a100-40gb").unwrap().memory_bytes, 40.0 * GIB);
    assert_eq!(gpu("h200").unwrap().memory_bytes, 141.0 * GIB);
    assert_eq!(gpu("h100").unwrap().l2_bytes, Some(50.0 * 1024.0 * 1024.0));
    for g in gpus() {
        assert_eq!((g.memory_bytes / GIB).fract(), 0.0, "{}", g.id);
    }
}

/// A model needing between 80e9 and 80 GiB (85.9e9) bytes fits an 80 GB H100. Before, the
/// capacity was 80e9 bytes and the verdict "does NOT fit".
#[test]
fn fits_verdict_uses_the_real_capacity() {
    let h100 = gpu("h100").unwrap();
    let mut found = false;
    for layers in 1..400 {
        let cfg = TransformerConfig::gpt(layers, 4096, 32, 2048, 50257);
        let m = estimate_memory(&cfg, &TrainingSetup::default()).unwrap();
        let total = m.total();
        if total > 80e9 && total <= 80.0 * GIB {
            let text = memory_report(&m, Some(&h100)).to_string();
            assert!(
                text.contains("of 80.0 GiB") && text.contains("— fits."),
                "{text}"
            );
            found = true;
        } else if total > 80.0 * GIB {
            let text = memory_report(&m, Some(&h100)).to_string();
            assert!(text.contains("does NOT fit"), "{text}");
            break;
        }
    }
    assert!(found, "no layer count landed between 80e9 bytes and 80 GiB");
}

#[test]
fn overflowing_products_are_errors() {
    let gpt2 = TransformerConfig::preset("gpt2").unwrap();
    let too_large = |s: TrainingSetup| match estimate_memory(&gpt2, &s) {
        Err(PerfError::TooLarge { what, .. }) => what,
        other => panic!("expected TooLarge, got {other:?}"),
    };
    let half = 1u64 << 63;
    assert_eq!(
        too_large(TrainingSetup {
            dp: half,
            tp: 2,
            ..Default::default()
        }),
        "GPUs (DP × TP × PP)"
    );
    assert_eq!(
        too_large(TrainingSetup {
            micro_batch: half,
            grad_accum: 2,
            ..Default::default()
        }),
        "global batch (sequences per step)"
    );
    assert_eq!(
        too_large(TrainingSetup {
            micro_batch: 1 << 60,
            ..Default::default()
        }),
        "tokens per step"
    );
    assert_eq!(
        too_large(TrainingSetup {
            pp: 2,
            schedule: PipelineSchedule::Interleaved { chunks: half },
            ..Default::default()
        }),
        "pipeline stages × chunks"
    );
    // 4h saturates and fails validation instead of wrapping to a small MLP.
    let huge = TransformerConfig::gpt(1, 1 << 62, 1, 1, 1);
    assert!(huge.validate().is_err());
    assert!(gemm_quantization(u64::MAX, u64::MAX, 1, 1, 108, 1).is_err());
    assert!(gemm_quantization(1, 1, 1, 1, u64::MAX, 2).is_err());
    assert!(round_up(u64::MAX, 64).is_err());
    assert_eq!(round_up(50257, 64).unwrap(), 50304);
    assert!(OpCost::elementwise(1, 1.0, u64::MAX, u64::MAX, DType::Bf16).is_ok());
    assert!(brrr_perf::flops::training_flops(1e300, 1e300).is_err());
}

/// One rank communicates nothing: an error that says so, never `inf` algbw or `NaN` busbw.
#[test]
fn comms_needs_two_gpus_and_valid_latency() {
    let e = comms_report(&comms(1)).unwrap_err().to_string();
    assert!(e.contains("at least 2"), "{e}");
    assert!(comms_report(&comms(0)).is_err());
    for alpha in [-5e-6, f64::NAN, f64::INFINITY] {
        let inp = CommsInputs {
            alpha_s: Some(alpha),
            ..comms(8)
        };
        assert!(comms_report(&inp).is_err(), "alpha {alpha}");
    }
    for bad in [
        CommsInputs {
            d_model: Some(-1.0),
            ..comms(8)
        },
        CommsInputs {
            d_ff: Some(f64::NAN),
            ..comms(8)
        },
        CommsInputs {
            bytes: f64::INFINITY,
            ..comms(8)
        },
        CommsInputs {
            bytes: 0.5,
            ..comms(8)
        },
        CommsInputs {
            moe: Some((4, 8)),
            ..comms(8)
        },
    ] {
        assert!(comms_report(&bad).is_err(), "{bad:?}");
    }
    let text = comms_report(&comms(2)).unwrap().to_string();
    assert!(!text.contains("inf") && !text.contains("NaN"), "{text}");
    // The library's one-rank case stays defined: 0 s.
    let link = Link::new(2e-6, 450e9).unwrap();
    assert_eq!(
        comms::collective_time(Collective::AllReduce, Algorithm::Ring, 1, 1e9, link).unwrap(),
        0.0
    );
}

/// nccl-tests PERFORMANCE.md: busbw = algbw · 2(n−1)/n for all-reduce; the report's numbers
/// follow it and its header says it that way round.
#[test]
fn report_bus_bandwidth_follows_nccl_tests() {
    let r = comms_report(&comms(4)).unwrap();
    assert!(
        r.to_string()
            .contains("busbw = algbw · 2(n−1)/n for all-reduce"),
        "{r}"
    );
    for row in r.json["collectives"].as_array().unwrap() {
        let (alg, bus) = (
            row["algbw"].as_f64().unwrap(),
            row["busbw"].as_f64().unwrap(),
        );
        if row["collective"] == "all-reduce" {
            assert!((bus - alg * 2.0 * 3.0 / 4.0).abs() <= 1e-9 * bus, "{row}");
        }
    }
}
