//! Every parallel layout on the GPU backends: `brrr_launch::launch` starts in-process
//! ranks that each build their own wgpu (or CUDA) backend and the engine their layout
//! needs, and their losses follow one CPU device's, step by step, to 1e-3 relative
//! (the tolerance of `train_wgpu.rs`: the GPU's sums run in another order). Collectives
//! go through the host. Without an adapter or driver: skipped loudly, or a failure
//! under BRRR_REQUIRE_WGPU=1 / BRRR_REQUIRE_CUDA=1.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::Result;
use brrr_conformance::backend_absent;
use brrr_launch::{BackendKind, Job, launch};
use brrr_train::{Evaluation, Observer, SYNTHETIC, StepStats, TrainConfig};

/// Training and validation losses as rank 0 reports them.
#[derive(Default)]
struct Losses {
    train: Vec<f32>,
    val: Vec<f32>,
}

impl Observer for Losses {
    fn on_step(&mut self, s: &StepStats) -> Result<()> {
        self.train.push(s.loss);
        Ok(())
    }
    fn on_eval(&mut self, e: &Evaluation) -> Result<()> {
        self.val.push(e.loss);
        Ok(())
    }
}

fn config() -> TrainConfig {
    let mut c = TrainConfig {
        steps: 4,
        batch_size: 4,
        seq_len: 16,
        grad_accum: 2,
        warmup_steps: 1,
        eval_every: 2,
        eval_batches: 1,
        corpus: SYNTHETIC.into(),
        ..TrainConfig::default()
    };
    (
        c.model.n_layer,
        c.model.n_head,
        c.model.n_embd,
        c.model.block_size,
    ) = (2, 2, 32, 16);
    c
}

/// The layouts the test command runs on each GPU backend: dp 2, tp 2 (with and without
/// sp), pp 2 (1f1b and zb-h1), dp 2 × pp 2, and dp 2 × tp 2 at ZeRO-3 (brrr-dp's engine
/// over tensor-parallel shards: each block's parameters gathered into one flat device
/// buffer that the shard's layers read through views).
fn layouts() -> Vec<(&'static str, TrainConfig)> {
    let with = |f: &dyn Fn(&mut TrainConfig)| {
        let mut c = config();
        f(&mut c);
        c
    };
    vec![
        ("--dp 2", with(&|c| c.layout.dp = 2)),
        ("--tp 2", with(&|c| c.layout.tp = 2)),
        (
            "--tp 2 --sp",
            with(&|c| (c.layout.tp, c.layout.sp) = (2, true)),
        ),
        ("--pp 2 1f1b", with(&|c| c.layout.pp = 2)),
        (
            "--pp 2 zb-h1",
            with(&|c| (c.layout.pp, c.layout.schedule) = (2, "zb-h1".into())),
        ),
        (
            "--dp 2 --pp 2",
            with(&|c| (c.layout.dp, c.layout.pp) = (2, 2)),
        ),
        (
            "--dp 2 --tp 2 --sp --zero 3",
            with(&|c| (c.layout.dp, c.layout.tp, c.layout.sp, c.layout.zero) = (2, 2, true, 3)),
        ),
    ]
}

fn run(config: TrainConfig, backend: BackendKind) -> Losses {
    let mut job = Job::new(config);
    job.backend = backend;
    let mut losses = Losses::default();
    launch(&job, &mut losses).unwrap();
    losses
}

/// Every layout on `backend` against one CPU device; the worst relative difference.
fn follows_one_cpu_device(backend: BackendKind) -> f32 {
    let want = run(config(), BackendKind::Cpu);
    let mut worst = 0.0f32;
    for (name, cfg) in layouts() {
        let got = run(cfg, backend);
        assert_eq!(got.train.len(), want.train.len(), "{name}");
        assert_eq!(got.val.len(), want.val.len(), "{name}");
        let pairs = got
            .train
            .iter()
            .zip(&want.train)
            .chain(got.val.iter().zip(&want.val));
        for (a, b) in pairs {
            let rel = (a - b).abs() / b.abs();
            assert!(
                rel < 1e-3,
                "{name} on {}: {a} vs one cpu device {b}",
                backend.name()
            );
            worst = worst.max(rel);
        }
        eprintln!("{name} on {}: follows one cpu device", backend.name());
    }
    worst
}

#[test]
fn every_layout_on_wgpu_follows_one_cpu_device() {
    if let Err(e) = brrr_wgpu::WgpuBackend::new_blocking() {
        return backend_absent("wgpu", e, "BRRR_REQUIRE_WGPU");
    }
    let worst = follows_one_cpu_device(BackendKind::Wgpu);
    eprintln!("wgpu layouts: worst relative loss difference {worst:.2e}");
}

#[test]
fn every_layout_on_cuda_follows_one_cpu_device() {
    match brrr_cuda::CudaBackend::new(0) {
        Ok(_) => {}
        Err(brrr_backend::Error::NoDevice { reason, .. }) => {
            return backend_absent("cuda", reason, "BRRR_REQUIRE_CUDA");
        }
        Err(e) => panic!("cuda: the backend could not be created: {e}"),
    }
    let worst = follows_one_cpu_device(BackendKind::Cuda);
    eprintln!("cuda layouts: worst relative loss difference {worst:.2e}");
}
