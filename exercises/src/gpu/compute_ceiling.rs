//! # Which units does an op run on?
//!
//! A GPU has two kinds of arithmetic units with very different peaks: tensor cores,
//! which only do matrix products, and the general-purpose vector lanes ("CUDA cores").
//! Given a GPU from brrr-perf's spec table, a dtype and whether the op is
//! matmul-shaped, return the compute ceiling in FLOP/s the op runs under:
//!
//! - matmul-shaped: the tensor-core peak for `dtype` if the GPU lists one, else the
//!   vector peak for `dtype`;
//! - anything else: the vector peak for `dtype`, and where the GPU lists no vector
//!   peak for it (a 16-bit element-wise op on many GPUs computes in f32), the f32
//!   vector peak;
//! - an `Err` naming what is missing when none of these exist.
//!
//! Use `GpuSpec::peak(dtype, unit)`. Checked against `brrr_perf::roofline::Roofline::for_op`
//! for every GPU and dtype of the table.
//!
//! About 10 lines.
//!
//! ## Hint
//!
//! Try the units in the order the statement lists them and return the first peak the
//! GPU has: `GpuSpec::peak` returns an `Err` for a pair it does not list, and
//! `Result::or_else` chains the fallbacks.

use crate::check::{Outcome, close};
use brrr_perf::DType;
use brrr_perf::roofline::{OpCost, Roofline};
use brrr_perf::specs::gpus;

/// YOUR CODE: the peak FLOP/s an op of `dtype` runs under on `gpu`.
#[cfg(not(feature = "solutions"))]
pub fn compute_ceiling(
    gpu: &brrr_perf::GpuSpec,
    dtype: DType,
    matmul: bool,
) -> Result<f64, String> {
    let _ = (gpu, dtype, matmul);
    Err(crate::check::not_done("compute_ceiling"))
}

#[cfg(feature = "solutions")]
pub use solution::compute_ceiling;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/gpu/compute_ceiling.rs"]
pub mod solution;

/// Every GPU × dtype × {matmul, not}: same value where brrr-perf has one, an `Err`
/// where it has none.
pub fn check() -> Outcome {
    for gpu in gpus() {
        for dtype in DType::ALL {
            for matmul in [true, false] {
                let op = if matmul {
                    OpCost::gemm(64, 64, 64, dtype)
                } else {
                    OpCost::elementwise(64, 1.0, 2, 1, dtype)
                }
                .map_err(|e| e.to_string())?;
                let want = Roofline::for_op(&gpu, &op, dtype).map(|r| r.peak_flops);
                let got = compute_ceiling(&gpu, dtype, matmul);
                let what = format!(
                    "{} {dtype} {}",
                    gpu.id,
                    if matmul { "matmul" } else { "element-wise" }
                );
                match (got, want) {
                    (Ok(g), Ok(w)) => close(&what, g, w, 1e-12)?,
                    (Err(_), Err(_)) => {}
                    (Ok(g), Err(e)) => {
                        return Err(format!("{what}: got {g:e}, expected an error ({e})"));
                    }
                    (Err(e), Ok(w)) => return Err(format!("{what}: got '{e}', expected {w:e}")),
                }
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
