//! Serving estimates: how many bytes a token's keys and values take, how many tokens
//! (and so requests) fit in a GPU's memory beside the weights, and the time of one
//! decode step at each batch size, bound by memory bandwidth (the weights and every
//! request's cache read once a step) or by compute.
//!
//! A decode step at batch `b`, each request holding `L` tokens, reads the weights once
//! (`P · w` bytes) and every request's cache (`b · L · kv` bytes), and does about
//! `2 · P · b` FLOPs in the products plus `4 · b · L · h · l` in attention (scores and
//! the weighted sum; Kaplan et al. 2020, Table 1). Its time is at least the larger of
//! bytes over bandwidth and FLOPs over the peak (the roofline); `b` over that time
//! bounds the tokens per second.

use crate::error::{PerfError, Result};
use crate::memory::TransformerConfig;
use crate::specs::{DType, GpuSpec, Unit};
use serde::Serialize;

/// What is served and how it is stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServeSetup {
    /// Bytes per weight (2 for bf16, 1 for int8 or fp8, 0.5 for int4).
    pub weight_bytes: f64,
    /// Bytes per cached key or value element.
    pub kv_bytes: f64,
    /// Tokens each request holds in the cache (prompt and output so far).
    pub context: u64,
    /// Share of the GPU's memory the weights and the cache may use (the rest is
    /// activations, the allocator's slack and the runtime).
    pub memory_fraction: f64,
    /// The dtype the products run in (its tensor-core peak bounds compute).
    pub compute: DType,
}

/// One batch size's decode step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecodeRow {
    /// Requests decoding together.
    pub batch: u64,
    /// Bytes one step reads: weights and every request's cache.
    pub bytes: f64,
    /// FLOPs of one step.
    pub flops: f64,
    /// Seconds at full memory bandwidth.
    pub memory_s: f64,
    /// Seconds at the compute peak.
    pub compute_s: f64,
    /// Tokens per second at best: the batch over the larger time.
    pub tokens_per_s: f64,
    /// Whether memory bandwidth (rather than compute) sets the time.
    pub memory_bound: bool,
}

/// The estimate for one model on one GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServeEstimate {
    /// Parameters.
    pub params: f64,
    /// Bytes of the weights.
    pub weight_bytes: f64,
    /// Bytes of keys and values per token: `2 · l · h · kv`.
    pub kv_bytes_per_token: f64,
    /// Bytes left for the cache.
    pub cache_bytes: f64,
    /// Tokens the cache holds.
    pub max_tokens: f64,
    /// Requests of `context` tokens that fit at once.
    pub max_batch: u64,
    /// One row per batch size asked for (those that fit).
    pub rows: Vec<DecodeRow>,
}

/// The decode step of `cfg` at batch `b` (see the module's documentation).
pub fn decode_step(
    cfg: &TransformerConfig,
    gpu: &GpuSpec,
    s: &ServeSetup,
    b: u64,
) -> Result<DecodeRow> {
    let params = cfg.params();
    let kv = kv_bytes_per_token(cfg, s.kv_bytes);
    let (bf, l) = (b as f64, s.context as f64);
    let bytes = params * s.weight_bytes + bf * l * kv;
    let flops = 2.0 * params * bf + 4.0 * bf * l * (cfg.hidden * cfg.layers) as f64;
    let unit = match s.compute {
        DType::F32 | DType::F64 => Unit::Vector,
        _ => Unit::Tensor,
    };
    let memory_s = bytes / gpu.memory_bandwidth;
    let compute_s = flops / gpu.peak(s.compute, unit)?;
    Ok(DecodeRow {
        batch: b,
        bytes,
        flops,
        memory_s,
        compute_s,
        tokens_per_s: bf / memory_s.max(compute_s),
        memory_bound: memory_s >= compute_s,
    })
}

/// Keys and values of one token in every layer: `2 · l · h` elements of `kv_bytes`.
pub fn kv_bytes_per_token(cfg: &TransformerConfig, kv_bytes: f64) -> f64 {
    2.0 * (cfg.layers * cfg.hidden) as f64 * kv_bytes
}

/// Memory, the largest batch and the decode steps at `batches` (those that fit).
pub fn estimate_serve(
    cfg: &TransformerConfig,
    gpu: &GpuSpec,
    s: &ServeSetup,
    batches: &[u64],
) -> Result<ServeEstimate> {
    cfg.validate()?;
    for (name, v) in [("weight bytes", s.weight_bytes), ("KV bytes", s.kv_bytes)] {
        if !(v > 0.0 && v.is_finite()) {
            return Err(PerfError::NonPositive { name, value: v });
        }
    }
    if !(s.memory_fraction > 0.0 && s.memory_fraction <= 1.0) {
        return Err(PerfError::OutOfRange {
            name: "memory fraction",
            value: s.memory_fraction,
            expected: "in (0, 1]",
        });
    }
    if s.context == 0 {
        return Err(PerfError::NonPositive {
            name: "context",
            value: 0.0,
        });
    }
    let params = cfg.params();
    let weight_bytes = params * s.weight_bytes;
    let kv = kv_bytes_per_token(cfg, s.kv_bytes);
    let cache_bytes = (gpu.memory_bytes * s.memory_fraction - weight_bytes).max(0.0);
    let max_tokens = (cache_bytes / kv).floor();
    let max_batch = (max_tokens / s.context as f64).floor() as u64;
    let rows = batches
        .iter()
        .filter(|&&b| b >= 1 && b <= max_batch)
        .map(|&b| decode_step(cfg, gpu, s, b))
        .collect::<Result<Vec<_>>>()?;
    Ok(ServeEstimate {
        params,
        weight_bytes,
        kv_bytes_per_token: kv,
        cache_bytes,
        max_tokens,
        max_batch,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs::gpu;

    fn setup() -> ServeSetup {
        ServeSetup {
            weight_bytes: 2.0,
            kv_bytes: 2.0,
            context: 1024,
            memory_fraction: 0.9,
            compute: DType::Bf16,
        }
    }

    #[test]
    fn gpt2_on_an_h100_is_memory_bound_alone_and_gains_from_batching() {
        let cfg = TransformerConfig::preset("gpt2").unwrap();
        let h100 = gpu("h100-sxm").unwrap();
        let e = estimate_serve(&cfg, &h100, &setup(), &[1, 8, 64, 1 << 20]).unwrap();
        // 2 · 12 layers · 768 · 2 bytes = 36,864 bytes a token.
        assert_eq!(e.kv_bytes_per_token, 36_864.0);
        let one = &e.rows[0];
        assert!(one.memory_bound);
        // Alone: the weights over the bandwidth, about 3.35 TB/s / 250 MB.
        let want = h100.memory_bandwidth / (e.weight_bytes + 1024.0 * 36_864.0);
        assert!((one.tokens_per_s - want).abs() < 1e-6 * want);
        // 64 requests give about 7× the tokens per second of one, not 64×: at 1,024
        // tokens each, their caches (64 · 38 MB) outweigh the weights (250 MB) they share.
        let gain = e.rows[2].tokens_per_s / one.tokens_per_s;
        assert!(gain > 6.0 && gain < 8.0, "{gain}");
        assert_eq!(e.rows.len(), 3);
        assert!(e.max_batch > 64 && e.max_batch < 1 << 20);
    }

    #[test]
    fn bad_setups_are_errors() {
        let cfg = TransformerConfig::preset("gpt2").unwrap();
        let h100 = gpu("h100-sxm").unwrap();
        let bad = ServeSetup {
            memory_fraction: 1.5,
            ..setup()
        };
        assert!(estimate_serve(&cfg, &h100, &bad, &[1]).is_err());
        let bad = ServeSetup {
            context: 0,
            ..setup()
        };
        assert!(estimate_serve(&cfg, &h100, &bad, &[1]).is_err());
    }
}
