//! Chapter "Activation recomputation": each strategy's schedule on `brrr train`'s
//! default GPT, its predicted memory, and the memory the CPU backend measures when the
//! executor runs it.

use crate::md::{Md, page};
use brrr_backend::{Backend, DType, Result};
use brrr_checkpoint::{Chain, Recompute, Schedule, Strategy, min_budget};
use brrr_cpu::CpuBackend;
use brrr_nn::{Gpt, MicroBatch};
use brrr_tensor::Tensor;
use brrr_train::TrainConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn mib(b: u64) -> String {
    format!("{:.2}", b as f64 / (1u64 << 20) as f64)
}

/// Peak bytes above the start of one forward and backward run by the executor.
fn measured_peak(cfg: &TrainConfig, chain: &Chain, schedule: &Schedule) -> Result<u64> {
    let backend = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut model = Gpt::new(&backend, cfg.model.clone(), DType::F32, &mut rng)?;
    let (b, t) = (cfg.batch_size, cfg.seq_len);
    let ids: Vec<u32> = (0..(b * t) as u32).map(|i| (i * 31 + 7) % 256).collect();
    let targets: Vec<i32> = ids.iter().map(|&i| ((i * 17 + 3) % 256) as i32).collect();
    let ids = Tensor::from_u32(&backend, &ids, [b, t])?;
    let targets = Tensor::from_i32(&backend, &targets, [b, t])?;
    let mut exec = Recompute::new(schedule.clone(), chain)?;
    let base = backend.memory_stats().bytes_in_use;
    backend.reset_peak_memory();
    let losses = exec.forward_loss(&mut model, MicroBatch(0), &ids, &targets)?;
    drop(losses);
    exec.backward(&mut model, MicroBatch(0), 1.0)?;
    Ok(backend.memory_stats().peak_bytes - base)
}

/// The strategies on the default GPT: kept, extra forward, predicted and measured peak.
fn strategies_table() -> Result<String> {
    let cfg = TrainConfig::default();
    let chain = cfg.recompute_chain();
    let plan_err =
        |e: brrr_checkpoint::PlanError| brrr_backend::Error::invalid("book", e.to_string());
    let none = Strategy::None
        .plan(&chain)
        .and_then(|s| s.simulate(&chain))
        .map_err(plan_err)?;
    let smallest = min_budget(&chain).map_err(plan_err)?;
    let mut t = Md::new(&[
        "`--checkpoint`",
        "the forward keeps",
        "extra forward",
        "predicted peak (MiB)",
        "measured peak (MiB)",
        "of no recomputation",
    ])
    .left(&[0, 1]);
    for s in [
        Strategy::None,
        Strategy::Selective,
        Strategy::Every(2),
        Strategy::Sqrt,
        Strategy::Every(1),
        Strategy::Budget((none.peak + smallest) / 2),
        Strategy::Budget(smallest),
    ] {
        let schedule = s.plan(&chain).map_err(plan_err)?;
        let curve = schedule.simulate(&chain).map_err(plan_err)?;
        let (stashes, inputs) = schedule.kept_after_forward();
        let name = |i: &usize| chain.segments[*i].name.clone();
        let mut kept = Vec::new();
        if !inputs.is_empty() {
            kept.push(format!(
                "inputs of {}",
                inputs.iter().map(name).collect::<Vec<_>>().join(", ")
            ));
        }
        kept.push(format!(
            "stashes of {}",
            stashes.iter().map(name).collect::<Vec<_>>().join(", ")
        ));
        let measured = measured_peak(&cfg, &chain, &schedule)?;
        t.row(vec![
            format!("`{s}`"),
            kept.join("; "),
            format!("{:.0}%", 100.0 * curve.extra_cost / chain.forward_cost()),
            mib(curve.peak),
            mib(measured),
            format!("{:.0}%", 100.0 * measured as f64 / none.peak as f64),
        ]);
    }
    Ok(page(&format!(
        "{}\nThe default GPT ({} blocks, {} heads, {} wide) on one micro-batch of {} × {} \
         tokens in f32; the peak is of the activations (bytes above the weights and \
         gradients), measured by `Backend::memory_stats` on brrr-cpu while \
         `brrr_checkpoint::Recompute` runs the schedule. The smallest feasible budget is \
         {} MiB.\n",
        t.render(),
        cfg.model.n_layer,
        cfg.model.n_head,
        cfg.model.n_embd,
        cfg.batch_size,
        cfg.seq_len,
        mib(smallest)
    )))
}

/// The segments of the default GPT's chain.
fn chain_table() -> String {
    let chain = TrainConfig::default().recompute_chain();
    let mut t = Md::new(&[
        "segment",
        "input x (MiB)",
        "stash (MiB)",
        "selective stash (MiB)",
        "forward (GFLOP)",
    ]);
    for s in &chain.segments {
        t.row(vec![
            s.name.clone(),
            mib(s.input),
            mib(s.stash),
            s.selective_stash.map_or("—".into(), mib),
            format!("{:.2}", s.forward / 1e9),
        ]);
    }
    page(&t.render())
}

/// The generated files of the chapter.
pub fn files() -> Result<Vec<(String, String)>> {
    Ok(vec![
        ("checkpointing-strategies.md".into(), strategies_table()?),
        ("checkpointing-chain.md".into(), chain_table()),
    ])
}
