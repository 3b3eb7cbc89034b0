//! # How long will it train?
//!
//! A dense model of `params` parameters trains on `tokens` tokens, on `gpus` GPUs of peak
//! `peak_flops` FLOP/s each, running at model FLOPs utilisation `mfu` (the fraction of the
//! peak that goes into the model's own FLOPs). How many seconds does it take?
//!
//! About 3 lines. Checked against `brrr_perf::flops::training_flops` and `time_to_train`.
//!
//! ## Hint
//!
//! Count the FLOPs per parameter per token: a forward does one multiply-add per parameter
//! per token, and the backward needs about twice the forward (one product for the
//! activations' gradient, one for the weights'). Kaplan et al. 2020 round the total to a
//! whole number.

use crate::check::{Outcome, close, hint_if, rel_diff, rng, with_seed};
use brrr_perf::flops::{time_to_train, training_flops};
use rand::Rng;

/// YOUR CODE: seconds to train.
#[cfg(not(feature = "solutions"))]
pub fn train_seconds(params: f64, tokens: f64, gpus: u64, peak_flops: f64, mfu: f64) -> f64 {
    let _ = (params, tokens, gpus, peak_flops, mfu);
    0.0
}

#[cfg(feature = "solutions")]
pub use solution::train_seconds;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/memory/train_time.rs"]
pub mod solution;

/// Against brrr-perf on random runs.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..20 {
        let params = 10f64.powf(rng.random_range(7.0..12.0));
        let tokens = 10f64.powf(rng.random_range(9.0..13.0));
        let gpus = rng.random_range(2..4096u64);
        let peak = rng.random_range(100e12..2000e12);
        let mfu = rng.random_range(0.2..0.6);
        let flops = training_flops(params, tokens).map_err(|e| e.to_string())?;
        let want = time_to_train(flops, gpus, peak, mfu).map_err(|e| e.to_string())?;
        let got = train_seconds(params, tokens, gpus, peak, mfu);
        let near = |x: f64| rel_diff(got, x, 1e-300) < 1e-9;
        let hint = if near(want * mfu) {
            Some("that is the time at the full peak: the GPUs deliver only `mfu` of it")
        } else if near(want * gpus as f64) {
            Some("that is one GPU's time: the work is shared by all of them")
        } else {
            None
        };
        hint_if(
            close(
                &format!("{params:.2e} params, {tokens:.2e} tokens, {gpus} GPUs at {mfu:.2} MFU"),
                got,
                want,
                1e-12,
            ),
            hint.is_some(),
            hint.unwrap_or_default(),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg_attr(
        not(feature = "solutions"),
        ignore = "an exercise: solve it, then `cargo run -p brrr-exercises`"
    )]
    fn check() {
        if let Err(e) = super::check() {
            panic!("{e}");
        }
    }
}
