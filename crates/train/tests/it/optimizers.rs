//! A run with `--optimizer adamw8bit` or `galore:RANK`: its checkpoint holds the
//! optimizer's own state, and a restored run continues bit for bit.
#![cfg(not(target_arch = "wasm32"))]

use brrr_cpu::CpuBackend;
use brrr_nn::Optimizer;
use brrr_train::{OptimState, StepStats, TrainConfig, TrainState, Trainer};

fn trainer(cfg: &TrainConfig) -> Trainer<CpuBackend> {
    crate::small::trainer(cfg, crate::small::DICKENS)
}

fn config(optimizer: &str) -> TrainConfig {
    TrainConfig {
        optimizer: optimizer.parse().unwrap(),
        ..crate::small::config()
    }
}

#[test]
fn each_optimizer_resumes_bit_for_bit_from_its_checkpoint() {
    for name in ["adamw8bit", "galore:4:3"] {
        let cfg = config(name);
        let mut full = trainer(&cfg);
        let all: Vec<StepStats> = (0..8).map(|_| full.step_blocking().unwrap()).collect();
        let mut first = trainer(&cfg);
        for _ in 0..5 {
            first.step_blocking().unwrap();
        }
        let bytes = first.state_blocking().unwrap().to_bytes().unwrap();
        let ck = brrr_train::ckpt::from_bytes(&bytes, "mem").unwrap();
        let state = TrainState::from_checkpoint(&ck).unwrap();
        // The optimizer's own state is in the file, under its own names.
        let kind = |p: &brrr_train::ParamState| match &p.optim {
            Some(OptimState::Bits8 { .. }) => "8-bit",
            Some(OptimState::GaLore(_)) => "galore",
            None => "f32",
        };
        let kinds: Vec<&str> = state.params.iter().map(kind).collect();
        let want = if name == "adamw8bit" {
            "8-bit"
        } else {
            "galore"
        };
        assert!(kinds.contains(&want), "{name}: {kinds:?}");
        assert!(
            kinds.contains(&"f32"),
            "{name}: small parameters keep f32 moments"
        );
        let prefix = if name == "adamw8bit" {
            "adamw8bit."
        } else {
            "galore."
        };
        assert!(ck.tensors.iter().any(|t| t.0.starts_with(prefix)), "{name}");

        let mut resumed = trainer(&cfg);
        resumed.restore(&state).unwrap();
        for want in &all[5..] {
            let got = resumed.step_blocking().unwrap();
            assert_eq!(
                (got.step, got.loss.to_bits(), got.grad_norm.to_bits()),
                (want.step, want.loss.to_bits(), want.grad_norm.to_bits()),
                "{name}"
            );
        }
        // A run with another optimizer cannot take this state.
        let e = trainer(&config("adamw"))
            .restore(&state)
            .unwrap_err()
            .to_string();
        let what = if name == "adamw8bit" {
            "8-bit"
        } else {
            "GaLore"
        };
        assert!(e.contains(&format!("holds {what} optimizer state")), "{e}");
    }
}

#[test]
fn a_config_keeps_its_optimizer_through_toml() {
    let mut cfg = config("galore:16:100");
    cfg.optimizer = Optimizer::AdamW8bit;
    let text = toml::to_string(&cfg).unwrap();
    assert!(text.contains("optimizer = \"adamw8bit\""), "{text}");
    let back: TrainConfig = toml::from_str(&text).unwrap();
    assert_eq!(back.optimizer, Optimizer::AdamW8bit);
    // A config written before the option existed is plain AdamW.
    let old = text.replace("optimizer = \"adamw8bit\"\n", "");
    let old: TrainConfig = toml::from_str(&old).unwrap();
    assert_eq!(old.optimizer, Optimizer::AdamW);
}

/// brrr-perf's estimate of the optimizer state (the layout planner's and the web memory
/// calculator's model, from the model's shape alone) against what a run allocated, for
/// each optimizer: exactly, 8-bit included (its parameters under 4096 elements keep f32
/// moments in both, and this model's larger ones fill whole 2048-value blocks).
#[test]
fn brrr_perf_estimates_the_state_a_run_allocates() {
    use brrr_perf::memory::{
        Optimizer as Est, Precision, TrainingSetup, TransformerConfig, estimate_memory,
    };
    for (name, est) in [
        ("adamw", Est::Adam),
        ("adamw8bit", Est::Adam8bit),
        ("galore:8:3", Est::GaLore { rank: 8 }),
    ] {
        let cfg = config(name);
        let mut t = trainer(&cfg);
        t.step_blocking().unwrap();
        let got = t.optimizer_state_bytes() as f64;
        // The summary says the same.
        let line = brrr_train::Engine::report(&t)
            .into_iter()
            .find(|l| l.starts_with("optimizer"))
            .unwrap();
        let shown = format!("{:.2} MiB of state", got / f64::from(1 << 20));
        assert!(line.contains(&shown), "{line}");
        let m = &cfg.model;
        let shape = TransformerConfig::gpt(
            m.n_layer as u64,
            m.n_embd as u64,
            m.n_head as u64,
            m.block_size as u64,
            m.vocab_size as u64,
        );
        let setup = TrainingSetup {
            precision: Precision::Fp32,
            optimizer: est,
            ..TrainingSetup::default()
        };
        let want = estimate_memory(&shape, &setup)
            .unwrap()
            .states
            .optimizer_states;
        assert!(
            (got - want).abs() <= 1e-9 * want,
            "{name}: allocated {got} B, estimated {want} B"
        );
    }
}
