//! # What fusion saves
//!
//! A chain of `ops` unary element-wise ops (say `x.cos().cos().cos()`) over `n` elements
//! of `bytes_per_element` each, one FLOP per element per op. Unfused, every op is its own
//! kernel, and a kernel's input and output live in DRAM. Fused, one kernel applies every op
//! while the value sits in a register. What do the two cost, in FLOPs and in DRAM bytes?
//!
//! Return the cost for `fused` and for unfused. About 8 lines. Checked against
//! `brrr_perf::roofline::OpCost::elementwise_chain`.
//!
//! ## Hint
//!
//! Fusion changes the bytes, not the FLOPs. Count, per kernel, one read of its input and
//! one write of its output.

use crate::check::{Outcome, close, every, rng, with_seed};
use brrr_perf::DType;
use brrr_perf::roofline::OpCost;
use rand::Rng;

/// YOUR CODE: FLOPs and DRAM bytes of a chain of `ops` element-wise ops.
#[cfg(not(feature = "solutions"))]
pub fn chain_cost(
    n: u64,
    ops: u64,
    bytes_per_element: f64,
    fused: bool,
) -> crate::regimes::gemm_cost::Cost {
    let _ = (n, ops, bytes_per_element, fused);
    crate::regimes::gemm_cost::Cost {
        flops: 0.0,
        bytes: 1.0,
    }
}

#[cfg(feature = "solutions")]
pub use solution::chain_cost;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/kernels/fusion_bytes.rs"]
pub mod solution;

/// Compares [`chain_cost`] with brrr-perf, fused and unfused.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..20 {
        let n = rng.random_range(1..1u64 << 30);
        let ops = rng.random_range(1..12u64);
        let dtype = [DType::F32, DType::Bf16][rng.random_range(0..2)];
        for fused in [false, true] {
            let want =
                OpCost::elementwise_chain(n, ops, dtype, fused).map_err(|e| e.to_string())?;
            let got = chain_cost(n, ops, dtype.bytes(), fused);
            every([
                close(
                    &format!("{}: flops", want.name),
                    got.flops,
                    want.flops,
                    1e-12,
                ),
                close(
                    &format!("{}: bytes", want.name),
                    got.bytes,
                    want.bytes,
                    1e-12,
                ),
            ])?;
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
