//! # The cost of a GEMM
//!
//! `C[m,n] = A[m,k] · B[k,n]`, every element `bytes_per_element` wide. How much work is it,
//! and how little data could it get away with moving?
//!
//! - `flops`: how many floating-point operations? Count a fused multiply-add as two (a
//!   multiply and an add), as the GPUs' peak figures do.
//! - `bytes`: the *least* DRAM traffic any kernel could manage: each matrix crosses the
//!   memory bus once, in the direction it must.
//!
//! Their ratio, `Cost::intensity`, decides the GEMM's regime. About 6 lines. Checked against
//! `brrr_perf::roofline::OpCost::gemm` on random shapes.
//!
//! ## Hint
//!
//! Each element of `C` is a dot product of length `k`. For the bytes, ask which matrices
//! must be read and which written, and how many elements each has.

use crate::check::{Outcome, close, every, hint_if, rng, with_seed};
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

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/regimes/gemm_cost.rs"]
pub mod solution;

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
        let (mf, nf, kf, e) = (m as f64, n as f64, k as f64, dtype.bytes());
        every([
            hint_if(
                close(&format!("{what} flops"), got.flops, want.flops, 1e-12),
                got.flops == mf * nf * kf,
                "a fused multiply-add is two FLOPs, a multiply and an add",
            ),
            hint_if(
                close(&format!("{what} bytes"), got.bytes, want.bytes, 1e-12),
                got.bytes == (mf * kf + kf * nf) * e,
                "C is written back to DRAM too",
            ),
            close(
                &format!("{what} intensity"),
                got.intensity(),
                want.intensity(),
                1e-12,
            ),
        ])?;
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
