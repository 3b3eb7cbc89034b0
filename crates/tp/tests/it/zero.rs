//! `--dp 2 --tp 2 --zero 2|3`, with and without `--sp`: brrr-dp's engine over each
//! rank's tensor-parallel shard ([`brrr_tp::data_parallel`]) trains like one device. The
//! losses match (f32 reduction order only), the whole checkpoint the shards put together
//! holds one device's weights and AdamW moments, and a run stopped at a checkpoint and
//! resumed is bit for bit the run that did not stop.

use brrr_amp::{AmpConfig, AmpMode};
use brrr_backend::block_on;
use brrr_collectives::{ParallelGroups, ParallelLayout, run_in_process};
use brrr_cpu::CpuBackend;
use brrr_dp::DataParallel;
use brrr_nn::GptConfig;
use brrr_tp::{TpConfig, TpGpt};
use brrr_train::{
    Batch, BatchSource, Batcher, Engine, TrainConfig, TrainState, Trainer, load_state,
};
use std::path::Path;

/// Relative tolerance on the losses, as `equivalence.rs`.
const LOSS_RTOL: f32 = 1e-5;
/// Weights after the steps: `|w − w_1| ≤ WEIGHT_ATOL`.
const WEIGHT_ATOL: f32 = 1e-4;
/// Moments: `|m − m_1| ≤ MOMENT_RTOL · max|m_1|` per parameter (a moment is as small
/// as the gradients, whose f32 sums the shards order differently).
const MOMENT_RTOL: f32 = 1e-3;

fn config(zero: u8, sp: bool) -> TrainConfig {
    let mut c = TrainConfig {
        model: GptConfig {
            vocab_size: 256,
            block_size: 16,
            n_layer: 2,
            n_head: 4,
            n_embd: 32,
        },
        steps: 3,
        batch_size: 4,
        seq_len: 8,
        grad_accum: 2,
        warmup_steps: 1,
        lr: 1e-2,
        ..TrainConfig::default()
    };
    (c.layout.dp, c.layout.tp, c.layout.sp, c.layout.zero) = (2, 2, sp, zero);
    c
}

fn batcher(c: &TrainConfig) -> Box<dyn BatchSource> {
    let text = "a shard of a replica of a model, averaged over its replicas. ".repeat(8);
    let b = Batcher::new(text.as_bytes(), c.batch_size, c.seq_len, c.seed).unwrap();
    // `seed` 1 marks the runs whose rows are packed documents (one per word).
    match c.seed {
        1 => Box::new(Masked(b)),
        _ => Box::new(b),
    }
}

/// Batches with a document mask at every space.
struct Masked(Batcher);

impl BatchSource for Masked {
    fn next_batch(&mut self) -> brrr_backend::Result<Batch> {
        self.0.next_batch().with_document_mask(b' ' as u32)
    }
    fn next_rows(&mut self, rows: std::ops::Range<usize>) -> brrr_backend::Result<Batch> {
        self.0.next_rows(rows)?.with_document_mask(b' ' as u32)
    }
    fn position(&self) -> String {
        BatchSource::position(&self.0)
    }
    fn set_position(&mut self, position: &str) -> brrr_backend::Result<()> {
        self.0.set_position(position)
    }
    fn fingerprint(&self) -> String {
        self.0.fingerprint()
    }
}

/// One device's losses and final state.
fn one_device(c: &TrainConfig) -> (Vec<f32>, TrainState) {
    let mut c = c.clone();
    c.layout = Default::default();
    let dir = tempfile::tempdir().unwrap();
    let b = CpuBackend::new();
    let mut t = Trainer::new(&b, c.clone(), batcher(&c), Vec::new()).unwrap();
    let losses = (0..c.steps)
        .map(|_| t.step_blocking().unwrap().loss)
        .collect();
    block_on(t.save_to(dir.path())).unwrap();
    (losses, load_state(dir.path()).unwrap())
}

/// `f` on each rank of the `--dp 2 --tp 2` grid, given its engine for `c`
/// (`brrr_tp::data_parallel`); every rank's result, or a panic naming every rank's error
/// (the first names the cause, the others its echo).
fn on_grid<T: Send>(
    c: &TrainConfig,
    f: impl Fn(&mut DataParallel<CpuBackend, TpGpt<CpuBackend>>) -> brrr_backend::Result<T> + Sync,
) -> Vec<T> {
    let layout = ParallelLayout {
        dp: 2,
        tp: 2,
        pp: 1,
    };
    let results = run_in_process(4, |world| {
        let b = CpuBackend::new();
        let groups = ParallelGroups::new(world, layout)?;
        let tp = TpConfig {
            tp: 2,
            sp: c.layout.sp,
        };
        let mut e = brrr_tp::data_parallel(&b, c.clone(), tp, groups, batcher(c))?;
        Ok(f(&mut e)?)
    });
    let errors: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(r, x)| x.as_ref().err().map(|e| format!("rank {r}: {e}")))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    results.into_iter().map(|r| r.unwrap()).collect()
}

/// Each rank's losses over `steps` steps (after restoring from `resume`), the run
/// saved into `save` at the end.
fn sharded(c: &TrainConfig, steps: u64, resume: Option<&Path>, save: &Path) -> Vec<Vec<f32>> {
    on_grid(c, |e| {
        if let Some(dir) = resume {
            block_on(e.restore_from(dir))?;
        }
        let mut losses = Vec::new();
        for _ in 0..steps {
            losses.push(e.step()?.loss);
        }
        block_on(e.save_to(save))?;
        Ok(losses)
    })
}

/// Trains `c` on the shards and on one device; asserts the losses agree within
/// `loss_rtol`, and the weights and moments with `weights_from`'s (one device's, or
/// brrr-tp's own engine's at `--zero 0`).
fn matches_one_device(c: &TrainConfig, what: &str, loss_rtol: f32, weights_from: Reference) {
    let (want, one) = one_device(c);
    let dir = tempfile::tempdir().unwrap();
    for (rank, losses) in sharded(c, c.steps, None, dir.path()).iter().enumerate() {
        for (s, (a, b)) in losses.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= loss_rtol * b.abs(),
                "{what} rank {rank} step {s}: {a} vs {b}"
            );
        }
    }
    let state = match weights_from {
        Reference::OneDevice => one,
        Reference::TpTrainer => tp_trainer(c),
    };
    let got = load_state(dir.path()).unwrap();
    assert_eq!(
        (got.step, got.adamw_step),
        (state.step, state.adamw_step),
        "{what}"
    );
    assert_eq!(got.params.len(), state.params.len(), "{what}");
    for p in &state.params {
        let q = got.param(&p.name).unwrap();
        assert_eq!(q.shape, p.shape, "{what} {}", p.name);
        for (a, b) in q.value.to_f32().iter().zip(p.value.to_f32()) {
            assert!(
                (a - b).abs() <= WEIGHT_ATOL,
                "{what} {}: {a} vs {b}",
                p.name
            );
        }
        let ((qm, qv), (pm, pv)) = (q.moments.as_ref().unwrap(), p.moments.as_ref().unwrap());
        for (x, y) in [(qm, pm), (qv, pv)] {
            let (x, y) = (x.to_f32(), y.to_f32());
            let scale = y.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for (a, b) in x.iter().zip(&y) {
                assert!(
                    (a - b).abs() <= MOMENT_RTOL * scale,
                    "{what} {} moment: {a} vs {b}",
                    p.name
                );
            }
        }
    }
}

/// Sets a flag of a config.
type Set = fn(&mut TrainConfig);

/// Whose weights a run is held to.
enum Reference {
    OneDevice,
    /// 16-bit runs: tensor parallelism rounds its partial products to 16 bits where
    /// one device does not, and AdamW at lr 1e-2 turns that into weights 3e-2 apart
    /// after three steps (measured; the losses still agree to 1e-3). What ZeRO adds
    /// is then checked against `--tp` without it: brrr-tp's `TpTrainer`.
    TpTrainer,
}

/// The whole checkpoint of `c`'s layout at `--zero 0` trained by `TpTrainer`.
fn tp_trainer(c: &TrainConfig) -> TrainState {
    let mut c = c.clone();
    c.layout.zero = 0;
    let layout = ParallelLayout {
        dp: 2,
        tp: 2,
        pp: 1,
    };
    let dir = tempfile::tempdir().unwrap();
    let results = run_in_process(4, |world| {
        let b = CpuBackend::new();
        let groups = ParallelGroups::new(world, layout)?;
        let tp = TpConfig {
            tp: 2,
            sp: c.layout.sp,
        };
        let mut t = brrr_tp::TpTrainer::new(&b, c.clone(), tp, groups)?;
        t.set_data(batcher(&c), Vec::new());
        for _ in 0..c.steps {
            block_on(Engine::step(&mut t))?;
        }
        block_on(t.save_to(dir.path()))?;
        Ok(())
    });
    for r in results {
        r.unwrap();
    }
    load_state(dir.path()).unwrap()
}

#[test]
fn zero2_and_zero3_over_tensor_parallel_shards_match_one_device() {
    for (zero, sp) in [(2, false), (2, true), (3, false), (3, true)] {
        matches_one_device(
            &config(zero, sp),
            &format!("--zero {zero} --sp {sp}"),
            LOSS_RTOL,
            Reference::OneDevice,
        );
    }
}

/// The flags whose code paths differ on a shard: mixed precision (16-bit compute
/// copies of the shard, the overflow flag over both groups), recomputation (the shard
/// walked by the executor, blocks gathered again) and packed documents (every block's
/// attention masked while the walk runs them one by one).
#[test]
fn zero3_over_shards_with_amp_recomputation_and_document_masks() {
    use Reference::{OneDevice, TpTrainer};
    let cases: [(&str, Set, f32, Reference); 4] = [
        (
            "--amp bf16",
            |c| c.amp = AmpConfig::new(AmpMode::Bf16),
            1e-3,
            TpTrainer,
        ),
        (
            "--amp fp16",
            |c| c.amp = AmpConfig::new(AmpMode::Fp16),
            1e-3,
            TpTrainer,
        ),
        (
            "--checkpoint every:2",
            |c| c.checkpoint = "every:2".parse().unwrap(),
            LOSS_RTOL,
            OneDevice,
        ),
        ("document masks", |c| c.seed = 1, LOSS_RTOL, OneDevice),
    ];
    for (what, set, tol, weights) in cases {
        let mut c = config(3, true);
        set(&mut c);
        matches_one_device(&c, what, tol, weights);
    }
}

#[test]
fn a_zero3_tensor_parallel_run_resumes_bit_for_bit() {
    let c = config(3, true);
    let (straight, stopped, resumed) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let all = sharded(&c, 3, None, straight.path());
    let first = sharded(&c, 2, None, stopped.path());
    let rest = sharded(&c, 1, Some(stopped.path()), resumed.path());
    for r in 0..4 {
        assert_eq!(all[r][..2], first[r][..], "rank {r}");
        assert_eq!(
            all[r][2..],
            rest[r][..],
            "rank {r}: the step after resuming"
        );
    }
    let (a, b) = (
        load_state(straight.path()).unwrap(),
        load_state(resumed.path()).unwrap(),
    );
    assert_eq!(a.step, b.step);
    for (p, q) in a.params.iter().zip(&b.params) {
        assert_eq!(p.value.to_f32(), q.value.to_f32(), "{}", p.name);
        assert_eq!(
            p.moments.as_ref().map(|(m, v)| (m.to_f32(), v.to_f32())),
            q.moments.as_ref().map(|(m, v)| (m.to_f32(), v.to_f32())),
            "{}",
            p.name
        );
    }
}

/// What each stage keeps: the model states after a step (parameters, gradients and
/// moments of this rank's shard, activations freed) shrink as ZeRO shards more of them
/// over the two replicas of each shard, as `brrr_perf`'s estimate says: f32 AdamW keeps
/// 16 bytes per parameter, ZeRO-2 `4 + 12/2`, ZeRO-3 `16/2`.
#[test]
fn each_zero_stage_keeps_less_of_the_shard() {
    let mut bytes = Vec::new();
    for zero in [0, 1, 2, 3] {
        let c = config(zero, true);
        let (state, params) = on_grid(&c, |e| {
            // The shard's parameters (stage 3 frees them between uses).
            let params = e.layout().total;
            e.step()?;
            Ok((e.report().model_state_bytes, params))
        })[0];
        eprintln!("--zero {zero}: {state} B of model states for a shard of {params} parameters");
        bytes.push((state, params));
    }
    let per_param = |(b, p): (u64, usize)| b as f64 / p as f64;
    let want = [16.0, 4.0 + 4.0 + 8.0 / 2.0, 4.0 + 12.0 / 2.0, 16.0 / 2.0];
    for (zero, (&got, want)) in bytes.iter().zip(want).enumerate() {
        let got = per_param(got);
        // Padding to the buckets' multiple of two and the loss scaler's few bytes.
        assert!(
            (got - want).abs() < 0.05 * want,
            "--zero {zero}: {got:.2} B/param, expected {want}"
        );
    }
}
