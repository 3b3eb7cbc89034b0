//! Training FLOPs, time-to-train, MFU/HFU and throughput conversions.
//!
//! - `6·N·D`: each token costs `2N` FLOPs forward (one multiply-add per parameter) and `4N`
//!   backward (gradients w.r.t. activations and weights): Kaplan et al., "Scaling Laws for
//!   Neural Language Models" (2020), Section 2.1; Hoffmann et al. (Chinchilla, 2022).
//! - Attention term: `12·l·s·h` FLOPs per token for training (`QKᵀ` and `P·V`, `2·s·h` each
//!   per layer forward, ×3 for forward + backward), as in Chowdhery et al., "PaLM" (2022),
//!   Appendix B. It counts the full `s × s` score matrix; a causal kernel does half.
//! - Megatron: `F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))` per iteration with full activation
//!   recomputation: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
//!   Clusters Using Megatron-LM" (SC 2021), Section 5.1, eq. (3).
//! - MFU (model FLOPs utilisation) counts only the model's FLOPs; HFU (hardware FLOPs
//!   utilisation) also counts recomputation: Chowdhery et al. 2022, Appendix B; Korthikanti et
//!   al. 2022, Section 6.

use crate::error::{PerfError, Result, at_least_one, finite, positive};
use crate::memory::{Recompute, TransformerConfig};
use serde::Serialize;

/// `6·N·D`: training FLOPs for `params` parameters over `tokens` tokens.
/// GPT-3 175B on 300B tokens: `6 × 175e9 × 300e9 = 3.15e23`.
pub fn training_flops(params: f64, tokens: f64) -> Result<f64> {
    finite(
        "training FLOPs 6·N·D",
        6.0 * positive("params", params)? * positive("tokens", tokens)?,
    )
}

/// Attention-score FLOPs per token for training: `12·l·s·h` (PaLM, Appendix B), halved if
/// `causal` to count only what a causal kernel computes.
pub fn attention_flops_per_token(
    layers: u64,
    seq_len: u64,
    hidden: u64,
    causal: bool,
) -> Result<f64> {
    at_least_one("layers", layers)?;
    at_least_one("seq_len", seq_len)?;
    at_least_one("hidden", hidden)?;
    let f = 12.0 * layers as f64 * seq_len as f64 * hidden as f64;
    Ok(if causal { f / 2.0 } else { f })
}

/// Model FLOPs per token for training `cfg`: `6·N + 12·l·s·h`, where `N` counts every
/// parameter that takes part in a matmul per token: the layers and the (tied) output
/// projection `V·h`, but not the position embedding (a lookup). This is the numerator of MFU.
pub fn model_flops_per_token(cfg: &TransformerConfig) -> Result<f64> {
    cfg.validate()?;
    // V·h in f64: the u64 product can overflow for (absurd) validated sizes up to 2^53.
    let n = cfg.non_embedding_params() + cfg.vocab as f64 * cfg.hidden as f64;
    Ok(6.0 * n + attention_flops_per_token(cfg.layers, cfg.seq_len, cfg.hidden, false)?)
}

/// Hardware FLOPs per token: [`model_flops_per_token`] plus what recomputation repeats.
/// Full recomputation repeats each layer's forward (`2·N_layers + 4·l·s·h` per token);
/// selective repeats the attention core's forward (`4·l·s·h`).
pub fn hardware_flops_per_token(cfg: &TransformerConfig, recompute: Recompute) -> Result<f64> {
    let model = model_flops_per_token(cfg)?;
    let attn_fwd = 4.0 * cfg.layers as f64 * cfg.seq_len as f64 * cfg.hidden as f64;
    Ok(model
        + match recompute {
            Recompute::None => 0.0,
            Recompute::Selective => attn_fwd,
            Recompute::Full => 2.0 * cfg.non_embedding_params() + attn_fwd,
        })
}

/// Megatron-LM FLOPs per iteration (Narayanan et al. 2021, eq. 3) for global batch `batch`
/// sequences of length `seq`, `layers`, `hidden`, `vocab`:
///
/// - with full recomputation (`recompute = true`, as in the paper):
///   `96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))`
/// - without: `72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))` (forward `24Bslh² + 4Bs²lh + 2BshV`,
///   times 3; with recomputation the layers run forward twice, times 4, the logit layer 3).
pub fn megatron_flops_per_iteration(
    batch: u64,
    seq: u64,
    layers: u64,
    hidden: u64,
    vocab: u64,
    recompute: bool,
) -> Result<f64> {
    for (name, v) in [
        ("batch", batch),
        ("seq", seq),
        ("layers", layers),
        ("hidden", hidden),
        ("vocab", vocab),
    ] {
        at_least_one(name, v)?;
    }
    let (b, s, l, h, v) = (
        batch as f64,
        seq as f64,
        layers as f64,
        hidden as f64,
        vocab as f64,
    );
    Ok(if recompute {
        96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h))
    } else {
        72.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * l * h))
    })
}

/// Checks a utilisation lies in (0, 1].
fn utilisation(name: &'static str, u: f64) -> Result<f64> {
    if u.is_finite() && u > 0.0 && u <= 1.0 {
        Ok(u)
    } else {
        Err(PerfError::OutOfRange {
            name,
            value: u,
            expected: "in (0, 1]",
        })
    }
}

/// Seconds to do `total_flops` on `gpus` GPUs of `peak_flops` each at utilisation `mfu`:
/// `total_flops / (gpus × peak_flops × mfu)`.
pub fn time_to_train(total_flops: f64, gpus: u64, peak_flops: f64, mfu: f64) -> Result<f64> {
    positive("total FLOPs", total_flops)?;
    at_least_one("GPUs", gpus)?;
    positive("peak FLOP/s", peak_flops)?;
    utilisation("MFU", mfu)?;
    Ok(total_flops / (gpus as f64 * peak_flops * mfu))
}

/// Narayanan et al. 2021, eq. (4): end-to-end time `≈ 8·T·P / (n·X)` for `tokens` `T`,
/// `params` `P`, `gpus` `n` at `achieved_flops_per_gpu` `X` (with recomputation, 8 = 2 × 4
/// passes).
pub fn megatron_training_time(
    tokens: f64,
    params: f64,
    gpus: u64,
    achieved_flops_per_gpu: f64,
) -> Result<f64> {
    positive("tokens", tokens)?;
    positive("params", params)?;
    at_least_one("GPUs", gpus)?;
    positive("achieved FLOP/s per GPU", achieved_flops_per_gpu)?;
    Ok(8.0 * tokens * params / (gpus as f64 * achieved_flops_per_gpu))
}

/// Utilisation from a measured step: `flops_per_step / (step_time × gpus × peak_flops)`.
/// With model FLOPs this is MFU; with hardware FLOPs (including recomputation) it is HFU.
pub fn utilisation_from_step(
    flops_per_step: f64,
    step_time_s: f64,
    gpus: u64,
    peak_flops: f64,
) -> Result<f64> {
    positive("FLOPs per step", flops_per_step)?;
    positive("step time", step_time_s)?;
    at_least_one("GPUs", gpus)?;
    positive("peak FLOP/s", peak_flops)?;
    Ok(flops_per_step / (step_time_s * gpus as f64 * peak_flops))
}

/// FLOP/s achieved at `tokens_per_s` with `flops_per_token`: `tokens_per_s × flops_per_token`.
pub fn tokens_per_s_to_flops(tokens_per_s: f64, flops_per_token: f64) -> Result<f64> {
    finite(
        "achieved FLOP/s",
        positive("tokens/s", tokens_per_s)? * positive("FLOPs per token", flops_per_token)?,
    )
}

/// Tokens/s at `flops` FLOP/s with `flops_per_token`: `flops / flops_per_token`.
pub fn flops_to_tokens_per_s(flops: f64, flops_per_token: f64) -> Result<f64> {
    Ok(positive("FLOP/s", flops)? / positive("FLOPs per token", flops_per_token)?)
}

/// A training-time estimate for a model on a cluster.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeEstimate {
    /// Parameters `N` used for `6ND`.
    pub params: f64,
    /// Training tokens `D`.
    pub tokens: f64,
    /// `6·N·D`.
    pub flops_6nd: f64,
    /// `6·N·D` plus the attention term, when the architecture is known.
    pub flops_with_attention: Option<f64>,
    /// FLOPs the estimate uses (with attention when known).
    pub flops: f64,
    /// GPUs.
    pub gpus: u64,
    /// Peak FLOP/s per GPU.
    pub peak_flops: f64,
    /// Assumed MFU.
    pub mfu: f64,
    /// Seconds.
    pub seconds: f64,
    /// Cluster throughput in tokens/s at that MFU.
    pub tokens_per_s: f64,
}

/// Time to train `tokens` tokens of a model with `params` parameters (and, if `cfg` is given,
/// the attention term from its shape) on `gpus` GPUs of `peak_flops` at `mfu`.
pub fn estimate_time(
    params: f64,
    tokens: f64,
    cfg: Option<&TransformerConfig>,
    gpus: u64,
    peak_flops: f64,
    mfu: f64,
) -> Result<TimeEstimate> {
    let flops_6nd = training_flops(params, tokens)?;
    let flops_with_attention = match cfg {
        Some(c) => Some(finite(
            "training FLOPs with attention",
            flops_6nd + tokens * attention_flops_per_token(c.layers, c.seq_len, c.hidden, false)?,
        )?),
        None => None,
    };
    let flops = flops_with_attention.unwrap_or(flops_6nd);
    let seconds = time_to_train(flops, gpus, peak_flops, mfu)?;
    Ok(TimeEstimate {
        params,
        tokens,
        flops_6nd,
        flops_with_attention,
        flops,
        gpus,
        peak_flops,
        mfu,
        seconds,
        tokens_per_s: tokens / seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed-level fact: GPT-3 175B on 300B tokens ≈ 3.15e23 FLOPs (6ND); Brown et al. 2020,
    /// Table D.1, lists 3.14e23 training FLOPs for GPT-3 175B.
    #[test]
    fn gpt3_total_flops() {
        let f = training_flops(175e9, 300e9).unwrap();
        assert!((f - 3.15e23).abs() / 3.15e23 < 1e-12);
        assert!((f - 3.14e23).abs() / 3.14e23 < 0.005);
    }

    #[test]
    fn megatron_formula_matches_its_derivation() {
        // Derive eq. (3) from the per-layer forward counts: 24Bsh² + 4Bs²h per layer and
        // 2BshV for the logits; ×4 for layers with recomputation, ×3 for the logits.
        let (b, s, l, h, v) = (512.0, 2048.0, 24.0, 2304.0, 51200.0);
        let fwd_layers = l * (24.0 * b * s * h * h + 4.0 * b * s * s * h);
        let fwd_logits = 2.0 * b * s * h * v;
        let with = megatron_flops_per_iteration(512, 2048, 24, 2304, 51200, true).unwrap();
        assert!((with - (4.0 * fwd_layers + 3.0 * fwd_logits)).abs() / with < 1e-12);
        let without = megatron_flops_per_iteration(512, 2048, 24, 2304, 51200, false).unwrap();
        assert!((without - 3.0 * (fwd_layers + fwd_logits)).abs() / without < 1e-12);
    }

    #[test]
    fn conversions_round_trip() {
        let f = tokens_per_s_to_flops(1e6, 6.0 * 1e9).unwrap();
        assert_eq!(f, 6e15);
        assert_eq!(flops_to_tokens_per_s(f, 6e9).unwrap(), 1e6);
        let u = utilisation_from_step(6e15, 1.0, 64, 312e12).unwrap();
        assert!((u - 6e15 / (64.0 * 312e12)).abs() < 1e-15);
    }

    #[test]
    fn bad_inputs() {
        assert!(time_to_train(1e20, 0, 1e12, 0.5).is_err());
        assert!(time_to_train(1e20, 8, 1e12, 1.5).is_err());
        assert!(time_to_train(1e20, 8, 1e12, 0.0).is_err());
        assert!(training_flops(-1.0, 1.0).is_err());
        assert!(training_flops(f64::NAN, 1.0).is_err());
        assert!(megatron_flops_per_iteration(0, 1, 1, 1, 1, true).is_err());
    }

    #[test]
    fn hfu_exceeds_mfu_with_recompute() {
        let c = TransformerConfig::preset("gpt3-175b").unwrap();
        let m = model_flops_per_token(&c).unwrap();
        let full = hardware_flops_per_token(&c, Recompute::Full).unwrap();
        let sel = hardware_flops_per_token(&c, Recompute::Selective).unwrap();
        assert!(m < sel && sel < full);
        // Full recompute costs about one extra forward: ~4/3 of the model FLOPs.
        assert!((full / m - 4.0 / 3.0).abs() < 0.02, "{}", full / m);
    }
}
