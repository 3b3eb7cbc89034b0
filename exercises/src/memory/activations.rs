//! # Activation memory of a transformer layer
//!
//! Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
//! Models", §4) count the bytes one layer saves for its backward, with 16-bit
//! activations and 1-byte dropout masks, for sequence length `s`, micro-batch `b`,
//! width `h` and `a` heads, on one GPU:
//!
//! - attention keeps `11·sbh` bytes plus `5·a·s²·b` for its core (the softmax output
//!   `2as²b`, its dropout mask `as²b`, the dropout output `2as²b`);
//! - the MLP keeps `19·sbh`; the two LayerNorms `4·sbh`.
//!
//! Return the bytes per layer for each recomputation strategy:
//! `Recompute::None` keeps everything; `Recompute::Selective` recomputes the attention
//! core in the backward (it keeps none of the `5as²b`); `Recompute::Full` keeps only the
//! layer's input (`2·sbh`) and recomputes the rest.
//!
//! Checked against `brrr_perf::memory::activation_bytes_per_layer`.

use crate::check::{Outcome, close, rng, with_seed};
use brrr_perf::memory::{Precision, Recompute, TransformerConfig, activation_bytes_per_layer};
use rand::Rng;

/// YOUR CODE: activation bytes one layer keeps for its backward.
#[cfg(not(feature = "solutions"))]
pub fn layer_activation_bytes(s: u64, b: u64, h: u64, a: u64, recompute: Recompute) -> f64 {
    let _ = (a, recompute);
    (s * b * h) as f64 * 2.0
}

#[cfg(feature = "solutions")]
pub use solution::layer_activation_bytes;

/// The reference solution.
pub mod solution {
    use brrr_perf::memory::Recompute;

    /// `sbh·(34 + 5as/h)`, `34·sbh` or `2·sbh`.
    pub fn layer_activation_bytes(s: u64, b: u64, h: u64, a: u64, recompute: Recompute) -> f64 {
        let (s, b, h, a) = (s as f64, b as f64, h as f64, a as f64);
        let sbh = s * b * h;
        match recompute {
            Recompute::None => sbh * 34.0 + 5.0 * a * s * s * b,
            Recompute::Selective => sbh * 34.0,
            Recompute::Full => 2.0 * sbh,
        }
    }
}

/// Against brrr-perf on random shapes, every strategy.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    for _ in 0..20 {
        let heads = rng.random_range(1..64u64);
        let h = heads * 64;
        let s = rng.random_range(1..8192u64);
        let b = rng.random_range(1..32u64);
        let cfg = TransformerConfig::gpt(12, h, heads, s, 50304);
        for r in [Recompute::None, Recompute::Selective, Recompute::Full] {
            let want = activation_bytes_per_layer(&cfg, b, 1, false, r, Precision::Mixed)
                .map_err(|e| e.to_string())?;
            let got = layer_activation_bytes(s, b, h, heads, r);
            close(
                &format!("s={s} b={b} h={h} a={heads} {r:?}"),
                got,
                want,
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
