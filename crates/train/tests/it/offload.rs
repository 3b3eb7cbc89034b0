//! `--offload`: the optimizer on the host computes, on the CPU backend, what it computes
//! on the device, bit for bit, in f32 and mixed precision and with 8-bit moments; the
//! device no longer holds the moments; checkpoints resume either way.
#![cfg(not(target_arch = "wasm32"))]

use brrr_amp::{AmpConfig, AmpMode};
use brrr_cpu::CpuBackend;
use brrr_train::{StepStats, TrainConfig, TrainState, Trainer};

fn trainer(cfg: &TrainConfig) -> Trainer<CpuBackend> {
    crate::small::trainer(cfg, crate::small::DICKENS)
}

fn config(offload: bool) -> TrainConfig {
    TrainConfig {
        steps: 6,
        offload,
        ..crate::small::config()
    }
}

fn bits(s: &StepStats) -> (u64, u32, u64) {
    (s.step, s.loss.to_bits(), s.grad_norm.to_bits())
}

fn run(cfg: &TrainConfig, steps: usize) -> (Trainer<CpuBackend>, Vec<StepStats>) {
    let mut t = trainer(cfg);
    let stats = (0..steps).map(|_| t.step_blocking().unwrap()).collect();
    (t, stats)
}

#[test]
fn offloaded_updates_match_the_device_update_bit_for_bit() {
    type Set = fn(&mut TrainConfig);
    let variants: [(&str, Set); 3] = [
        ("f32 adamw", |_| {}),
        ("adamw8bit", |c| c.optimizer = "adamw8bit".parse().unwrap()),
        ("bf16", |c| c.amp = AmpConfig::new(AmpMode::Bf16)),
    ];
    for (name, set) in variants {
        let (mut plain_cfg, mut off_cfg) = (config(false), config(true));
        set(&mut plain_cfg);
        set(&mut off_cfg);
        let (plain, want) = run(&plain_cfg, 6);
        let (off, got) = run(&off_cfg, 6);
        let b = |v: &[StepStats]| v.iter().map(bits).collect::<Vec<_>>();
        assert_eq!(b(&got), b(&want), "{name}");
        // The same weights and moments in the checkpoint.
        let (p, o) = (
            plain.state_blocking().unwrap(),
            off.state_blocking().unwrap(),
        );
        assert_eq!(p.adamw_step, o.adamw_step, "{name}");
        for (a, b) in p.params.iter().zip(&o.params) {
            assert_eq!(a.value.to_f64(), b.value.to_f64(), "{name}: {}", a.name);
            assert_eq!(
                a.moments.as_ref().map(|(m, v)| (m.to_f64(), v.to_f64())),
                b.moments.as_ref().map(|(m, v)| (m.to_f64(), v.to_f64())),
                "{name}: {}",
                a.name
            );
        }
        // The moments left the device: its peak is lower by about their size.
        let host = off.optimizer_state_bytes() as u64;
        assert_eq!(host as usize, plain.optimizer_state_bytes(), "{name}");
        let saved = want[5].peak_bytes.saturating_sub(got[5].peak_bytes);
        assert!(saved >= host * 9 / 10, "{name}: {saved} of {host} bytes");
        let t = off.offload().unwrap().timing();
        assert_eq!(t.steps, 6);
        assert!(t.to_host > 0.0 && t.update > 0.0 && t.to_device > 0.0 && t.wall > 0.0);
    }
}

#[test]
fn offloaded_runs_resume_bit_for_bit_from_either_kind_of_checkpoint() {
    let (_, all) = run(&config(false), 6);
    for (saved_with, resumed_with) in [(true, true), (false, true), (true, false)] {
        let (first, _) = run(&config(saved_with), 3);
        let bytes = first.state_blocking().unwrap().to_bytes().unwrap();
        let ck = brrr_train::ckpt::from_bytes(&bytes, "mem").unwrap();
        let state = TrainState::from_checkpoint(&ck).unwrap();
        let mut resumed = trainer(&config(resumed_with));
        resumed.restore(&state).unwrap();
        // A checkpoint taken before the first resumed step keeps the restored moments.
        let again = resumed.state_blocking().unwrap();
        assert!(again.params.iter().all(|p| p.moments.is_some()));
        for want in &all[3..] {
            let got = resumed.step_blocking().unwrap();
            assert_eq!(bits(&got), bits(want), "{saved_with} -> {resumed_with}");
        }
    }
}

/// Under `--amp bf16` the device hands its f32 masters to the host; a trainer that has
/// stepped and then restores a checkpoint gets them back and goes on bit for bit.
#[test]
fn an_offloaded_mixed_precision_trainer_restores_after_stepping() {
    let set = |offload| TrainConfig {
        amp: AmpConfig::new(AmpMode::Bf16),
        ..config(offload)
    };
    let (plain, all) = run(&set(false), 6);
    drop(plain);
    let (first, _) = run(&set(false), 3);
    let state = first.state_blocking().unwrap();
    let (mut off, _) = run(&set(true), 2);
    off.restore(&state).unwrap();
    for want in &all[3..] {
        assert_eq!(bits(&off.step_blocking().unwrap()), bits(want));
    }
}
