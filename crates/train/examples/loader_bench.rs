//! The loader against the trainer: what the data-loading tables in `bench/RESULTS.md` come
//! from.
//!
//! ```sh
//! cargo run -p brrr-train --example loader_bench
//! ```
//!
//! 1. Loader throughput: tokens/s of `ShardLoader` batches (`[16, 1024]` windows from
//!    memory-mapped u16 shards) on one thread, and on several threads at once (one rank
//!    each), against the tokens/s the trainer consumes (the default tiny GPT on brrr-cpu).
//! 2. Step time with prefetch off and on when producing a batch is slow (a source that
//!    takes a fixed time per batch, as tokenizing or decoding on the fly does), and the
//!    `data` span of the trace, the step's wait for its batch.
//! 3. Imbalance (`max / mean` of the per-rank `Σ len²`) before and after balancing, on a
//!    long-tailed length distribution.

use brrr_backend::Result;
use brrr_cpu::CpuBackend;
use brrr_data::pack::{balance, imbalance, long_tailed_lengths, rank_costs, round_robin};
use brrr_data::shard::{TokenWidth, write_shard};
use brrr_data::{Batch, BatchSource, Batcher, synthetic_corpus};
use brrr_data::{Prefetcher, Shard, ShardLoader};
use brrr_perf::trace::Tracer;
use brrr_train::{TrainConfig, Trainer};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| brrr_backend::Error::io("tempdir", e))?;
    let shards = make_shards(dir.path())?;
    let trainer_tps = trainer_tokens_per_s()?;
    loader_throughput(&shards, trainer_tps)?;
    prefetch_on_off()?;
    balancing();
    Ok(())
}

/// 4 shards of 8M GPT-2-sized random tokens (64 MB).
fn make_shards(dir: &std::path::Path) -> Result<Arc<Vec<Shard>>> {
    let mut v = Vec::new();
    let mut x: u64 = 1;
    for s in 0..4 {
        let tokens: Vec<u32> = (0..8 << 20)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 33) % 50257) as u32
            })
            .collect();
        let p = dir.join(format!("bench_train_{s:06}.bin"));
        write_shard(&p, &tokens, TokenWidth::U16)?;
        v.push(Shard::open(&p)?);
    }
    Ok(Arc::new(v))
}

fn loader_throughput(shards: &Arc<Vec<Shard>>, trainer_tps: f64) -> Result<()> {
    let (b, t, batches) = (16, 1024, 200);
    println!("\n| loader | threads | tokens/s | × the trainer's consumption |");
    println!("|---|---:|---:|---:|");
    for threads in [1usize, 2, 4] {
        let t0 = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|rank| {
                let shards = Arc::clone(shards);
                std::thread::spawn(move || -> Result<usize> {
                    let mut l = ShardLoader::new(shards, b, t, 1, 50257, rank, threads)?;
                    let mut n = 0;
                    for _ in 0..batches {
                        n += l.next_batch()?.inputs.len();
                    }
                    Ok(n)
                })
            })
            .collect();
        let mut tokens = 0;
        for h in handles {
            tokens += h
                .join()
                .map_err(|_| brrr_backend::Error::invalid("bench", "a loader thread panicked"))??;
        }
        let tps = tokens as f64 / t0.elapsed().as_secs_f64();
        println!(
            "| ShardLoader, [{b}, {t}] windows | {threads} | {tps:.3e} | {:.0}× |",
            tps / trainer_tps
        );
    }
    println!("| trainer (tiny GPT, brrr-cpu, 16 × 128 tokens a step) | | {trainer_tps:.0} | 1× |");
    Ok(())
}

fn tiny_config(steps: u64) -> TrainConfig {
    TrainConfig {
        steps,
        eval_every: 1_000_000,
        eval_batches: 1,
        ..TrainConfig::default()
    }
}

/// Tokens/s of the default tiny GPT's training step on brrr-cpu.
fn trainer_tokens_per_s() -> Result<f64> {
    let cfg = tiny_config(12);
    let corpus = synthetic_corpus(1)?;
    let data = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
    let mut tr = Trainer::new(&CpuBackend::new(), cfg.clone(), Box::new(data), Vec::new())?;
    tr.step_blocking()?; // warm-up
    let t0 = Instant::now();
    for _ in 1..cfg.steps {
        tr.step_blocking()?;
    }
    let tokens = (cfg.steps - 1) as usize * cfg.tokens_per_step();
    Ok(tokens as f64 / t0.elapsed().as_secs_f64())
}

/// A source that takes `delay` to produce each batch, as one that tokenizes or decodes
/// on the fly does.
struct Slow {
    inner: Batcher,
    delay: Duration,
}

impl BatchSource for Slow {
    fn next_batch(&mut self) -> Result<Batch> {
        std::thread::sleep(self.delay);
        BatchSource::next_batch(&mut self.inner)
    }
    fn position(&self) -> String {
        BatchSource::position(&self.inner)
    }
    fn set_position(&mut self, p: &str) -> Result<()> {
        BatchSource::set_position(&mut self.inner, p)
    }
    fn fingerprint(&self) -> String {
        BatchSource::fingerprint(&self.inner)
    }
}

/// A smaller model than the default, so that a step and a slow batch take comparable
/// time on a CPU: 2 layers × 64 wide, 8 × 64 tokens a step.
fn small_config(steps: u64) -> TrainConfig {
    let mut cfg = tiny_config(steps);
    cfg.model.n_layer = 2;
    cfg.model.n_embd = 64;
    cfg.model.n_head = 2;
    cfg.model.block_size = 64;
    cfg.batch_size = 8;
    cfg.seq_len = 64;
    cfg
}

fn prefetch_on_off() -> Result<()> {
    let steps = 25u64;
    let cfg = small_config(steps);
    let corpus = synthetic_corpus(1)?;
    println!(
        "\n| batch production | prefetch | step time (median) | `data` span per step | losses |"
    );
    println!("|---|---:|---:|---:|---|");
    let mut reference: Option<Vec<f32>> = None;
    for delay_ms in [0u64, 30] {
        for depth in [0usize, 2] {
            let inner = Batcher::for_corpus(&corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
            let slow = Slow {
                inner,
                delay: Duration::from_millis(delay_ms),
            };
            let data = Prefetcher::new(Box::new(slow), depth);
            let mut tr = Trainer::new(&CpuBackend::new(), cfg.clone(), Box::new(data), Vec::new())?;
            let tracer = Tracer::new();
            tr.set_tracer(tracer);
            let mut times = Vec::new();
            let mut losses = Vec::new();
            for _ in 0..steps {
                let t0 = Instant::now();
                let s = tr.step_blocking()?;
                times.push(t0.elapsed().as_secs_f64() * 1e3);
                losses.push(s.loss);
            }
            // The first step also waits for the pipeline to fill: leave it out.
            let mut rest = times[1..].to_vec();
            rest.sort_by(f64::total_cmp);
            let median = rest[rest.len() / 2];
            let data_us = tr
                .tracer()
                .summary()
                .iter()
                .find(|(n, _, _)| n == "data")
                .map_or(0.0, |(_, t, c)| t / *c as f64);
            let same = match &reference {
                None => {
                    reference = Some(losses);
                    "reference"
                }
                Some(r) if *r == losses => "identical",
                Some(_) => "DIFFERENT",
            };
            println!(
                "| {} | {} | {median:.1} ms | {:.2} ms | {same} |",
                if delay_ms == 0 {
                    "in memory (Batcher)".to_string()
                } else {
                    format!("{delay_ms} ms a batch")
                },
                if depth == 0 {
                    "off".to_string()
                } else {
                    format!("{depth}")
                },
                data_us / 1e3
            );
        }
    }
    Ok(())
}

fn balancing() {
    println!(
        "\n| sequences (long-tailed lengths, 32..8192) | ranks | imbalance, round robin | imbalance, balanced (LPT on Σ len²) | lower bound (the longest sequence alone) |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for (n, world) in [(256usize, 4usize), (1024, 8), (4096, 64)] {
        let lens = long_tailed_lengths(n, 8192, 7);
        let before = imbalance(&rank_costs(&lens, &round_robin(n, world), world));
        let assign = balance(&lens, world).expect("world > 0");
        let costs = rank_costs(&lens, &assign, world);
        let after = imbalance(&costs);
        let mean = costs.iter().sum::<f64>() / world as f64;
        let biggest = lens.iter().map(|&l| (l * l) as f64).fold(0.0, f64::max);
        let bound = biggest.max(mean) / mean;
        println!("| {n} | {world} | {before:.2} | {after:.2} | {bound:.2} |");
    }
}
