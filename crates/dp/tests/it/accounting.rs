//! What a step moves and what a rank holds, against the theory.
//!
//! Bytes: with Ψ the parameter count (each bucket padded to a multiple of the world size
//! n for the sharded stages: Ψ_pad), ZeRO's volumes per rank per step are 2Ψ for DDP
//! (an all-reduce is a reduce-scatter plus an all-gather) and stages 1-2 (reduce-scatter
//! Ψ + all-gather Ψ), and 3Ψ for stage 3 (all-gather Ψ in the forward and again in the
//! backward, reduce-scatter Ψ). The communicator counts two things: the logical size of
//! each collective (`elements`: an all-reduce's buffer counts once) and the elements this
//! rank put on the wire (`elements_sent`); a ring sends `(n-1)/n` of each volume, so the
//! sent elements must be `2(n-1)/n·Ψ` or `3(n-1)/n·Ψ`, times 4 bytes.
//!
//! Memory: the device bytes in use after a step (activations freed) are the model
//! states, compared with `brrr-perf`'s `model_state_bytes` (f32 weights and gradients,
//! AdamW's two f32 moments) within 10%.

use crate::common::*;
use brrr_dp::{estimate_model_states, padded_len};

#[test]
fn bytes_per_step_match_the_theory() {
    let c = config(1, 1);
    let psi = c.model.num_params() as u64;
    let n = WORLD as u64;
    for zero in 0..=3u8 {
        let ranks = data_parallel(&c, &dp_config(zero));
        let s = &ranks[0].1.comm;
        let buckets = ranks[0].1.comm_spans.len() as u64;
        let sent = s.elements_sent();
        match zero {
            0 => {
                assert_eq!(s.op("all-reduce").elements, psi);
                // Buckets whose size does not divide by n send up to n-1 elements more
                // or less than 2(n-1)/n of their size.
                let theory = 2 * (n - 1) * psi / n;
                assert!(sent.abs_diff(theory) <= buckets * n, "{sent} vs {theory}");
            }
            _ => {
                let rs = s.op("reduce-scatter").elements;
                let ag = s.op("all-gather").elements;
                assert!(rs >= psi && rs < psi + buckets * n, "{rs} vs Ψ {psi}");
                let gathers = if zero == 3 { 2 } else { 1 };
                assert_eq!(ag, gathers * rs, "all-gathers move Ψ_pad each");
                let theory = (1 + gathers) * (n - 1) * rs / n;
                assert_eq!(sent, theory, "zero {zero}");
            }
        }
        println!(
            "zero {zero}: Ψ = {psi}, sent {sent} elements = {} bytes, {:.3} Ψ(n-1)/n",
            4 * sent,
            sent as f64 / (psi as f64 * (n - 1) as f64 / n as f64)
        );
    }
    assert_eq!(padded_len(10, 4), 12);
}

#[test]
fn model_state_memory_matches_the_estimate() {
    let c = config(1, 1);
    let psi = c.model.num_params();
    for zero in 0..=3u8 {
        let ranks = data_parallel(&c, &dp_config(zero));
        let est = estimate_model_states(psi, zero, WORLD).unwrap().total();
        for (r, (_, report)) in ranks.iter().enumerate() {
            let got = report.model_state_bytes as f64;
            let err = (got - est).abs() / est;
            assert!(
                err <= 0.10,
                "zero {zero} rank {r}: measured {got} B vs estimate {est} B ({:.1}%)",
                100.0 * err
            );
            if r == 0 {
                println!(
                    "zero {zero}: measured {got} B, estimate {est} B ({:+.2}%), peak {} B",
                    100.0 * (got - est) / est,
                    report.peak_bytes
                );
            }
        }
    }
}
