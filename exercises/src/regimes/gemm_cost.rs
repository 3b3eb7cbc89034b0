//! # The cost of a GEMM
//!
//! `C[m,n] = A[m,k] · B[k,n]` with every element `bytes_per_element` wide. Count:
//!
//! - `flops`: floating-point operations, a fused multiply-add counting 2;
//! - `bytes`: the *minimum* traffic to DRAM: A and B read once, C written once.
//!
//! Their ratio is the arithmetic intensity. Checked against `brrr_perf::roofline::OpCost::gemm`
//! on random shapes.

use crate::check::{Outcome, close, rng, with_seed};
use brrr_perf::DType;
use brrr_perf::roofline::OpCost;
use rand::Rng;

/// FLOPs and minimum bytes of one op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Floating-point operations (an FMA is 2).
    pub flops: f64,
    /// Minimum bytes moved to and from DRAM.
    pub bytes: f64,
}

impl Cost {
    /// Arithmetic intensity, FLOP/byte.
    pub fn intensity(&self) -> f64 {
        self.flops / self.bytes
    }
}

/// YOUR CODE: the FLOPs and minimum bytes of an `m×k · k×n` GEMM.
#[cfg(not(feature = "solutions"))]
pub fn gemm_cost(m: u64, n: u64, k: u64, bytes_per_element: f64) -> Cost {
    let _ = (m, n, k, bytes_per_element);
    Cost {
        flops: 0.0,
        bytes: 1.0,
    }
}

#[cfg(feature = "solutions")]
pub use solution::gemm_cost;

/// The reference solution.
pub mod solution {
    use super::Cost;

    /// `2mnk` FLOPs; `(mk + kn + mn)` elements moved.
    pub fn gemm_cost(m: u64, n: u64, k: u64, bytes_per_element: f64) -> Cost {
        let (m, n, k) = (m as f64, n as f64, k as f64);
        Cost {
            flops: 2.0 * m * n * k,
            bytes: (m * k + k * n + m * n) * bytes_per_element,
        }
    }
}

/// Compares [`gemm_cost`] with brrr-perf on random shapes and dtypes.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..20 {
        let (m, n, k) = (
            rng.random_range(1..8192u64),
            rng.random_range(1..8192u64),
            rng.random_range(1..8192u64),
        );
        let dtype = [DType::F32, DType::Bf16, DType::Fp8][rng.random_range(0..3)];
        let want = OpCost::gemm(m, n, k, dtype).map_err(|e| e.to_string())?;
        let got = gemm_cost(m, n, k, dtype.bytes());
        let what = format!("gemm {m}x{n}x{k} {dtype}");
        close(&format!("{what} flops"), got.flops, want.flops, 1e-12)?;
        close(&format!("{what} bytes"), got.bytes, want.bytes, 1e-12)?;
        close(
            &format!("{what} intensity"),
            got.intensity(),
            want.intensity(),
            1e-12,
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
