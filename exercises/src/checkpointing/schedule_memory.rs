//! # The memory of a schedule
//!
//! A schedule is a list of ops over a chain of segments (`brrr_checkpoint::Op`):
//! `Forward { seg, mode }` and `Backward { seg }`. Return its peak bytes under this
//! model (the one `brrr_checkpoint::Schedule::simulate` uses, and that matches the CPU
//! backend's allocator to 0.1%):
//!
//! - What is held between ops: `x_j` for every kept input `j` (`x_0` from the start),
//!   for every stashed segment, and for the current forward output; plus each stash's
//!   bytes; plus the current gradient `δ_i` (`chain.delta_bytes(i)`). Each `x_j` counts
//!   once even if it is both kept and stashed (a stash holds its input by reference).
//!   Sizes: `chain.x_bytes(j)`.
//! - During `Forward { seg: i, mode }`: held + `stash_i` + `x_bytes(i+1)` +
//!   `forward_extra_i`. Afterwards the output `x_{i+1}` becomes the current output (none
//!   after the last segment); `SaveInput` keeps `x_i`; `SaveAll` keeps the stash
//!   (`stash_i` bytes); `SaveSelective` keeps `selective_stash_i` (or `stash_i` when it
//!   is `None`); `NoSave` keeps nothing.
//! - During `Backward { seg: i }`: the current forward output is dropped first; then
//!   held + `delta_bytes(i)` + `backward_extra_i` (+ `stash_i − selective_stash_i` if
//!   the stash is selective). Afterwards the stash and the kept `x_i` are gone and
//!   `δ_i` replaces the previous gradient.
//!
//! The schedules given are valid. Checked against `Schedule::simulate` on random chains
//! and every strategy.
//!
//! About 60 lines.
//!
//! ## Hint
//!
//! Keep the state between ops in a few variables: the set of kept inputs, the stashes
//! (and whether each is selective), the current forward output and the current
//! gradient. For each op compute `held` from that state, add the op's own bytes, update
//! the peak, then update the state.

use crate::check::{Outcome, rng, with_seed};
#[cfg(not(feature = "solutions"))]
use brrr_checkpoint::{Chain, Op};
use rand::Rng;

/// YOUR CODE: the most bytes alive at any point of `ops`.
#[cfg(not(feature = "solutions"))]
pub fn schedule_peak(chain: &Chain, ops: &[Op]) -> u64 {
    let _ = ops;
    chain.segments.iter().map(|s| s.input + s.stash).sum()
}

#[cfg(feature = "solutions")]
pub use solution::schedule_peak;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/checkpointing/schedule_memory.rs"]
pub mod solution;

/// Against `Schedule::simulate` on random GPT-shaped chains, every strategy.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    use brrr_checkpoint::{GptShape, Strategy, min_budget};
    for _ in 0..10 {
        let shape = GptShape {
            n_layer: rng.random_range(1..10),
            n_head: 4,
            n_embd: 16 * rng.random_range(1..9),
            vocab_size: 256,
            batch: rng.random_range(1..5),
            seq_len: 8 * rng.random_range(1..9),
            dtype_bytes: 4,
        };
        let chain = shape.chain();
        let smallest = min_budget(&chain).map_err(|e| e.to_string())?;
        let k = rng.random_range(1..=shape.n_layer + 1);
        for s in [
            Strategy::None,
            Strategy::Sqrt,
            Strategy::Every(k),
            Strategy::Selective,
            Strategy::Budget(smallest),
        ] {
            let schedule = s.plan(&chain).map_err(|e| e.to_string())?;
            let want = schedule.simulate(&chain).map_err(|e| e.to_string())?.peak;
            let got = schedule_peak(&chain, &schedule.ops);
            if got != want {
                return Err(format!("{s} on {shape:?}: got {got} bytes, want {want}"));
            }
        }
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
