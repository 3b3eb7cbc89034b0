//! Shared by `train_wgpu.rs` and `train_cuda.rs`: train with `brrr-train`'s [`Trainer`] on
//! a backend and on brrr-cpu with the same seed, data and schedule, and compare every
//! step's loss.
//!
//! Kernels differ in summation order (and a GPU's exp/log/tanh in their last bits), so
//! bit-equality is not expected; a wrong kernel shows up within a few steps as a growing
//! gap.

use brrr::data::DEFAULT_CORPUS;
use brrr_backend::Backend;
use brrr_conformance::CpuBackend;
use brrr_train::{Batcher, Corpus, TrainConfig, Trainer, val_batches};

/// `brrr train`'s default configuration for `steps` steps from seed 4242 with 5 warmup
/// steps, changed by `tweak`.
pub fn config(steps: u64, tweak: impl Fn(&mut TrainConfig)) -> TrainConfig {
    let mut cfg = TrainConfig {
        steps,
        seed: 4242,
        warmup_steps: 5,
        eval_every: 1000,
        eval_batches: 1,
        // Half the default rate: at 2e-3 with a 4 x 64 batch the loss spikes now and then
        // (seen at step 17 on an H100 and on the CPU alike), and a spike amplifies the
        // last-bit differences of two correct backends past any fixed tolerance.
        lr: 1e-3,
        min_lr: 1e-4,
        corpus: DEFAULT_CORPUS.to_string(),
        ..TrainConfig::default()
    };
    tweak(&mut cfg);
    cfg.validate().expect("a valid test configuration");
    cfg
}

/// Every step's training loss of `cfg` on `backend`.
pub fn losses<B: Backend>(backend: &B, corpus: &Corpus, cfg: &TrainConfig) -> Vec<f32> {
    let data = Batcher::for_corpus(corpus, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let val = val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches).unwrap();
    let mut trainer = Trainer::new(backend, cfg.clone(), Box::new(data), val).unwrap();
    (0..cfg.steps)
        .map(|_| trainer.step_blocking().expect("a training step").loss)
        .collect()
}

/// Trains `cfg` on `backend` and on the CPU and asserts that every step's training loss
/// agrees to `tol` relative. Returns the worst relative difference.
pub fn follows_cpu<B: Backend>(name: &str, backend: B, cfg: &TrainConfig, tol: f64) -> f64 {
    let corpus = Corpus::load(&cfg.corpus).expect("the shipped corpus");
    let cpu = losses(&CpuBackend::new(), &corpus, cfg);
    let dev = losses(&backend, &corpus, cfg);
    assert_eq!(cpu.len(), cfg.steps as usize, "{cpu:?}");
    assert_eq!(dev.len(), cpu.len());
    let mut worst = 0.0f64;
    for (i, (a, b)) in cpu.iter().zip(&dev).enumerate() {
        let s = i + 1;
        let rel = f64::from((a - b).abs() / a.abs());
        eprintln!("step {s:>3}: cpu {a:.6}  {name} {b:.6}  rel {rel:.1e}");
        assert!(
            rel <= tol,
            "step {s}: cpu loss {a}, {name} loss {b} (rel {rel:.2e} > {tol:.0e})"
        );
        worst = worst.max(rel);
    }
    worst
}

/// Tokens and log-probabilities of three prompts of different lengths decoded together,
/// greedily, by brrr-serve's engine on `backend`: 4-token blocks and a budget of 9 tokens
/// a step, so that prompts go in by chunks beside other requests' decodes, and every
/// step's keys and values are scattered into the paged cache and gathered back.
pub fn serve<B: Backend>(backend: &B, model: &brrr_nn::GptConfig) -> Vec<Vec<(u32, f32)>> {
    use brrr_serve::{EngineConfig, LlmEngine, SamplingParams};
    use rand::SeedableRng;
    let cfg = model.clone();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let model = brrr_nn::Gpt::new(backend, cfg, brrr_backend::DType::F32, &mut rng).unwrap();
    let config = EngineConfig {
        block_size: 4,
        num_blocks: 40,
        max_batch_tokens: 9,
        max_seqs: 3,
        vocab_limit: None,
        prefix_caching: false,
    };
    let mut engine = LlmEngine::new(model, config).unwrap();
    let prompts: [&[u32]; 3] = [&[10, 20, 30, 40, 50, 60, 70], &[5], &[200, 100, 7, 9]];
    let ids: Vec<_> = prompts
        .iter()
        .map(|p| {
            engine
                .add_request(p.to_vec(), SamplingParams::greedy(12))
                .unwrap()
        })
        .collect();
    let mut out = vec![Vec::new(); ids.len()];
    while engine.scheduler().num_unfinished() > 0 {
        for o in engine.step().unwrap() {
            let i = ids.iter().position(|&id| id == o.id).unwrap();
            out[i].push((o.token, o.logprob));
        }
    }
    out
}

/// [`serve`] on `backend` against the CPU, with the default model's shape changed by
/// `tweak`: the same tokens, log-probabilities within 1e-4. Returns the worst
/// log-probability difference.
pub fn serves_like_cpu<B: Backend>(
    name: &str,
    backend: &B,
    tweak: impl Fn(&mut brrr_nn::GptConfig),
) -> f32 {
    let mut model = TrainConfig::default().model;
    tweak(&mut model);
    let (cpu, dev) = (serve(&CpuBackend::new(), &model), serve(backend, &model));
    let mut worst = 0.0f32;
    for (i, (c, d)) in cpu.iter().zip(&dev).enumerate() {
        assert_eq!(c.len(), 12, "request {i}: {c:?}");
        let tokens = |v: &[(u32, f32)]| v.iter().map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(tokens(d), tokens(c), "request {i}: {name} against cpu");
        for (a, b) in c.iter().zip(d) {
            worst = worst.max((a.1 - b.1).abs());
        }
    }
    assert!(
        worst < 1e-4,
        "{name}: log-probabilities differ by {worst:e}"
    );
    worst
}
