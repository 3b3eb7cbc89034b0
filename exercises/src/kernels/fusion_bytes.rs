//! # What fusion saves
//!
//! A chain of `ops` unary element-wise ops (say `x.cos().cos().cos()`) over `n`
//! elements of `bytes_per_element` each. Unfused, every op is its own kernel: it reads
//! its input from DRAM and writes its output back. Fused, one kernel reads `x` once,
//! applies every op in registers and writes once. Each op is one FLOP per element.
//!
//! Return the FLOPs and the bytes moved, fused or not. Checked against
//! `brrr_perf::roofline::OpCost::elementwise_chain`.

use crate::check::{Outcome, close, rng, with_seed};
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

/// The reference solution.
pub mod solution {
    use crate::regimes::gemm_cost::Cost;

    /// `n·ops` FLOPs; `2n` element transfers fused, `2n` per op unfused.
    pub fn chain_cost(n: u64, ops: u64, bytes_per_element: f64, fused: bool) -> Cost {
        let (n, ops) = (n as f64, ops as f64);
        let transfers = if fused { 2.0 * n } else { 2.0 * n * ops };
        Cost {
            flops: n * ops,
            bytes: transfers * bytes_per_element,
        }
    }
}

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
            close(
                &format!("{}: flops", want.name),
                got.flops,
                want.flops,
                1e-12,
            )?;
            close(
                &format!("{}: bytes", want.name),
                got.bytes,
                want.bytes,
                1e-12,
            )?;
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
