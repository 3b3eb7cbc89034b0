//! dp × tp × pp from your own program: two pipeline stages, each two tensor-parallel
//! ranks wide, in two data-parallel replicas (eight ranks, Megatron's 3D layout), on
//! the zero-bubble schedule ZB-H1, and the losses follow one device's.
//! `cargo run --release -p brrr-pp --example pipeline`
//!
//! brrr-launch starts the ranks (threads here; processes under a launcher) and builds
//! each one's `brrr_pp::PipelineEngine`.

use brrr_launch::{Job, launch};
use brrr_train::{SYNTHETIC, TrainConfig};

pub fn main() -> brrr_backend::Result<()> {
    let mut config = TrainConfig::default();
    (
        config.model.n_layer,
        config.model.n_head,
        config.model.n_embd,
    ) = (4, 4, 64);
    (config.batch_size, config.seq_len, config.grad_accum) = (8, 32, 4);
    (config.steps, config.eval_every) = (6, 3);
    config.corpus = SYNTHETIC.into();
    let mut one_device = Vec::new();
    launch(&Job::new(config.clone()), &mut one_device)?;

    let l = &mut config.layout;
    (l.dp, l.tp, l.pp, l.schedule) = (2, 2, 2, "zb-h1".into());
    let mut eight_ranks = Vec::new();
    let outcome = launch(&Job::new(config), &mut eight_ranks)?;
    println!("{}", outcome.engine);
    for (step, (a, b)) in one_device.iter().zip(&eight_ranks).enumerate() {
        println!(
            "step {:>2}: one device {a:.5}, dp 2 × tp 2 × pp 2 {b:.5}",
            step + 1
        );
        assert!(
            (a - b).abs() < 1e-4,
            "the ranks should train as one device does"
        );
    }
    outcome.report.iter().for_each(|line| println!("{line}"));
    Ok(())
}
