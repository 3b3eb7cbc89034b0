//! The Trainer against the loop it replaces, resume through a saved state, schedules and
//! observers, on brrr-cpu.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::HostData;
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, Gpt, Module, clip_grad_norm};
use brrr_train::{
    Action, Batcher, Corpus, Evaluation, MicroBatchSchedule, Observer, StepStats, TrainConfig,
    TrainState, Trainer, upload, val_batches,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn corpus() -> Corpus {
    let text = "It was the best of times, it was the worst of times, it was the age of wisdom, \
                it was the age of foolishness. "
        .repeat(40);
    Corpus::from_text("dickens.txt", text).unwrap()
}

fn config(grad_accum: usize) -> TrainConfig {
    let mut cfg = TrainConfig {
        steps: 6,
        batch_size: 4,
        seq_len: 16,
        grad_accum,
        seed: 11,
        warmup_steps: 2,
        lr: 5e-3,
        eval_every: 3,
        eval_batches: 2,
        grad_clip: 0.5,
        corpus: "dickens.txt".into(),
        ..TrainConfig::default()
    };
    (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) = (2, 2, 32);
    cfg
}

fn trainer(cfg: &TrainConfig) -> Trainer<CpuBackend> {
    let c = corpus();
    let data = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let val = val_batches(c.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches).unwrap();
    Trainer::new(&CpuBackend::new(), cfg.clone(), Box::new(data), val).unwrap()
}

fn weights(model: &Gpt<CpuBackend>) -> Vec<HostData> {
    model
        .params()
        .iter()
        .map(|p| brrr_backend::block_on(p.value.to_host()).unwrap())
        .collect()
}

/// The step as it was written before the Trainer (one loss read per micro-batch, the
/// blocking clip, `AdamW::step` with the coefficient on the host): losses, norms and
/// weights must come out bit for bit the same with one micro-batch.
#[test]
fn one_micro_batch_matches_the_blocking_loop_bitwise() {
    let cfg = config(1);
    let backend = CpuBackend::new();
    let c = corpus();
    let mut model = Gpt::new(
        &backend,
        cfg.model.clone(),
        brrr_backend::DType::F32,
        &mut ChaCha8Rng::seed_from_u64(cfg.seed),
    )
    .unwrap();
    let mut opt = AdamW::new(AdamWConfig {
        weight_decay: cfg.weight_decay,
        ..AdamWConfig::default()
    });
    let mut batcher = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let mut t = trainer(&cfg);
    let dloss = 1.0 / (cfg.batch_size * cfg.seq_len) as f32;
    for step in 0..cfg.steps {
        let lr = cfg.schedule().lr(step);
        model.zero_grad().unwrap();
        let (ids, targets) = upload(&backend, &batcher.next_batch()).unwrap();
        let losses = model.forward_loss(&ids, &targets).unwrap();
        let loss = losses.mean_all().unwrap().to_scalar_f64().unwrap() as f32;
        model.backward(dloss).unwrap();
        let (norm, coef) = clip_grad_norm(&model.params(), cfg.grad_clip).unwrap();
        opt.step(model.params_mut(), lr as f32, coef).unwrap();

        let s = t.step_blocking().unwrap();
        assert_eq!(s.step, step + 1);
        assert_eq!(s.loss.to_bits(), loss.to_bits(), "step {step}: loss");
        // The trainer's norm is computed on the device and kept in f32 (the precision
        // metrics.csv logs it in); the host computed it in f64.
        assert_eq!(
            (s.grad_norm as f32).to_bits(),
            (norm as f32).to_bits(),
            "step {step}: grad norm"
        );
        assert_eq!(s.lr.to_bits(), lr.to_bits());
        assert_eq!(s.tokens, 64);
    }
    assert_eq!(weights(t.model()), weights(&model), "weights after the run");
    assert!(t.is_finished());
    let e = t.step_blocking().unwrap_err().to_string();
    assert!(e.contains("already finished at step 6"), "{e}");
}

#[test]
fn a_restored_state_continues_bit_for_bit() {
    let cfg = config(2);
    let mut full = trainer(&cfg);
    let all: Vec<StepStats> = (0..6).map(|_| full.step_blocking().unwrap()).collect();

    let mut first = trainer(&cfg);
    for _ in 0..3 {
        first.step_blocking().unwrap();
    }
    // Through the file's bytes, as a checkpoint goes.
    let state = first.state_blocking().unwrap();
    let bytes = state.to_bytes().unwrap();
    let ck = brrr_train::ckpt::from_bytes(&bytes, "mem").unwrap();
    let state = TrainState::from_checkpoint(&ck).unwrap();
    assert_eq!(state.step, 3);
    let mut resumed = trainer(&cfg);
    resumed.restore(&state).unwrap();
    for want in &all[3..] {
        let got = resumed.step_blocking().unwrap();
        assert_eq!(
            (got.step, got.loss.to_bits()),
            (want.step, want.loss.to_bits())
        );
        assert_eq!(got.grad_norm.to_bits(), want.grad_norm.to_bits());
    }
    assert_eq!(weights(resumed.model()), weights(full.model()));

    // Another corpus is refused.
    let other = Corpus::from_text("other.txt", "something else entirely. ".repeat(80)).unwrap();
    let data = Batcher::for_corpus(&other, 4, 16, 11).unwrap();
    let mut t = Trainer::new(&CpuBackend::new(), cfg.clone(), Box::new(data), vec![]).unwrap();
    let e = t.restore(&state).unwrap_err().to_string();
    assert!(e.contains("corpus differs"), "{e}");

    // A checkpoint of a run that had diverged: refused by the tensor's name, before
    // any step could blame this run's --lr for the NaN loss.
    let mut diverged = state.clone();
    let p = &mut diverged.params[1];
    let mut v = p.value.to_f64();
    v[3] = f64::NAN;
    p.value = HostData::from_f64(p.value.dtype(), &v);
    let name = p.name.clone();
    let e = trainer(&cfg).restore(&diverged).unwrap_err().to_string();
    assert!(
        e.contains(&format!("value of {name:?} holds NaN at element 3")) && e.contains("diverged"),
        "{e}"
    );
}

#[test]
fn grad_accumulation_trains_and_schedules_are_checked() {
    let cfg = config(3);
    let mut t = trainer(&cfg);
    assert_eq!(t.schedule().to_string(), "F0 B0 F1 B1 F2 B2");
    let first = t.step_blocking().unwrap();
    assert_eq!(first.tokens, 3 * 64);
    let mut last = first.clone();
    while !t.is_finished() {
        last = t.step_blocking().unwrap();
    }
    assert!(
        last.loss < first.loss - 0.3,
        "{} -> {}",
        first.loss,
        last.loss
    );
    let two = MicroBatchSchedule::grad_accumulation(2).unwrap();
    let e = t.set_schedule(two).unwrap_err().to_string();
    assert!(e.contains("grad_accum is 3"), "{e}");
}

/// GPipe's order (all forwards, then the backwards in reverse) keeps three micro-batches
/// in flight. Each layer's stash hands every backward its own micro-batch's
/// activations, so the step's loss is bitwise the sequential schedule's (the same
/// forwards on the same weights and batches), and the weights after the update differ
/// only by the rounding of the gradient sums, which run in another order.
#[test]
fn gpipe_order_matches_gradient_accumulation() {
    let cfg = config(3);
    let mut seq = trainer(&cfg);
    let mut gpipe = trainer(&cfg);
    let schedule = MicroBatchSchedule::new(vec![
        Action::Forward(0),
        Action::Forward(1),
        Action::Forward(2),
        Action::Backward(2),
        Action::Backward(1),
        Action::Backward(0),
    ])
    .unwrap();
    assert_eq!(schedule.max_in_flight(), 3);
    gpipe.set_schedule(schedule).unwrap();
    let (a, b) = (seq.step_blocking().unwrap(), gpipe.step_blocking().unwrap());
    assert_eq!(a.loss.to_bits(), b.loss.to_bits());
    let rel = (a.grad_norm - b.grad_norm).abs() / a.grad_norm;
    assert!(rel < 1e-5, "grad norms {} vs {}", a.grad_norm, b.grad_norm);
    let (wa, wb) = (weights(seq.model()), weights(gpipe.model()));
    let mut worst = 0.0f64;
    for (x, y) in wa.iter().zip(&wb) {
        for (p, q) in x.to_f64().iter().zip(y.to_f64()) {
            worst = worst.max((p - q).abs());
        }
    }
    // One AdamW step moves a weight by about lr; rounding differences are far smaller.
    assert!(worst < 1e-6, "largest weight difference {worst:e}");
}

#[derive(Default)]
struct Log(Vec<String>);

impl Observer for Log {
    fn on_step(&mut self, s: &StepStats) -> brrr_backend::Result<()> {
        self.0.push(format!("step {}", s.step));
        Ok(())
    }
    fn on_eval(&mut self, e: &Evaluation) -> brrr_backend::Result<()> {
        assert!(e.loss.is_finite());
        self.0.push(format!("eval {}", e.step));
        Ok(())
    }
    fn on_checkpoint(&mut self, step: u64) -> brrr_backend::Result<()> {
        self.0.push(format!("checkpoint {step}"));
        Ok(())
    }
}

#[test]
fn run_reports_steps_evaluations_and_checkpoints_in_order() {
    let cfg = config(1);
    let mut t = trainer(&cfg);
    let mut log = Log::default();
    t.run_blocking(4, &mut log).unwrap();
    let want = [
        "step 1",
        "step 2",
        "eval 3",
        "step 3",
        "checkpoint 3",
        "step 4",
        "checkpoint 4",
    ];
    assert_eq!(log.0, want);
    let mut rest = Log::default();
    t.run_blocking(100, &mut rest).unwrap();
    assert_eq!(rest.0, ["step 5", "eval 6", "step 6", "checkpoint 6"]);
    // Evaluation scores fixed batches: the same number twice.
    let (a, b) = (
        t.evaluate_blocking().unwrap(),
        t.evaluate_blocking().unwrap(),
    );
    assert_eq!(a.to_bits(), b.to_bits());
}
