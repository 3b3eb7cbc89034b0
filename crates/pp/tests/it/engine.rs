//! `PipelineEngine` under the one training loop (`brrr_train::run`): a pipeline step sees
//! the batches of `--grad-accum M` on one device, so every schedule's losses (and the
//! validation loss) match the one-device `Trainer`'s; `--dp 2` pipelines split each
//! global micro-batch and match one pipeline; a run saved at step 2 and restored goes
//! on bit for bit.

use brrr_amp::{AmpConfig, AmpMode};
use brrr_backend::DType;
use brrr_collectives::run_in_process;
use brrr_cpu::CpuBackend;
use brrr_pp::{PipelineEngine, ScheduleKind};
use brrr_train::{
    Batcher, Corpus, Engine, Observer, StepStats, TrainConfig, Trainer, run_blocking, val_batches,
};

fn corpus() -> Corpus {
    let text = "It was the best of times, it was the worst of times, it was the age of wisdom. "
        .repeat(60);
    Corpus::from_text("dickens.txt", text).unwrap()
}

fn tiny(m: usize) -> TrainConfig {
    let mut cfg = TrainConfig {
        steps: 3,
        batch_size: 2,
        seq_len: 16,
        grad_accum: m,
        warmup_steps: 1,
        eval_every: 3,
        eval_batches: 2,
        ..TrainConfig::default()
    };
    (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) = (4, 2, 32);
    cfg.model.block_size = 16;
    cfg
}

/// Losses and the last validation loss, as rank 0 of the world reports them.
#[derive(Default)]
struct Log {
    losses: Vec<f32>,
    val: Option<f32>,
    /// Each step's loss scale after it and whether it was skipped (`--amp fp16`).
    scales: Vec<(f32, bool)>,
    /// Each step's gradient norm and activation peak (bytes).
    norms: Vec<f64>,
    peaks: Vec<u64>,
}

impl Observer for Log {
    fn on_step(&mut self, s: &StepStats) -> brrr_backend::Result<()> {
        self.losses.push(s.loss);
        self.scales.push((s.loss_scale, s.skipped));
        self.norms.push(s.grad_norm);
        self.peaks.push(s.activation_peak_bytes);
        Ok(())
    }
    fn on_eval(&mut self, e: &brrr_train::Evaluation) -> brrr_backend::Result<()> {
        self.val = Some(e.loss);
        Ok(())
    }
}

type Dir<'a> = Option<&'a std::path::Path>;

/// Trains `cfg` (its layout a pipeline) to `stop_at` on in-process ranks, restoring
/// from `restore` and saving to `save` when given; rank 0's log.
fn pipeline(cfg: &TrainConfig, stop_at: u64, restore: Dir, save: Dir) -> Log {
    let c = corpus();
    let outs = run_in_process(cfg.layout.world(), |world| {
        let data = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed)?;
        let val = val_batches(c.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches)?;
        let mut e =
            PipelineEngine::new(&CpuBackend::new(), cfg.clone(), world, Box::new(data), val)?;
        if let Some(dir) = restore {
            brrr_backend::block_on(e.restore_from(dir))?;
        }
        let mut log = Log::default();
        run_blocking(&mut e, stop_at, &mut log)?;
        if let Some(dir) = save {
            brrr_backend::block_on(e.save_to(dir))?;
        }
        Ok(log)
    });
    outs.into_iter().next().unwrap().unwrap()
}

#[test]
fn every_schedule_matches_the_trainer_with_grad_accum() {
    let m = 4;
    let cfg = tiny(m);
    let c = corpus();
    let data = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let val = val_batches(c.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches).unwrap();
    let mut trainer = Trainer::new(&CpuBackend::new(), cfg.clone(), Box::new(data), val).unwrap();
    let mut want = Log::default();
    trainer.run_blocking(cfg.steps, &mut want).unwrap();
    for kind in ScheduleKind::all(2) {
        let mut p = cfg.clone();
        p.layout.pp = 2;
        p.layout.schedule = kind.to_string();
        let got = pipeline(&p, p.steps, None, None);
        assert_eq!(got.losses.len(), want.losses.len(), "{kind}");
        for (a, b) in got.losses.iter().zip(&want.losses) {
            assert!(
                (a - b).abs() < 2e-5,
                "{kind}: {:?} vs {:?}",
                got.losses,
                want.losses
            );
        }
        let (a, b) = (got.val.unwrap(), want.val.unwrap());
        assert!((a - b).abs() < 2e-5, "{kind}: val loss {a} vs {b}");
    }
}

/// `--batch-size` is the global micro-batch: two pipelines, each on half the rows of
/// every micro-batch, give the one pipeline's losses within 2e-5.
#[test]
fn two_replicas_split_the_global_batch() {
    let mut cfg = tiny(2);
    cfg.batch_size = 4;
    cfg.layout.pp = 2;
    let one = pipeline(&cfg, cfg.steps, None, None);
    cfg.layout.dp = 2;
    let two = pipeline(&cfg, cfg.steps, None, None);
    for (a, b) in one.losses.iter().zip(&two.losses) {
        assert!((a - b).abs() < 2e-5, "{:?} vs {:?}", one.losses, two.losses);
    }
    cfg.batch_size = 3;
    let e = cfg.validate().unwrap_err().to_string();
    assert!(e.contains("multiple of --dp 2"), "{e}");
}

/// Two steps, saved; restored and two more: bitwise the losses of four in one go.
#[test]
fn a_restored_pipeline_goes_on_bit_for_bit() {
    let mut cfg = tiny(4);
    cfg.steps = 4;
    cfg.layout.pp = 2;
    cfg.layout.schedule = "zb-h1".into();
    let whole = pipeline(&cfg, 4, None, None);
    let dir = tempfile::tempdir().unwrap();
    let first = pipeline(&cfg, 2, None, Some(dir.path()));
    let rest = pipeline(&cfg, 4, Some(dir.path()), None);
    let mut got = first.losses.clone();
    got.extend(&rest.losses);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&whole.losses));
}

/// `--amp fp16` in a pipeline: the one-device trainer's losses, and its loss scales and
/// skipped steps exactly (the overflow flag is agreed by every stage, so a stage that
/// saw no inf skips with the one that did). The scale starts high and grows after every
/// clean step, so the run both skips and grows; a run saved at step 3 and restored
/// carries its scale and goes on bit for bit.
#[test]
fn fp16_pipelines_skip_and_scale_like_one_device_and_resume_with_their_scale() {
    let mut cfg = tiny(2);
    cfg.steps = 6;
    cfg.eval_every = 6;
    cfg.amp = AmpConfig::new(AmpMode::Fp16);
    cfg.amp.scaler.init_scale = 65536.0 * 16.0;
    cfg.amp.scaler.growth_interval = 1;
    let c = corpus();
    let data = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed).unwrap();
    let val = val_batches(c.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches).unwrap();
    let mut trainer = Trainer::new(&CpuBackend::new(), cfg.clone(), Box::new(data), val).unwrap();
    let mut want = Log::default();
    trainer.run_blocking(cfg.steps, &mut want).unwrap();
    let skips = want.scales.iter().filter(|s| s.1).count();
    assert!(
        skips > 0 && skips < want.scales.len(),
        "the setup should both skip and step: {:?}",
        want.scales
    );
    cfg.layout.pp = 2;
    cfg.layout.schedule = "1f1b".into();
    let got = pipeline(&cfg, cfg.steps, None, None);
    assert_eq!(got.scales, want.scales);
    for (a, b) in got.losses.iter().zip(&want.losses) {
        assert!(
            (a - b).abs() < 1e-3 * b.abs(),
            "{:?} vs {:?}",
            got.losses,
            want.losses
        );
    }
    let (a, b) = (got.val.unwrap(), want.val.unwrap());
    assert!((a - b).abs() < 1e-3 * b.abs(), "val loss {a} vs {b}");

    let dir = tempfile::tempdir().unwrap();
    let first = pipeline(&cfg, 3, None, Some(dir.path()));
    let rest = pipeline(&cfg, 6, Some(dir.path()), None);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&[first.losses, rest.losses].concat()),
        bits(&got.losses)
    );
    assert_eq!([first.scales, rest.scales].concat(), got.scales);
}

/// `--amp bf16` reaches every stage: each holds 16-bit compute copies beside f32 masters
/// (a stage left in f32 would train, and its losses would differ from one device's
/// bf16 run by little more than rounding).
#[test]
fn every_stage_computes_in_bf16_beside_f32_masters() {
    let mut cfg = tiny(2);
    cfg.amp = AmpConfig::new(AmpMode::Bf16);
    cfg.layout.pp = 2;
    let c = corpus();
    let kinds = run_in_process(2, |world| {
        let data = Batcher::for_corpus(&c, cfg.batch_size, cfg.seq_len, cfg.seed)?;
        let e = PipelineEngine::new(
            &CpuBackend::new(),
            cfg.clone(),
            world,
            Box::new(data),
            vec![],
        )?;
        Ok(e.stage()
            .params()
            .iter()
            .map(|p| (p.value.dtype(), p.master.as_ref().map(|m| m.dtype())))
            .collect::<Vec<_>>())
    });
    for k in kinds {
        let k = k.unwrap();
        assert!(!k.is_empty());
        for d in k {
            assert_eq!(d, (DType::BF16, Some(DType::F32)));
        }
    }
}

/// `--checkpoint` under every schedule, with and without `--tp 2`: each chunk runs one
/// device's plan on its blocks (the zero-bubble B with input-only backwards, W as
/// before), so losses, norms and the validation loss are bit for bit the pipeline's
/// without recomputation, and stage 0's activation peak is lower.
#[test]
fn recomputation_in_every_schedule_changes_no_bit() {
    let mut cfg = tiny(4);
    cfg.steps = 2;
    cfg.eval_every = 2;
    cfg.layout.pp = 2;
    for tp in [1, 2] {
        for kind in ScheduleKind::all(2) {
            let mut plain = cfg.clone();
            plain.layout.tp = tp;
            plain.layout.schedule = kind.to_string();
            let want = pipeline(&plain, plain.steps, None, None);
            for strategy in ["every:2", "selective"] {
                let mut rc = plain.clone();
                rc.checkpoint = strategy.parse().unwrap();
                let got = pipeline(&rc, rc.steps, None, None);
                let what = format!("{kind} --tp {tp} --checkpoint {strategy}");
                assert_eq!(got.losses, want.losses, "{what}");
                assert_eq!(got.norms, want.norms, "{what}");
                assert_eq!(got.val, want.val, "{what}");
                for (a, b) in got.peaks.iter().zip(&want.peaks) {
                    assert!(a < b, "{what}: activation peak {a} B, {b} B keeping all");
                }
            }
        }
    }
}

/// `--dp 2 --pp 2 --zero 1` (with and without `--tp 2`): each replica keeps the moments
/// of about half of its stage's parameters and broadcasts what it updated, so the
/// losses, norms and validation loss are bit for bit `--zero 0`'s; a run saved at step
/// 2 (the moments gathered from their owners into the stage file) and restored goes
/// on bit for bit, and so does `--bucket-mb` with small buckets.
#[test]
fn zero1_and_buckets_change_no_bit_and_resume() {
    let mut cfg = tiny(2);
    cfg.steps = 4;
    cfg.eval_every = 2;
    cfg.batch_size = 4;
    (cfg.layout.dp, cfg.layout.pp) = (2, 2);
    for tp in [1, 2] {
        let mut plain = cfg.clone();
        plain.layout.tp = tp;
        let want = pipeline(&plain, 4, None, None);
        let mut z = plain.clone();
        z.layout.zero = 1;
        let mut b = plain.clone();
        b.layout.bucket_mb = Some(0.001);
        for (what, c) in [("--zero 1", &z), ("--bucket-mb", &b)] {
            let got = pipeline(c, 4, None, None);
            assert_eq!(got.losses, want.losses, "--tp {tp} {what}");
            assert_eq!(got.norms, want.norms, "--tp {tp} {what}");
            assert_eq!(got.val, want.val, "--tp {tp} {what}");
        }
        let dir = tempfile::tempdir().unwrap();
        let first = pipeline(&z, 2, None, Some(dir.path()));
        let rest = pipeline(&z, 4, Some(dir.path()), None);
        let mut got = first.losses.clone();
        got.extend(&rest.losses);
        assert_eq!(got, want.losses, "--tp {tp} --zero 1, resumed");
        // Every rank keeps the moments of part of its stage's parameters only.
        let c = corpus();
        let kept = run_in_process(z.layout.world(), |world| {
            let data = Batcher::for_corpus(&c, z.batch_size, z.seq_len, z.seed)?;
            let mut e = PipelineEngine::new(
                &CpuBackend::new(),
                z.clone(),
                world,
                Box::new(data),
                Vec::new(),
            )?;
            brrr_backend::block_on(e.step())?;
            Ok((e.stage().opt.moments.len(), e.stage().params().len()))
        });
        for k in kept {
            let (mine, all) = k.unwrap();
            assert!(
                mine > 0 && mine < all,
                "--tp {tp}: moments of {mine} of {all}"
            );
        }
    }
}
