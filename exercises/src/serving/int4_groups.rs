//! # Weights in four bits: group-wise int4, there and back
//!
//! A decode step reads every weight, so storing weights in fewer bits makes it faster.
//! int4 with groups stores each run of `group` consecutive weights of a row as integer
//! codes in `[-7, 7]` and one scale. Each row starts a new group, and a row's last group
//! is shorter when `group` does not divide the row. For each group:
//! - the scale is the group's largest `|w|` divided by 7, **stored in f16**: round it
//!   with [`f16_round`] before using it, since the codes must be computed with the scale
//!   that is kept. A group of zeros gets the scale 1;
//! - each code is `w / scale` rounded to the nearest integer (halves away from zero, as
//!   `f32::round` does), kept within `[-7, 7]`;
//! - the weight read back is `code × scale`.
//!
//! Return the matrix `w` (row-major, `cols` a row) as it reads back. With `group = 2`,
//! the row `[0.7, -0.35, 0.1, 0.0]` has the scales 0.1 and about 0.0143 (f16: 0.014282...),
//! and reads back as about `[0.7, -0.4, 0.1, 0.0]`: `-0.35 / 0.1 = -3.5` rounds to `-4`.
//!
//! Checked exactly against `brrr_serve::Quantized` (`WeightFormat::Int4`) on random
//! matrices with outliers and all-zero groups.
//!
//! About 17 lines.
//!
//! ## Hint
//!
//! Loop over rows, then over groups within the row. For each group: the scale from the
//! largest `|w|` (through `f16_round`, 1 for zeros), then each code `(w /
//! scale).round().clamp(-7.0, 7.0)` and back.

use crate::check::{Outcome, rng, with_seed};
use brrr_backend::{DType, HostData};
use brrr_serve::{Quantized, WeightFormat};
use rand::Rng;

/// `x` rounded to the nearest f16 value (ties to even), back in f32: how the scale is
/// stored.
pub fn f16_round(x: f32) -> f32 {
    HostData::from_f64(DType::F16, &[f64::from(x)]).to_f64()[0] as f32
}

/// YOUR CODE: `w` after int4 quantization with groups of `group`, read back.
#[cfg(not(feature = "solutions"))]
pub fn int4_roundtrip(w: &[f32], cols: usize, group: usize) -> Vec<f32> {
    // Not quantized at all: every weight kept exactly.
    let _ = (cols, group);
    w.to_vec()
}

#[cfg(feature = "solutions")]
pub use solution::int4_roundtrip;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/serving/int4_groups.rs"]
pub mod solution;

/// Against `brrr_serve::Quantized` on random shapes, groups and weights.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..40 {
        let (rows, cols) = (rng.random_range(1..6), rng.random_range(1..70));
        let group = rng.random_range(1..=cols + 3);
        let mut w: Vec<f32> = (0..rows * cols)
            .map(|_| rng.random_range(-0.1f32..0.1))
            .collect();
        // An outlier, which sets its group's scale, and a run of zeros.
        let i = rng.random_range(0..w.len());
        w[i] *= 40.0;
        let z = rng.random_range(0..w.len());
        let run = rng.random_range(0..=group.min(w.len() - z));
        w[z..z + run].fill(0.0);
        let want = Quantized::quantize(&w, rows, cols, WeightFormat::Int4 { group })?.dequantize();
        let got = int4_roundtrip(&w, cols, group);
        if got.len() != want.len() {
            return Err(format!(
                "{rows} × {cols}, groups of {group}: {} values back for {}",
                got.len(),
                want.len()
            ));
        }
        // Equal values (a code of -0 reads back as 0 either way).
        if let Some(k) = (0..want.len()).find(|&k| got[k] != want[k]) {
            return Err(format!(
                "{rows} × {cols}, groups of {group}: weight {k} ({}) reads back as {}, \
                 brrr-serve's int4 gives {}",
                w[k], got[k], want[k]
            ));
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

    #[test]
    fn the_example_in_the_docs() {
        let got = super::solution::int4_roundtrip(&[0.7, -0.35, 0.1, 0.0], 4, 2);
        let second = super::f16_round(0.1 / 7.0);
        assert!(
            (got[0] - 0.7).abs() < 1e-3 && (got[1] + 0.4).abs() < 1e-3,
            "{got:?}"
        );
        assert_eq!(got[2], 7.0 * second);
        assert_eq!(got[3], 0.0);
    }
}
