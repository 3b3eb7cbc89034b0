//! Data parallelism from your own program: two ranks (threads of this process, each
//! with its own CPU backend) train a small GPT with ZeRO stage 2, and their losses follow
//! one device's. `cargo run --release -p brrr-dp --example data_parallel`
//!
//! brrr-launch starts the ranks and builds each one's `brrr_dp::DataParallel`; under a
//! launcher (`brrr launch`, torchrun, srun, mpirun) each process is one rank instead.

use brrr_launch::{Job, launch};
use brrr_train::{SYNTHETIC, TrainConfig};

pub fn main() -> brrr_backend::Result<()> {
    let mut config = TrainConfig::default();
    (
        config.model.n_layer,
        config.model.n_head,
        config.model.n_embd,
    ) = (2, 2, 64);
    (
        config.batch_size,
        config.seq_len,
        config.steps,
        config.eval_every,
    ) = (8, 32, 10, 5);
    config.corpus = SYNTHETIC.into();
    let mut one_device = Vec::new();
    launch(&Job::new(config.clone()), &mut one_device)?;

    (config.layout.dp, config.layout.zero) = (2, 2);
    let mut two_ranks = Vec::new();
    let outcome = launch(&Job::new(config), &mut two_ranks)?;
    println!("{}", outcome.engine);
    for (step, (a, b)) in one_device.iter().zip(&two_ranks).enumerate() {
        println!(
            "step {:>2}: one device {a:.5}, --dp 2 --zero 2 {b:.5}",
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
