//! Tensor parallelism from your own program: every layer split over two ranks
//! (Megatron's column- and row-parallel linears) with sequence parallelism, and the
//! losses follow one device's. `cargo run --release -p brrr-tp --example tensor_parallel`
//!
//! brrr-launch starts the ranks (threads here; processes under a launcher) and builds
//! each one's `brrr_tp::TpTrainer`.

use brrr_launch::{Job, launch};
use brrr_train::{SYNTHETIC, TrainConfig};

pub fn main() -> brrr_backend::Result<()> {
    let mut config = TrainConfig::default();
    (
        config.model.n_layer,
        config.model.n_head,
        config.model.n_embd,
    ) = (2, 4, 64);
    (
        config.batch_size,
        config.seq_len,
        config.steps,
        config.eval_every,
    ) = (8, 32, 10, 5);
    config.corpus = SYNTHETIC.into();
    let mut one_device = Vec::new();
    launch(&Job::new(config.clone()), &mut one_device)?;

    (config.layout.tp, config.layout.sp) = (2, true);
    let mut two_ranks = Vec::new();
    let outcome = launch(&Job::new(config), &mut two_ranks)?;
    println!("{}", outcome.engine);
    for (step, (a, b)) in one_device.iter().zip(&two_ranks).enumerate() {
        println!(
            "step {:>2}: one device {a:.5}, --tp 2 --sp {b:.5}",
            step + 1
        );
        assert!(
            (a - b).abs() < 1e-4,
            "the ranks should train as one device does"
        );
    }
    Ok(())
}
