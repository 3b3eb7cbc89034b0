//! `TrainConfig::checkpoint`: every activation-recomputation strategy trains bit for bit
//! like none on brrr-cpu, holds fewer activation bytes, and an impossible budget is an
//! error naming the smallest feasible one.
#![cfg(not(target_arch = "wasm32"))]

use brrr_checkpoint::{Strategy, min_budget};
use brrr_cpu::CpuBackend;
use brrr_nn::Module;
use brrr_train::{
    Action, Batcher, Corpus, MicroBatchSchedule, StepStats, TrainConfig, Trainer, val_batches,
};

fn config(checkpoint: Strategy) -> TrainConfig {
    let mut cfg = TrainConfig {
        steps: 3,
        batch_size: 2,
        seq_len: 16,
        grad_accum: 2,
        seed: 5,
        warmup_steps: 1,
        eval_every: 3,
        eval_batches: 1,
        corpus: "t.txt".into(),
        checkpoint,
        ..TrainConfig::default()
    };
    (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) = (4, 2, 32);
    cfg
}

fn run(checkpoint: Strategy) -> (Vec<StepStats>, Vec<Vec<u32>>) {
    let text = "Four score and seven years ago our fathers brought forth. ".repeat(40);
    let c = Corpus::from_text("t.txt", text).unwrap();
    let cfg = config(checkpoint);
    let data = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let val = val_batches(c.val(), cfg.batch_size, cfg.seq_len, 1).unwrap();
    let mut t = Trainer::new(&CpuBackend::new(), cfg, Box::new(data), val).unwrap();
    // Two micro-batches in flight at once (GPipe's order).
    let gpipe = vec![
        Action::Forward(0),
        Action::Forward(1),
        Action::Backward(1),
        Action::Backward(0),
    ];
    t.set_schedule(MicroBatchSchedule::new(gpipe).unwrap())
        .unwrap();
    let stats = (0..3).map(|_| t.step_blocking().unwrap()).collect();
    let weights = t
        .model()
        .params()
        .iter()
        .map(|p| {
            let h = brrr_backend::block_on(p.value.to_host()).unwrap().to_f32();
            h.iter().map(|x| x.to_bits()).collect()
        })
        .collect();
    (stats, weights)
}

#[test]
fn every_strategy_trains_bitwise_like_none() {
    let (want, want_w) = run(Strategy::None);
    let smallest = min_budget(&config(Strategy::None).recompute_chain()).unwrap();
    for s in [
        Strategy::Every(1),
        Strategy::Every(2),
        Strategy::Sqrt,
        Strategy::Selective,
        Strategy::Budget(smallest),
    ] {
        let (got, w) = run(s);
        for (a, b) in got.iter().zip(&want) {
            assert_eq!(a.loss.to_bits(), b.loss.to_bits(), "{s}");
            assert_eq!(a.grad_norm.to_bits(), b.grad_norm.to_bits(), "{s}");
            assert!(
                a.activation_peak_bytes < b.activation_peak_bytes,
                "{s}: no saving"
            );
        }
        assert!(w == want_w, "{s}: weights differ");
    }
}

#[test]
fn an_impossible_budget_names_the_smallest_feasible_one() {
    let smallest = min_budget(&config(Strategy::None).recompute_chain()).unwrap();
    let err = config(Strategy::Budget(1000))
        .validate()
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("budget:{smallest}")), "{err}");
}

#[test]
fn old_configs_without_the_field_load_as_none() {
    let mut text = toml::to_string(&config(Strategy::Sqrt)).unwrap();
    assert!(text.contains("checkpoint = \"sqrt\""), "{text}");
    text = text.replace("checkpoint = \"sqrt\"\n", "");
    let cfg: TrainConfig = toml::from_str(&text).unwrap();
    assert_eq!(cfg.checkpoint, Strategy::None);
}
