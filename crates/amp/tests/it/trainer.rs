//! Mixed precision inside `brrr_train::Trainer` on brrr-cpu, on the shipped corpus.

use brrr_amp::{AmpConfig, AmpMode, LossScaling, ScalerConfig};
use brrr_backend::{DType, HostData, block_on};
use brrr_cpu::CpuBackend;
use brrr_nn::Module;
use brrr_train::data::{Batcher, Corpus, val_batches};
use brrr_train::{TrainConfig, Trainer};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../brrr/corpus/sotu.txt");

fn config(amp: AmpConfig, steps: u64, grad_accum: usize) -> TrainConfig {
    let mut cfg = TrainConfig {
        steps,
        batch_size: 8,
        seq_len: 64,
        grad_accum,
        warmup_steps: 10,
        lr: 3e-3,
        min_lr: 3e-4,
        eval_every: steps,
        eval_batches: 8,
        corpus: CORPUS.into(),
        amp,
        ..TrainConfig::default()
    };
    (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) = (2, 2, 64);
    cfg.model.block_size = 64;
    cfg
}

fn trainer(cfg: &TrainConfig) -> Trainer<CpuBackend> {
    let c = Corpus::load(CORPUS).unwrap();
    let data = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let val = val_batches(c.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches).unwrap();
    Trainer::new(&CpuBackend::new(), cfg.clone(), Box::new(data), val).unwrap()
}

fn masters(t: &Trainer<CpuBackend>) -> Vec<HostData> {
    t.model()
        .params()
        .iter()
        .map(|p| block_on(p.master.as_ref().expect("a master").to_host()).unwrap())
        .collect()
}

#[test]
fn the_model_follows_the_policy() {
    for (mode, dtype) in [(AmpMode::Bf16, DType::BF16), (AmpMode::Fp16, DType::F16)] {
        let t = trainer(&config(AmpConfig::new(mode), 1, 1));
        for p in t.model().params() {
            assert_eq!(p.value.dtype(), dtype, "{}", p.name);
            assert_eq!(p.master.as_ref().unwrap().dtype(), DType::F32);
            assert_eq!(p.grad.dtype(), DType::F32, "gradients accumulate in f32");
        }
    }
}

/// An initial scale of 2^40 makes f16 gradients overflow: each step skips, leaves the
/// masters alone and halves the scale exactly once, however many micro-batches the step
/// has (the check is per optimizer step; the scale is constant across its
/// micro-batches), until the scale fits and steps apply.
#[test]
fn overflowing_steps_are_skipped_once_per_optimizer_step() {
    let amp = AmpConfig {
        scaler: ScalerConfig {
            init_scale: 2f32.powi(40),
            ..ScalerConfig::default()
        },
        ..AmpConfig::new(AmpMode::Fp16)
    };
    let mut t = trainer(&config(amp, 40, 3));
    let mut expected_scale = 2f32.powi(40);
    let mut skipped = 0;
    let mut applied = 0;
    for _ in 0..40 {
        let before = masters(&t);
        let adamw_before = t.state_blocking().unwrap().adamw_step;
        let s = t.step_blocking().unwrap();
        let after = masters(&t);
        assert_eq!(before == after, s.skipped, "step {}", s.step);
        let adamw_after = t.state_blocking().unwrap().adamw_step;
        assert_eq!(adamw_after - adamw_before, u32::from(!s.skipped));
        if s.skipped {
            expected_scale /= 2.0;
            skipped += 1;
            assert_eq!(applied, 0, "overflows come first, at the too-large scales");
        } else {
            applied += 1;
        }
        assert_eq!(s.loss_scale, expected_scale, "step {}", s.step);
        assert!(s.loss.is_finite());
    }
    assert!(
        skipped >= 5 && applied >= 10,
        "{skipped} skipped, {applied} applied"
    );
}

/// bf16 runs without a scaler by default (its exponent range is f32's); asking for one
/// works the same as for f16.
#[test]
fn bf16_scales_only_when_asked() {
    let mut t = trainer(&config(AmpConfig::new(AmpMode::Bf16), 2, 1));
    let s = t.step_blocking().unwrap();
    assert_eq!((s.loss_scale, s.skipped), (1.0, false));
    let amp = AmpConfig {
        loss_scaling: LossScaling::Dynamic,
        ..AmpConfig::new(AmpMode::Bf16)
    };
    let mut t = trainer(&config(amp, 2, 1));
    assert_eq!(t.step_blocking().unwrap().loss_scale, 65536.0);
}

/// A checkpoint of an AMP run holds the f32 masters, and restoring it gives the same
/// compute copies.
#[test]
fn checkpoints_hold_the_masters() {
    let mut t = trainer(&config(AmpConfig::new(AmpMode::Fp16), 3, 1));
    t.step_blocking().unwrap();
    let state = t.state_blocking().unwrap();
    assert!(state.params.iter().all(|p| p.value.dtype() == DType::F32));
    let mut u = trainer(&config(AmpConfig::new(AmpMode::Fp16), 3, 1));
    u.restore(&state).unwrap();
    assert_eq!(masters(&t), masters(&u));
    for (a, b) in t.model().params().iter().zip(u.model().params()) {
        assert_eq!(
            block_on(a.value.to_host()).unwrap(),
            block_on(b.value.to_host()).unwrap()
        );
    }
}

/// The scaler's state travels in checkpoints: an fp16 run stopped and resumed (through
/// the file's bytes) continues with the scale, growth tracker and hysteresis count it
/// had, and reports the same losses and loss scales as the run that never stopped. A
/// checkpoint without that state (written before it was kept) still loads, and the
/// resumed scaler starts again at `init_scale`.
#[test]
fn a_resumed_fp16_run_keeps_its_loss_scale() {
    let amp = AmpConfig {
        scaler: ScalerConfig {
            init_scale: 2f32.powi(22),
            growth_interval: 3,
            hysteresis: 2,
            ..ScalerConfig::default()
        },
        ..AmpConfig::new(AmpMode::Fp16)
    };
    // Stopped after an overflow that hysteresis tolerated (step 22): the next overflow
    // backs off only if the resumed scaler remembers it.
    let (steps, stop) = (24, 22);
    let cfg = config(amp, steps, 1);
    let mut full = trainer(&cfg);
    let all: Vec<_> = (0..steps).map(|_| full.step_blocking().unwrap()).collect();
    let scales: Vec<f32> = all.iter().map(|s| s.loss_scale).collect();
    assert!(
        all.iter().any(|s| s.skipped) && scales.windows(2).any(|w| w[1] > w[0]),
        "the run both overflows and grows: {scales:?}"
    );

    let mut first = trainer(&cfg);
    for _ in 0..stop {
        first.step_blocking().unwrap();
    }
    let state = first.state_blocking().unwrap();
    let saved = state.loss_scaler.expect("an fp16 run saves its scaler");
    assert_eq!(saved.scale, scales[stop - 1]);
    // The scale happens to be back at init_scale here; the tolerated overflow is what a
    // fresh scaler would forget.
    assert_eq!(saved.hysteresis_tracker, 1, "{saved:?}");
    let bytes = state.to_bytes().unwrap();
    let ck = brrr_train::ckpt::from_bytes(&bytes, "mem").unwrap();
    let state = brrr_train::TrainState::from_checkpoint(&ck).unwrap();
    assert_eq!(state.loss_scaler, Some(saved));
    let mut resumed = trainer(&cfg);
    resumed.restore(&state).unwrap();
    for want in &all[stop..] {
        let got = resumed.step_blocking().unwrap();
        assert_eq!(
            (got.step, got.loss.to_bits(), got.loss_scale, got.skipped),
            (
                want.step,
                want.loss.to_bits(),
                want.loss_scale,
                want.skipped
            )
        );
    }

    // A file without the scaler's keys, as written before they existed.
    let (tensors, mut meta) = state.to_checkpoint().unwrap();
    for k in [
        "loss_scale",
        "loss_scale_growth_tracker",
        "loss_scale_hysteresis_tracker",
    ] {
        assert!(meta.remove(k).is_some(), "{k}");
    }
    let old =
        brrr_train::ckpt::from_bytes(&brrr_train::ckpt::to_bytes(&tensors, &meta).unwrap(), "old")
            .unwrap();
    let old = brrr_train::TrainState::from_checkpoint(&old).unwrap();
    assert_eq!(old.loss_scaler, None);
    let mut from_old = trainer(&cfg);
    from_old.restore(&old).unwrap();
    let s = from_old.step_blocking().unwrap();
    assert_eq!(s.step as usize, stop + 1);
    assert!(
        s.loss_scale == 2f32.powi(22) || s.loss_scale == 2f32.powi(21),
        "starts again from init_scale: {}",
        s.loss_scale
    );
}
