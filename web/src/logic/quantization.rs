//! The serving page's quantization panel: brrr-serve's weight formats
//! (`brrr_serve::Quantized`: int8 per row, int4 in groups, fp8 E4M3 per tensor) on a
//! stand-in weight matrix with a few outliers, and what each costs in bytes and error.
//!
//! The matrix is drawn like a trained layer's: most weights small, a few rows carrying
//! weights `outlier` times larger (the outlier features of Dettmers et al. 2022). A scale
//! is set by the largest weight it covers, so an outlier coarsens every weight that shares
//! its scale: per row for int8, per group for int4, the whole tensor for fp8. The error
//! is measured on the weights that are not outliers, where that coarsening shows.

use brrr_serve::{Quantized, WeightFormat};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Rows and columns of the stand-in matrix.
pub const ROWS: usize = 64;
/// Columns (inputs) of the stand-in matrix.
pub const COLS: usize = 256;
/// The largest outlier factor the panel accepts.
pub const MAX_OUTLIER: u32 = 200;

/// What the reader picked.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantInput {
    /// How many times larger than the typical weight the outliers are.
    pub outlier: u32,
    /// Weights per int4 scale.
    pub group: usize,
}

impl Default for QuantInput {
    fn default() -> Self {
        QuantInput {
            outlier: 20,
            group: 32,
        }
    }
}

/// One format's cost and error.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantRow {
    /// The format's name (`int8`, `int4-g32`, `fp8-e4m3`).
    pub format: String,
    /// Bytes per weight, scales included.
    pub bytes_per_weight: f64,
    /// Root-mean-square error over the ordinary weights, relative to their RMS.
    pub rel_rms_error: f64,
    /// The largest error on an ordinary weight, relative to their RMS.
    pub rel_max_error: f64,
}

/// The panel's numbers: f32 first (exact), then each format.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantView {
    /// One row per format.
    pub rows: Vec<QuantRow>,
}

/// The stand-in matrix (a fixed seed) and which of its weights are outliers.
fn weights(outlier: f32) -> (Vec<f32>, Vec<bool>) {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut w = Vec::with_capacity(ROWS * COLS);
    let mut marked = Vec::with_capacity(ROWS * COLS);
    for _ in 0..ROWS * COLS {
        // A sum of three uniforms: bell-shaped, standard deviation about 0.02.
        let x: f32 = (0..3).map(|_| rng.random_range(-0.02f32..0.02)).sum();
        // One weight in 200 is an outlier.
        let big = rng.random_range(0..200) == 0;
        w.push(if big { x.signum() * 0.02 * outlier } else { x });
        marked.push(big);
    }
    (w, marked)
}

/// Quantizes the stand-in matrix in each format and measures the error.
pub fn view(input: &QuantInput) -> Result<QuantView, String> {
    if input.outlier == 0 || input.outlier > MAX_OUTLIER {
        return Err(format!(
            "outliers must be 1 to {MAX_OUTLIER} times the typical weight, got {}",
            input.outlier
        ));
    }
    if input.group == 0 || input.group > COLS {
        return Err(format!(
            "an int4 group holds 1 to {COLS} weights, got {}",
            input.group
        ));
    }
    let (w, outlier) = weights(input.outlier as f32);
    let ordinary: Vec<usize> = (0..w.len()).filter(|&i| !outlier[i]).collect();
    let rms = (ordinary
        .iter()
        .map(|&i| f64::from(w[i]).powi(2))
        .sum::<f64>()
        / ordinary.len().max(1) as f64)
        .sqrt()
        .max(f64::MIN_POSITIVE);
    let mut rows = vec![QuantRow {
        format: "f32".into(),
        bytes_per_weight: 4.0,
        rel_rms_error: 0.0,
        rel_max_error: 0.0,
    }];
    for format in [
        WeightFormat::Int8,
        WeightFormat::Int4 { group: input.group },
        WeightFormat::Fp8E4m3,
    ] {
        let q = Quantized::quantize(&w, ROWS, COLS, format)?;
        let back = q.dequantize();
        let errs: Vec<f64> = ordinary
            .iter()
            .map(|&i| f64::from(back[i] - w[i]).abs())
            .collect();
        let mse = errs.iter().map(|e| e * e).sum::<f64>() / errs.len().max(1) as f64;
        rows.push(QuantRow {
            format: format.to_string(),
            bytes_per_weight: q.bytes() as f64 / w.len() as f64,
            rel_rms_error: mse.sqrt() / rms,
            rel_max_error: errs.iter().fold(0.0, |m: f64, &e| m.max(e)) / rms,
        });
    }
    Ok(QuantView { rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(v: &'a QuantView, name: &str) -> &'a QuantRow {
        v.rows.iter().find(|r| r.format.starts_with(name)).unwrap()
    }

    #[test]
    fn fewer_bits_cost_accuracy_and_outliers_cost_more() {
        let v = view(&QuantInput::default()).unwrap();
        let (int8, int4) = (row(&v, "int8"), row(&v, "int4"));
        assert!(
            int8.bytes_per_weight < 1.01 && int4.bytes_per_weight < 0.6,
            "{v:?}"
        );
        assert!(int8.rel_rms_error < int4.rel_rms_error, "{v:?}");
        // Larger outliers coarsen the per-row and per-tensor scales: the int8 error grows.
        let big = view(&QuantInput {
            outlier: 200,
            ..QuantInput::default()
        })
        .unwrap();
        assert!(
            row(&big, "int8").rel_rms_error > 2.0 * int8.rel_rms_error,
            "{big:?}"
        );
        // Smaller int4 groups isolate the outliers: less error, more scales.
        let small = view(&QuantInput {
            group: 8,
            ..QuantInput::default()
        })
        .unwrap();
        let s4 = row(&small, "int4");
        assert!(s4.rel_rms_error < int4.rel_rms_error, "{small:?}");
        assert!(s4.bytes_per_weight > int4.bytes_per_weight);
        assert!(
            view(&QuantInput {
                outlier: 0,
                group: 32
            })
            .is_err()
        );
        assert!(
            view(&QuantInput {
                outlier: 20,
                group: 0
            })
            .is_err()
        );
    }
}
