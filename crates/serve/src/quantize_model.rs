//! [`quantize_weights`]: a model's linear layers through a [`WeightFormat`] and back,
//! so that it computes with exactly the values the quantized storage holds.
//!
//! Emulated, as a measurement of accuracy and memory: the layers still multiply in the
//! model's dtype; a kernel that reads the codes and scales directly (and so reads a
//! quarter or an eighth of the bytes) is what turns the saving into decode speed.

use crate::quant::{Quantized, WeightFormat};
use brrr_backend::{Error, Result};
use brrr_nn::{Gpt, Module};
use brrr_tensor::Tensor;

/// What [`quantize_weights`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuantReport {
    /// Weight matrices quantized.
    pub matrices: usize,
    /// Their weights.
    pub weights: usize,
    /// Their bytes in the model's dtype before.
    pub bytes_before: usize,
    /// Their bytes quantized: codes and scales.
    pub bytes_after: usize,
    /// The largest change of one weight.
    pub max_abs_error: f32,
}

/// Replaces every weight matrix of the transformer blocks (each `Linear`'s `[out, in]`
/// weight) by its value after `format`; the embeddings (and so the tied output
/// projection), layer norms and biases keep their precision, as weight-only schemes do.
pub fn quantize_weights<B: brrr_backend::Backend>(
    model: &mut Gpt<B>,
    format: WeightFormat,
) -> Result<QuantReport> {
    let mut report = QuantReport::default();
    for p in model.params_mut() {
        let dims = p.value.dims().to_vec();
        if dims.len() != 2 || !p.name.starts_with("h.") {
            continue;
        }
        let (rows, cols) = (dims[0], dims[1]);
        let w = p.value.to_vec_f32()?;
        let q = Quantized::quantize(&w, rows, cols, format)
            .map_err(|e| Error::invalid("quantize_weights", format!("{}: {e}", p.name)))?;
        let back = q.dequantize();
        report.max_abs_error = w
            .iter()
            .zip(&back)
            .fold(report.max_abs_error, |m, (a, b)| m.max((a - b).abs()));
        let dtype = p.value.dtype();
        p.value = Tensor::from_f32(p.value.backend(), &back, [rows, cols], dtype)?;
        report.matrices += 1;
        report.weights += w.len();
        report.bytes_before += w.len() * dtype.size_in_bytes();
        report.bytes_after += q.bytes();
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use brrr_cpu::CpuBackend;
    use brrr_nn::{DType, GptConfig};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn logits(format: Option<WeightFormat>) -> (Vec<f32>, QuantReport) {
        let config = GptConfig {
            vocab_size: 32,
            block_size: 16,
            n_layer: 2,
            n_head: 2,
            n_embd: 64,
        };
        let be = CpuBackend::new();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut model = Gpt::new(&be, config, DType::F32, &mut rng).unwrap();
        let report = match format {
            Some(f) => quantize_weights(&mut model, f).unwrap(),
            None => QuantReport::default(),
        };
        let ids = Tensor::from_u32(&be, &[1, 2, 3, 4, 5, 6], [1, 6]).unwrap();
        (model.forward(&ids).unwrap().to_vec_f32().unwrap(), report)
    }

    #[test]
    fn linear_weights_shrink_and_the_logits_move_with_the_bits() {
        let (want, _) = logits(None);
        let err = |f| {
            let (got, report) = logits(Some(f));
            let e = got
                .iter()
                .zip(&want)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            (e, report)
        };
        let (e8, r8) = err(WeightFormat::Int8);
        let (e4, r4) = err(WeightFormat::Int4 { group: 32 });
        // Four matrices a block (qkv, projection, two MLP layers), 12·64² weights a block.
        assert_eq!((r8.matrices, r8.weights), (8, 2 * 12 * 64 * 64));
        assert_eq!(r8.bytes_before, 4 * r8.weights);
        // A byte a weight plus a 2-byte scale a row of 64: a quarter of f32, and 3%.
        assert!(r8.bytes_after * 4 <= r8.bytes_before * 1032 / 1000);
        assert!(r4.bytes_after * 7 < r4.bytes_before);
        assert!(e8 > 0.0 && e8 < e4, "int8 {e8}, int4 {e4}");
        assert!(e4 < 0.05, "{e4}");
    }
}
