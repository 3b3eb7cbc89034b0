//! Measures ZeRO-3 prefetch on `brrr train`'s default model, `--dp 4 --zero 3`
//! (in-process ranks on the CPU backend), with and without prefetching: the share of the
//! parameter all-gathers' time hidden behind compute (`1 - waited / gathered`, mean over
//! the timed steps), the median step time, the peak device bytes of rank 0, the most
//! blocks gathered at once, and whether the losses are the same bit for bit.
//!
//!     cargo run -p brrr-dp --example zero3_prefetch [-- STEPS [TRACE.json]]
//!
//! With a trace path, rank 0 of the prefetched run writes a Chrome trace there: the
//! `all-gather bucket K` spans on the communicator's track run beside the `forward h.N`
//! and `backward h.N` spans on the compute track.

use brrr_collectives::run_in_process;
use brrr_cpu::CpuBackend;
use brrr_dp::{DataParallel, DpConfig};
use brrr_perf::trace::Tracer;
use brrr_train::{Batcher, TrainConfig, synthetic_corpus};
use std::sync::Arc;

const WORLD: usize = 4;

/// What rank 0 measured in one run.
struct Measured {
    losses: Vec<f32>,
    hidden: f64,
    step_ms: f64,
    peak: u64,
    max_blocks: usize,
}

fn run(cfg: &TrainConfig, prefetch: bool, trace: Option<&str>) -> brrr_backend::Result<Measured> {
    let corpus = synthetic_corpus(cfg.seed)?;
    let dp = DpConfig::new(WORLD, 3);
    let out = run_in_process(WORLD, |comm| {
        let b = CpuBackend::new();
        let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
        let mut e = DataParallel::new(&b, cfg.clone(), dp.clone(), comm, Box::new(data))?;
        e.set_prefetch(prefetch);
        let tracer = Arc::new(match (trace, comm.rank()) {
            (Some(_), 0) => Tracer::new(),
            _ => Tracer::disabled(),
        });
        e.set_tracer(tracer.clone());
        let (mut losses, mut hidden, mut times) = (Vec::new(), Vec::new(), Vec::new());
        let (mut peak, mut max_blocks) = (0, 0);
        for s in 0..cfg.steps {
            let st = e.step()?;
            losses.push(st.loss);
            let r = e.report();
            peak = peak.max(r.peak_bytes);
            max_blocks = max_blocks.max(r.max_blocks_gathered);
            if s > 0 {
                hidden.push(r.gather_hidden_fraction());
                times.push(st.seconds.unwrap_or(f64::NAN));
            }
        }
        if let (Some(p), true) = (trace, tracer.is_enabled()) {
            tracer
                .write_chrome_trace(p)
                .map_err(|err| brrr_backend::Error::invalid("trace", err.to_string()))?;
        }
        times.sort_by(f64::total_cmp);
        Ok(Measured {
            losses,
            hidden: hidden.iter().sum::<f64>() / hidden.len().max(1) as f64,
            step_ms: 1e3 * times.get(times.len() / 2).copied().unwrap_or(f64::NAN),
            peak,
            max_blocks,
        })
    });
    let rank0 = out
        .into_iter()
        .next()
        .ok_or_else(|| brrr_backend::Error::invalid("zero3_prefetch", "no rank"))?;
    Ok(rank0?)
}

fn main() -> brrr_backend::Result<()> {
    let mut argv = std::env::args().skip(1);
    let steps: u64 = argv.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let trace = argv.next();
    let cfg = TrainConfig {
        steps,
        ..TrainConfig::default()
    };
    println!(
        "Ψ = {} parameters ({} blocks), --dp {WORLD} --zero 3, global batch {} × {}, {steps} \
         steps (the first is not timed)\n",
        cfg.model.num_params(),
        cfg.model.n_layer,
        cfg.batch_size,
        cfg.seq_len
    );
    let off = run(&cfg, false, None)?;
    let on = run(&cfg, true, trace.as_deref())?;
    println!(
        "| prefetch | all-gather time hidden | step (median) | peak, rank 0 (B) | blocks gathered at once | losses |"
    );
    println!("|---|---:|---:|---:|---:|---|");
    for (name, m) in [("off", &off), ("on", &on)] {
        let same = match m.losses == off.losses {
            true => "identical",
            false => "DIFFERENT",
        };
        println!(
            "| {name} | {:.0}% | {:.1} ms | {} | {} | {same} |",
            100.0 * m.hidden,
            m.step_ms,
            m.peak,
            m.max_blocks
        );
    }
    Ok(())
}
