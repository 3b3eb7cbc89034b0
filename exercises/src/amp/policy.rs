//! # The autocast policy
//!
//! Mixed precision runs an op in 16 bits only where that is safe and pays: the GEMMs
//! (most of the FLOPs) and attention's core take the low-precision dtype, and so do the
//! element-wise ops that read and write the same activations. Statistics (LayerNorm's
//! variance, softmax's max and sum), the loss, reductions over many elements and the
//! optimizer stay f32. Return the dtype `brrr_amp::Policy::new(low)` gives each class.
//!
//! About 8 lines.
//!
//! ## Hint
//!
//! One `match` over the op classes: which do the bulk of the FLOPs on tensor cores (low
//! precision), and which accumulate over many elements or feed the loss and the
//! optimizer (f32)? The failure message says why a class is wrong.

use crate::check::Outcome;
use brrr_amp::{OpClass, Policy};
use brrr_backend::DType;

/// YOUR CODE: the dtype op class `class` runs in under the default policy for `low`.
#[cfg(not(feature = "solutions"))]
pub fn autocast_dtype(class: OpClass, low: DType) -> DType {
    // Everything in 16 bits: fast, and the loss turns into noise.
    let _ = class;
    low
}

#[cfg(feature = "solutions")]
pub use solution::autocast_dtype;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/amp/policy.rs"]
pub mod solution;

/// Against `brrr_amp::Policy` for every class, f16 and bf16.
pub fn check() -> Outcome {
    for low in [DType::F16, DType::BF16] {
        let policy = Policy::new(low).map_err(|e| e.to_string())?;
        for class in OpClass::ALL {
            let (got, want) = (autocast_dtype(class, low), policy.dtype(class));
            if got != want {
                let why = class.always_f32().unwrap_or("it is where the FLOPs are");
                return Err(format!(
                    "{} under {low}: got {got}, expected {want} ({why})",
                    class.name()
                ));
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
