//! # Rounding f32 to bfloat16
//!
//! bfloat16 is the top 16 bits of an f32: sign, the same 8 exponent bits, 7 of the 23
//! mantissa bits. Cutting the low 16 bits off truncates toward zero, which biases every
//! value down; hardware rounds to nearest, ties to even. Return the bf16 bits of `x`
//! (NaN may be any quiet NaN). Checked against brrr-cpu's f32 → bf16 cast on random
//! values of every magnitude, ties and NaN.
//!
//! About 6 lines.
//!
//! ## Hint
//!
//! Rounding to nearest is adding half a unit of the last kept bit and then truncating;
//! for ties to even, add a little less when the last kept bit is 0, so that an exact
//! tie rounds down to the even value. Deal with NaN first, or the addition can carry it
//! into infinity.

use crate::check::{Outcome, rng, with_seed};
use brrr_backend::{Backend, DType, HostData, block_on};
use brrr_cpu::CpuBackend;
use rand::Rng;

/// YOUR CODE: the bf16 bits nearest to `x` (ties to even).
#[cfg(not(feature = "solutions"))]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    // Truncation: right for half of all inputs.
    (x.to_bits() >> 16) as u16
}

#[cfg(feature = "solutions")]
pub use solution::f32_to_bf16_bits;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/amp/bf16_round.rs"]
pub mod solution;

/// Against brrr-cpu's cast.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let mut xs: Vec<f32> = (0..4000)
        .map(|_| {
            let e: i32 = rng.random_range(-130..=127);
            let s = if rng.random_bool(0.5) { -1.0 } else { 1.0 };
            s * rng.random_range(1.0f32..2.0) * (e as f32).exp2()
        })
        .collect();
    // Exact ties: 1 + 2^-8 (rounds down to even) and 1 + 3·2^-8 (rounds up to even).
    xs.extend([
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        0.0,
        -0.0,
        f32::MAX,
        1e-40,
    ]);
    let cpu = CpuBackend::new();
    let src = cpu
        .upload(&HostData::F32(xs.clone()))
        .map_err(|e| e.to_string())?;
    let mut dst = cpu
        .zeros(DType::BF16, xs.len())
        .map_err(|e| e.to_string())?;
    cpu.cast(&src, &mut dst).map_err(|e| e.to_string())?;
    let HostData::BF16(want) = block_on(cpu.read(&dst)).map_err(|e| e.to_string())? else {
        return Err("the cast did not produce bf16".into());
    };
    for (x, w) in xs.iter().zip(want) {
        let got = f32_to_bf16_bits(*x);
        if got != w.to_bits() {
            return Err(format!(
                "{x:e} (bits {:#010x}): got {got:#06x}, expected {:#06x}",
                x.to_bits(),
                w.to_bits()
            ));
        }
    }
    if f32_to_bf16_bits(f32::NAN) & 0x7F80 != 0x7F80 || f32_to_bf16_bits(f32::NAN) & 0x7F == 0 {
        return Err("NaN must stay NaN (exponent all ones, mantissa non-zero)".into());
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
