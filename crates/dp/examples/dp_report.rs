//! Measures `--dp 4` at ZeRO stages 0-3 on `brrr train`'s default model (in-process ranks
//! on the CPU backend) and prints the table in `bench/RESULTS.md`: per-rank model-state
//! bytes against `brrr-perf`'s estimate, bytes sent per step against the ring's theory, and
//! the share of the bucket collectives hidden behind the backward.
//!
//!     cargo run --release -p brrr-dp --example dp_report [-- STEPS [TRACE.json]]
//!
//! With a trace path, rank 0 of the stage-0 run writes a Chrome trace there.

use brrr_collectives::run_in_process;
use brrr_cpu::CpuBackend;
use brrr_dp::{DataParallel, DpConfig, StepReport, estimate_model_states};
use brrr_perf::trace::Tracer;
use brrr_train::{Batcher, TrainConfig, synthetic_corpus};
use std::sync::Arc;

const WORLD: usize = 4;

fn main() -> brrr_backend::Result<()> {
    let mut argv = std::env::args().skip(1);
    let steps: u64 = argv.next().and_then(|s| s.parse().ok()).unwrap_or(6);
    let trace = argv.next();
    let cfg = TrainConfig {
        steps,
        ..TrainConfig::default()
    };
    let corpus = synthetic_corpus(cfg.seed)?;
    let psi = cfg.model.num_params();
    println!(
        "Ψ = {psi} parameters, --dp {WORLD}, global batch {} × {}, {steps} steps (the \
         first is not timed)\n",
        cfg.batch_size, cfg.seq_len
    );
    println!(
        "| ZeRO | model states measured (B) | estimate (B) | diff | peak (B) | sent / step (B) \
         | theory (B) | hidden behind backward |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for zero in 0..=3u8 {
        let dp = DpConfig::new(WORLD, zero);
        let out = run_in_process(WORLD, |comm| {
            let b = CpuBackend::new();
            let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
            let mut e = DataParallel::new(&b, cfg.clone(), dp.clone(), comm, Box::new(data))?;
            let tracer = Arc::new(match (&trace, comm.rank(), zero) {
                (Some(_), 0, 0) => Tracer::new(),
                _ => Tracer::disabled(),
            });
            e.set_tracer(tracer.clone());
            let mut hidden = Vec::new();
            for s in 0..steps {
                e.step()?;
                if s > 0 {
                    hidden.push(e.report().hidden_fraction);
                }
            }
            if let (Some(p), true) = (&trace, tracer.is_enabled()) {
                tracer
                    .write_chrome_trace(p)
                    .map_err(|err| brrr_backend::Error::invalid("trace", err.to_string()))?;
            }
            Ok((e.report().clone(), hidden))
        });
        let (report, hidden): (StepReport, Vec<f64>) = out.into_iter().next().unwrap()?;
        let est = estimate_model_states(psi, zero, WORLD)?.total();
        let got = report.model_state_bytes as f64;
        let volume = if zero == 3 { 3.0 } else { 2.0 };
        let theory = 4.0 * volume * psi as f64 * (WORLD - 1) as f64 / WORLD as f64;
        let mean_hidden = hidden.iter().sum::<f64>() / hidden.len().max(1) as f64;
        println!(
            "| {zero} | {} | {est:.0} | {:+.3}% | {} | {} | {theory:.0} | {:.0}% |",
            report.model_state_bytes,
            100.0 * (got - est) / est,
            report.peak_bytes,
            report.comm.bytes_sent(),
            100.0 * mean_hidden
        );
    }
    Ok(())
}
