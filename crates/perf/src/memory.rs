//! Memory estimator for transformer training: parameters, model states (weights, gradients,
//! optimizer states, master weights) under ZeRO, and activations per Korthikanti et al. 2022,
//! per GPU under data, tensor, sequence and pipeline parallelism.
//!
//! Sources:
//! - Model states: Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
//!   Parameter Models" (SC 2020), Section 3.1 and Figure 1: mixed-precision Adam keeps `2Ψ`
//!   bytes of fp16 weights, `2Ψ` of fp16 gradients and `KΨ` of optimizer state with `K = 12`
//!   (fp32 master weights, momentum and variance), 16 bytes per parameter in all; ZeRO stage 1
//!   (P_os) shards the `K` part over the `N_d` data-parallel ranks, stage 2 (P_os+g) also the
//!   gradients, stage 3 (P_os+g+p) also the weights.
//! - Activations: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
//!   Models" (MLSys 2023, arXiv:2205.05198), Section 4 and Table 2, assuming 16-bit
//!   activations and 1-byte dropout masks.
//! - Parameter count: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
//!   Clusters Using Megatron-LM" (SC 2021), Section 5.1, eq. (2).

use crate::error::{PerfError, Result, at_least_one, checked_product, divides, finite};
use serde::Serialize;

/// A GPT-style decoder: learned positions, LayerNorm with bias, GELU MLP, biases everywhere.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransformerConfig {
    /// Transformer layers `l`.
    pub layers: u64,
    /// Hidden size `h`.
    pub hidden: u64,
    /// Attention heads `a`.
    pub heads: u64,
    /// Sequence length `s` (tokens per sample).
    pub seq_len: u64,
    /// Vocabulary size `V`.
    pub vocab: u64,
    /// MLP hidden size (4h in GPT).
    pub ffn_hidden: u64,
    /// Output projection shares the token embedding (GPT-2, GPT-3, Megatron).
    pub tied_embeddings: bool,
    /// Learned position embeddings (`s × h` parameters).
    pub learned_positions: bool,
}

/// Largest size (layers, hidden, heads, sequence, vocabulary, MLP width) a
/// [`TransformerConfig`] accepts: `2^53`, beyond which `f64` no longer holds every integer, so
/// the estimates could not be trusted (and no model is anywhere near it).
pub const MAX_MODEL_SIZE: u64 = 1 << 53;

/// Named configurations for the CLI and tests: `(name, layers, hidden, heads, seq, vocab)`.
/// GPT-2: Radford et al. 2019 (HF configs); GPT-3: Brown et al. 2020, Table 2.1; MT-NLG:
/// Smith et al. 2022; the Megatron-LM weak-scaling models: Narayanan et al. 2021, Table 1 (all
/// with V = 51,200, s = 2048).
pub const PRESETS: &[(&str, u64, u64, u64, u64, u64)] = &[
    ("gpt2", 12, 768, 12, 1024, 50257),
    ("gpt2-medium", 24, 1024, 16, 1024, 50257),
    ("gpt2-large", 36, 1280, 20, 1024, 50257),
    ("gpt2-xl", 48, 1600, 25, 1024, 50257),
    ("gpt3-125m", 12, 768, 12, 2048, 50257),
    ("gpt3-1.3b", 24, 2048, 16, 2048, 50257),
    ("gpt3-6.7b", 32, 4096, 32, 2048, 50257),
    ("gpt3-175b", 96, 12288, 96, 2048, 50257),
    ("megatron-1.7b", 24, 2304, 24, 2048, 51200),
    ("megatron-7.5b", 36, 4096, 32, 2048, 51200),
    ("megatron-145b", 80, 12288, 96, 2048, 51200),
    ("mt-nlg-530b", 105, 20480, 128, 2048, 51200),
    ("megatron-1t", 128, 25600, 160, 2048, 51200),
];

impl TransformerConfig {
    /// A GPT-style model with `ffn_hidden = 4h`, tied embeddings and learned positions.
    /// (`4h` saturates rather than wraps, so an absurd `hidden` fails [`Self::validate`].)
    pub fn gpt(layers: u64, hidden: u64, heads: u64, seq_len: u64, vocab: u64) -> Self {
        Self {
            layers,
            hidden,
            heads,
            seq_len,
            vocab,
            ffn_hidden: hidden.saturating_mul(4),
            tied_embeddings: true,
            learned_positions: true,
        }
    }

    /// A named preset from [`PRESETS`].
    pub fn preset(name: &str) -> Result<Self> {
        let key = name.trim().to_ascii_lowercase();
        PRESETS
            .iter()
            .find(|p| p.0 == key)
            .map(|&(_, l, h, a, s, v)| Self::gpt(l, h, a, s, v))
            .ok_or_else(|| PerfError::Unknown {
                kind: "model preset",
                name: name.to_string(),
                known: PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", "),
            })
    }

    /// Checks every size is at least 1 and at most [`MAX_MODEL_SIZE`], and `hidden` divides
    /// into `heads`.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("seq_len", self.seq_len),
            ("vocab", self.vocab),
            ("ffn_hidden", self.ffn_hidden),
        ] {
            at_least_one(name, v)?;
            if v > MAX_MODEL_SIZE {
                return Err(PerfError::OutOfRange {
                    name,
                    value: v as f64,
                    expected: "at most 2^53 (the estimates use f64, exact for integers up to 2^53)",
                });
            }
        }
        divides("hidden", self.hidden, "heads", self.heads)
    }

    /// Parameters of one layer with tensor parallelism `t` (per rank):
    /// QKV `3h²/t + 3h/t`, output projection `h²/t + h` (its bias is replicated: row-parallel),
    /// MLP `2·h·f/t + f/t + h`, two LayerNorms `4h` (replicated). With `t = 1` and `f = 4h`:
    /// `12h² + 13h`.
    pub fn layer_params(&self, tp: u64) -> f64 {
        let (h, f, t) = (self.hidden as f64, self.ffn_hidden as f64, tp as f64);
        (3.0 * h * h + 3.0 * h) / t + h * h / t + h + (2.0 * h * f + f) / t + h + 4.0 * h
    }

    /// Embedding parameters on one tensor-parallel rank: token embedding `V·h/t`
    /// (vocabulary-parallel) plus learned positions `s·h` (replicated).
    pub fn embedding_params(&self, tp: u64) -> f64 {
        let (h, v, s) = (self.hidden as f64, self.vocab as f64, self.seq_len as f64);
        v * h / tp as f64 + if self.learned_positions { s * h } else { 0.0 }
    }

    /// Parameters after the last layer on one rank: final LayerNorm `2h`, plus the output
    /// projection `V·h/t` if it is not tied.
    pub fn head_params(&self, tp: u64) -> f64 {
        let (h, v) = (self.hidden as f64, self.vocab as f64);
        2.0 * h
            + if self.tied_embeddings {
                0.0
            } else {
                v * h / tp as f64
            }
    }

    /// Total parameters: `l × (12h² + 13h) + V·h + s·h + 2h` for GPT (GPT-2 small:
    /// 124,439,808, the Hugging Face count).
    pub fn params(&self) -> f64 {
        self.layers as f64 * self.layer_params(1) + self.embedding_params(1) + self.head_params(1)
    }

    /// Parameters outside the embeddings (Kaplan et al. 2020's `N`, which `6N` FLOPs/token uses).
    pub fn non_embedding_params(&self) -> f64 {
        self.layers as f64 * self.layer_params(1)
    }
}

/// Narayanan et al. 2021, eq. (2): `P = 12 l h² (1 + 13/(12h) + (V + s)/(12 l h))`, which is
/// [`TransformerConfig::params`] without the final LayerNorm.
pub fn megatron_params(layers: u64, hidden: u64, seq_len: u64, vocab: u64) -> f64 {
    let (l, h, s, v) = (layers as f64, hidden as f64, seq_len as f64, vocab as f64);
    12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (v + s) / (12.0 * l * h))
}

/// How weights and gradients are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// fp32 weights and gradients (4 + 4 bytes/param), no master copy.
    Fp32,
    /// fp16/bf16 weights and gradients (2 + 2) with an fp32 master copy (4): Micikevicius et
    /// al., "Mixed Precision Training" (ICLR 2018); ZeRO's setting.
    Mixed,
}

impl Precision {
    /// Parses `fp32` or `mixed` (also `amp`, `bf16`, `fp16`).
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fp32" | "f32" | "full" => Ok(Precision::Fp32),
            "mixed" | "amp" | "bf16" | "fp16" => Ok(Precision::Mixed),
            _ => Err(PerfError::Unknown {
                kind: "precision",
                name: s.to_string(),
                known: "fp32, mixed".into(),
            }),
        }
    }

    /// Bytes of one activation element: 2 under mixed precision (what Korthikanti et al.
    /// assume), 4 in fp32. Dropout masks are 1 byte and the logits fp32 in both.
    pub fn activation_bytes(self) -> f64 {
        match self {
            Precision::Fp32 => 4.0,
            Precision::Mixed => 2.0,
        }
    }

    /// (weight, gradient, master weight) bytes per parameter.
    pub fn bytes_per_param(self) -> (f64, f64, f64) {
        match self {
            Precision::Fp32 => (4.0, 4.0, 0.0),
            Precision::Mixed => (2.0, 2.0, 4.0),
        }
    }
}

/// Optimizer, for its state size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    /// Adam/AdamW: fp32 momentum and variance, 8 bytes/param (Kingma and Ba 2015).
    Adam,
    /// SGD with momentum: one fp32 buffer, 4 bytes/param.
    SgdMomentum,
    /// Plain SGD: no state.
    Sgd,
    /// 8-bit Adam: two 1-byte states plus one fp32 absmax per 2048-element block per state,
    /// `2 + 8/2048` bytes/param (Dettmers et al., "8-bit Optimizers via Block-wise
    /// Quantization", ICLR 2022). Parameters under [`MIN_8BIT_ELEMS`] elements keep
    /// Adam's 8 bytes ([`estimate_memory`] counts them from the model's shape).
    Adam8bit,
    /// GaLore (Zhao et al. 2024) at `rank`: each layer's weight matrices keep a projection
    /// and two moments of the projected gradient, `4·r·(min + 2·max)` bytes for a
    /// `[min, max]` matrix; every other parameter Adam's 8 bytes. The state depends on the
    /// shapes, so only [`estimate_memory`] prices it ([`layer_galore_state_bytes`]).
    GaLore {
        /// The projection's rank `r`.
        rank: u64,
    },
}

impl Optimizer {
    /// Parses `adam`/`adamw`, `sgd-momentum`/`momentum`, `sgd`, `adam8bit`/`adam-8bit`,
    /// `galore:RANK`.
    pub fn parse(s: &str) -> Result<Self> {
        let key = s.trim().to_ascii_lowercase().replace('_', "-");
        if let Some(r) = key.strip_prefix("galore:") {
            // `galore:RANK[:REFRESH]`, as `brrr train --optimizer` takes it.
            let rank = r.split(':').next().and_then(|x| x.parse::<u64>().ok());
            return match rank {
                Some(rank) if rank > 0 => Ok(Optimizer::GaLore { rank }),
                _ => Err(PerfError::Unknown {
                    kind: "optimizer",
                    name: s.to_string(),
                    known: "galore:RANK with a positive RANK".into(),
                }),
            };
        }
        match key.as_str() {
            "adam" | "adamw" => Ok(Optimizer::Adam),
            "sgd-momentum" | "momentum" | "sgdm" => Ok(Optimizer::SgdMomentum),
            "sgd" => Ok(Optimizer::Sgd),
            "adam8bit" | "adam-8bit" | "8bit-adam" | "adamw8bit" => Ok(Optimizer::Adam8bit),
            _ => Err(PerfError::Unknown {
                kind: "optimizer",
                name: s.to_string(),
                known: "adam, sgd-momentum, sgd, adam8bit, galore:RANK".into(),
            }),
        }
    }

    /// Optimizer state bytes per parameter (excluding master weights); for GaLore, the
    /// 8 bytes of the parameters it does not project (its matrices are priced by
    /// [`layer_galore_state_bytes`]).
    pub fn state_bytes_per_param(self) -> f64 {
        match self {
            Optimizer::Adam | Optimizer::GaLore { .. } => 8.0,
            Optimizer::SgdMomentum => 4.0,
            Optimizer::Sgd => 0.0,
            Optimizer::Adam8bit => 2.0 + 8.0 / 2048.0,
        }
    }
}

/// Bytes of model states per GPU (weights, gradients, master weights, optimizer states).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ModelStates {
    /// Working weights (fp16/bf16 under mixed precision).
    pub weights: f64,
    /// Gradients.
    pub gradients: f64,
    /// fp32 master weights (mixed precision only).
    pub master_weights: f64,
    /// Optimizer states (moments).
    pub optimizer_states: f64,
}

impl ModelStates {
    /// Sum of the four.
    pub fn total(&self) -> f64 {
        self.weights + self.gradients + self.master_weights + self.optimizer_states
    }
}

/// Model-state bytes per GPU for `params` parameters replicated over `dp` data-parallel
/// ranks, with ZeRO `stage` (0 = plain DDP):
///
/// ```text
/// stage 0: (w + g + K) Ψ            stage 2: w Ψ + (g + K) Ψ / N_d
/// stage 1: (w + g) Ψ + K Ψ / N_d    stage 3: (w + g + K) Ψ / N_d
/// ```
///
/// with `w, g` the weight and gradient bytes and `K` = master + optimizer bytes per parameter
/// (ZeRO, Section 3.1 and Figure 1; `K = 12` for mixed-precision Adam).
pub fn model_state_bytes(
    params: f64,
    precision: Precision,
    optimizer: Optimizer,
    zero_stage: u8,
    dp: u64,
) -> Result<ModelStates> {
    crate::error::positive("params", params)?;
    at_least_one("data parallel degree", dp)?;
    if zero_stage > 3 {
        return Err(PerfError::OutOfRange {
            name: "ZeRO stage",
            value: f64::from(zero_stage),
            expected: "0, 1, 2 or 3",
        });
    }
    let (w, g, master) = precision.bytes_per_param();
    let k = optimizer.state_bytes_per_param();
    let shard = |stage: u8| if zero_stage >= stage { dp as f64 } else { 1.0 };
    Ok(ModelStates {
        weights: w * params / shard(3),
        gradients: g * params / shard(2),
        master_weights: master * params / shard(1),
        optimizer_states: k * params / shard(1),
    })
}

/// One layer's weight matrices on one tensor-parallel rank (`[h, 3h/t]`, `[h/t, h]`,
/// `[h, f/t]`, `[f/t, h]`): their optimizer state under Adam (8 bytes per element) and
/// under GaLore at `rank` (`4·r·(min + 2·max)` per matrix, Zhao et al. 2024, Table 1;
/// a matrix not wider than the rank keeps Adam's state, as `brrr_nn` keeps it).
pub fn layer_galore_state_bytes(cfg: &TransformerConfig, tp: u64, rank: u64) -> (f64, f64) {
    let (h, f, t) = (cfg.hidden as f64, cfg.ffn_hidden as f64, tp.max(1) as f64);
    let r = rank as f64;
    let mats = [(h, 3.0 * h / t), (h / t, h), (h, f / t), (f / t, h)];
    let adam: f64 = mats.iter().map(|(a, b)| 8.0 * a * b).sum();
    let galore: f64 = mats
        .iter()
        .map(|&(a, b)| {
            let (small, large) = (a.min(b), a.max(b));
            match small > r {
                true => 4.0 * r * (small + 2.0 * large),
                false => 8.0 * a * b,
            }
        })
        .sum();
    (adam, galore)
}

/// Parameters smaller than this keep f32 moments under 8-bit Adam (bitsandbytes'
/// `min_8bit_size`, `brrr_nn::MIN_8BIT_NUMEL`): biases and LayerNorm parameters.
pub const MIN_8BIT_ELEMS: u64 = 4096;

/// Elements of the parameters under [`MIN_8BIT_ELEMS`] on one tensor-parallel rank: one
/// layer's (the QKV bias `3h/t`, the projections' `h`, the MLP's `f/t` and `h`, the two
/// LayerNorms' four vectors of `h`) and, for the last stage, the final LayerNorm's `2h`.
pub fn small_param_elems(cfg: &TransformerConfig, tp: u64) -> (f64, f64) {
    let (h, f, t) = (cfg.hidden, cfg.ffn_hidden, tp.max(1));
    let small = |n: u64| if n < MIN_8BIT_ELEMS { n as f64 } else { 0.0 };
    let layer = small(3 * h / t) + small(h) + small(f / t) + small(h) + 4.0 * small(h);
    (layer, 2.0 * small(h))
}

/// One layer's LoRA adapter parameters on one tensor-parallel rank at `rank`: `r·(in +
/// out)` for each of its four weight matrices (`[h, 3h/t]`, `[h/t, h]`, `[h, f/t]`,
/// `[f/t, h]`), as `brrr_nn::lora::add_adapters` adapts them.
pub fn layer_lora_params(cfg: &TransformerConfig, tp: u64, rank: u64) -> f64 {
    let (h, f, t) = (cfg.hidden as f64, cfg.ffn_hidden as f64, tp.max(1) as f64);
    let mats = [(h, 3.0 * h / t), (h / t, h), (h, f / t), (f / t, h)];
    rank as f64 * mats.iter().map(|(a, b)| a + b).sum::<f64>()
}

/// Activation recomputation strategy (Korthikanti et al. 2022, Sections 4-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// Keep every activation.
    None,
    /// Recompute only the attention core (`QKᵀ`, softmax, dropout, `·V`): drops the
    /// `5as/h` term.
    Selective,
    /// Keep only each layer's input (`2sbh` bytes) and recompute the layer in backward.
    Full,
}

impl Recompute {
    /// Parses `none`, `selective`, `full`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "no" | "off" => Ok(Recompute::None),
            "selective" | "sel" => Ok(Recompute::Selective),
            "full" | "all" => Ok(Recompute::Full),
            _ => Err(PerfError::Unknown {
                kind: "recompute strategy",
                name: s.to_string(),
                known: "none, selective, full".into(),
            }),
        }
    }
}

/// Pipeline schedule, for how many micro-batches' activations the first stage holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PipelineSchedule {
    /// GPipe (Huang et al. 2019): all `m` micro-batches' activations are live at once.
    GPipe,
    /// 1F1B (PipeDream-Flush, Narayanan et al. 2021): at most `p` in flight on stage 0, so the
    /// first stage holds `L` layers' worth (`L/p` layers × `p` micro-batches).
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// Interleaved 1F1B with `v` model chunks per GPU: 1F1B's memory times `1 + (p−1)/(p·v)`
    /// (Korthikanti et al. 2022, Section 4.2.3).
    Interleaved {
        /// Model chunks (virtual stages) per GPU.
        chunks: u64,
    },
}

/// A training layout: parallel degrees, batch, precision, optimizer, ZeRO and recomputation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainingSetup {
    /// Data-parallel degree `N_d`.
    pub dp: u64,
    /// Tensor-parallel degree `t`.
    pub tp: u64,
    /// Pipeline-parallel degree `p`.
    pub pp: u64,
    /// Sequence parallelism (Korthikanti et al.) on top of tensor parallelism.
    pub sequence_parallel: bool,
    /// Micro-batch size `b` in sequences.
    pub micro_batch: u64,
    /// Micro-batches per optimizer step per data-parallel rank (gradient accumulation steps,
    /// also the pipeline's `m`).
    pub grad_accum: u64,
    /// Weight/gradient precision.
    pub precision: Precision,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// ZeRO stage 0..=3 (sharding over `dp`).
    pub zero_stage: u8,
    /// Activation recomputation.
    pub recompute: Recompute,
    /// Pipeline schedule (ignored when `pp = 1`).
    pub schedule: PipelineSchedule,
    /// ZeRO-Offload (Ren et al. 2021): the f32 master weights and the optimizer states
    /// live in host memory, and the update runs there; the GPU keeps the weights and
    /// gradients ([`MemoryBreakdown::offloaded`]).
    pub offload: bool,
    /// LoRA at this rank (Hu et al. 2021): every weight frozen (no gradient, master or
    /// optimizer state), and adapters of `r·(in + out)` parameters beside each layer's
    /// four weight matrices trained ([`layer_lora_params`]).
    pub lora_rank: Option<u64>,
}

impl Default for TrainingSetup {
    /// One GPU, micro-batch 1, mixed-precision Adam, no ZeRO, no recomputation, 1F1B.
    fn default() -> Self {
        Self {
            dp: 1,
            tp: 1,
            pp: 1,
            sequence_parallel: false,
            micro_batch: 1,
            grad_accum: 1,
            precision: Precision::Mixed,
            optimizer: Optimizer::Adam,
            zero_stage: 0,
            recompute: Recompute::None,
            schedule: PipelineSchedule::OneFOneB,
            offload: false,
            lora_rank: None,
        }
    }
}

/// Activation bytes of one transformer layer for micro-batch `b`, per tensor-parallel rank
/// (Korthikanti et al. 2022, Table 2, for 16-bit activations and 1-byte dropout masks):
///
/// | layout | bytes per layer (16-bit) |
/// |---|---|
/// | no parallelism | `sbh (34 + 5as/h)` |
/// | tensor parallel `t` | `sbh (10 + 24/t + 5as/(ht))` |
/// | tensor + sequence parallel | `sbh/t (34 + 5as/h)` |
/// | tensor parallel + selective recompute | `sbh (10 + 24/t)` |
/// | tensor + sequence parallel + selective | `sbh · 34/t` |
/// | full recompute | `2sbh` (the layer input only) |
///
/// The 34 is attention `11sbh` + MLP `19sbh` + two LayerNorms `4sbh`; the `5as²b` is the
/// attention core (softmax output `2as²b`, its dropout mask `as²b`, dropout output `2as²b`).
/// Under tensor parallelism without sequence parallelism, `10sbh` stays replicated (the two
/// LayerNorm inputs, the two dropout masks, the inputs of the QKV and first MLP GEMMs).
///
/// `precision` sets the bytes of an activation element
/// ([`Precision::activation_bytes`]): the table's terms scale with it except the three
/// 1-byte dropout masks (`2sbh` of the 34, `as²b` of the 5). In fp32 the first row is
/// `sbh (66 + 9as/h)`.
pub fn activation_bytes_per_layer(
    cfg: &TransformerConfig,
    micro_batch: u64,
    tp: u64,
    sequence_parallel: bool,
    recompute: Recompute,
    precision: Precision,
) -> Result<f64> {
    cfg.validate()?;
    at_least_one("micro-batch size", micro_batch)?;
    divides("attention heads", cfg.heads, "tensor parallel degree", tp)?;
    let (s, b, h, a, t) = (
        cfg.seq_len as f64,
        micro_batch as f64,
        cfg.hidden as f64,
        cfg.heads as f64,
        tp as f64,
    );
    let sbh = s * b * h;
    // q: an activation element's bytes in units of 16 bits; masks stay 1 byte.
    let q = precision.activation_bytes() / 2.0;
    let replicated = 8.0 * q + 2.0; // 10sbh at 16 bits: 8 of tensors, 2 of masks
    let split = 24.0 * q; // the tensor-parallel 24sbh
    let attn = (4.0 * q + 1.0) * a * s / h; // 5as/h at 16 bits: 4 of tensors, 1 of mask
    Ok(match (recompute, sequence_parallel) {
        (Recompute::Full, _) => 2.0 * q * sbh,
        (Recompute::None, false) => sbh * (replicated + split / t + attn / t),
        (Recompute::None, true) => sbh / t * (replicated + split + attn),
        (Recompute::Selective, false) => sbh * (replicated + split / t),
        (Recompute::Selective, true) => sbh * (replicated + split) / t,
    })
}

/// Per-GPU memory of one training setup, in bytes, for the first pipeline stage (which holds
/// the embedding and the most in-flight activations, so it is the peak).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryBreakdown {
    /// The model.
    pub model: TransformerConfig,
    /// The layout.
    pub setup: TrainingSetup,
    /// Total model parameters.
    pub params_total: f64,
    /// Parameters held by this GPU's model-parallel shard before ZeRO-3 sharding.
    pub params_per_gpu: f64,
    /// GPUs used: `dp × tp × pp`.
    pub gpus: u64,
    /// Layers on this pipeline stage.
    pub layers_per_stage: u64,
    /// Micro-batches whose activations are live at once on this stage.
    pub microbatches_in_flight: f64,
    /// Sequences per optimizer step: `micro_batch × grad_accum × dp`.
    pub global_batch: u64,
    /// Tokens per optimizer step.
    pub tokens_per_step: u64,
    /// Model states on this GPU.
    pub states: ModelStates,
    /// Activation bytes of one layer for one micro-batch.
    pub activations_per_layer: f64,
    /// Activation bytes of the transformer layers on this stage.
    pub activations_layers: f64,
    /// Activations outside the layers: embedding dropout mask, and for `pp = 1` the final
    /// LayerNorm, output projection input and fp32 logits (Korthikanti et al., Section 4.3:
    /// `sbhp/t + 4sbh/t·(1 + V/h)`, with `t` only where sequence parallelism shards them).
    pub activations_other: f64,
    /// ZeRO-3 working buffer: one gathered layer of 16-bit weights (0 otherwise).
    pub gather_buffer: f64,
    /// Bytes in host memory instead of on the GPU: with offload, the f32 master weights
    /// and the optimizer states (0 otherwise). Not part of [`MemoryBreakdown::total`].
    pub offloaded: f64,
    /// Parameters the optimizer trains on this GPU: all of them, or LoRA's adapters.
    pub trained_params: f64,
}

impl MemoryBreakdown {
    /// All activations on this GPU.
    pub fn activations(&self) -> f64 {
        self.activations_layers + self.activations_other
    }

    /// Everything: model states + activations + buffers. Excludes the CUDA context, allocator
    /// fragmentation and temporary workspaces, which typically add 1-3 GB in practice.
    pub fn total(&self) -> f64 {
        self.states.total() + self.activations() + self.gather_buffer
    }

    /// `(label, bytes)` rows in display order.
    pub fn rows(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("weights", self.states.weights),
            ("gradients", self.states.gradients),
            ("master weights", self.states.master_weights),
            ("optimizer states", self.states.optimizer_states),
            ("activations", self.activations()),
            ("ZeRO-3 gather buffer", self.gather_buffer),
        ]
    }
}

/// Estimates per-GPU training memory of `cfg` under `setup`.
///
/// Errors: any degree or batch of zero; `layers` not divisible by `pp` (or by `pp × chunks`
/// when interleaved); `heads` or `ffn_hidden` not divisible by `tp`; ZeRO stage above 3;
/// sequence parallelism without tensor parallelism is allowed (it is a no-op at `t = 1`).
pub fn estimate_memory(cfg: &TransformerConfig, setup: &TrainingSetup) -> Result<MemoryBreakdown> {
    check_setup(cfg, setup)?;
    let TrainingSetup {
        dp,
        tp,
        pp,
        micro_batch,
        grad_accum,
        ..
    } = *setup;
    let layers_per_stage = cfg.layers / pp;
    let mut params_per_gpu =
        layers_per_stage as f64 * cfg.layer_params(tp) + cfg.embedding_params(tp);
    if pp == 1 {
        params_per_gpu += cfg.head_params(tp);
    }
    let (mut states, trained_params) =
        model_states_on_gpu(cfg, setup, layers_per_stage, params_per_gpu)?;

    let per_layer = activation_bytes_per_layer(
        cfg,
        micro_batch,
        tp,
        setup.sequence_parallel,
        setup.recompute,
        setup.precision,
    )?;
    let in_flight = microbatches_in_flight(setup);
    let activations_layers = per_layer * layers_per_stage as f64 * in_flight;
    let activations_other = other_activation_bytes(cfg, setup, in_flight);

    let gather_buffer = if setup.zero_stage == 3 && dp > 1 {
        setup.precision.bytes_per_param().0 * cfg.layer_params(tp)
    } else {
        0.0
    };

    // ZeRO-Offload: the master weights and the moments move to the host.
    let offloaded = match setup.offload {
        true => {
            let host = states.master_weights + states.optimizer_states;
            states.master_weights = 0.0;
            states.optimizer_states = 0.0;
            host
        }
        false => 0.0,
    };

    let gpus = checked_product("GPUs (DP × TP × PP)", &[("DP", dp), ("TP", tp), ("PP", pp)])?;
    let global_batch = checked_product(
        "global batch (sequences per step)",
        &[
            ("micro-batch", micro_batch),
            ("micro-batches per step", grad_accum),
            ("DP", dp),
        ],
    )?;
    let tokens_per_step = checked_product(
        "tokens per step",
        &[
            ("global batch", global_batch),
            ("sequence length", cfg.seq_len),
        ],
    )?;
    let breakdown = MemoryBreakdown {
        model: cfg.clone(),
        setup: setup.clone(),
        params_total: cfg.params(),
        params_per_gpu,
        gpus,
        layers_per_stage,
        microbatches_in_flight: in_flight,
        global_batch,
        tokens_per_step,
        states,
        activations_per_layer: per_layer,
        activations_layers,
        activations_other,
        gather_buffer,
        offloaded,
        trained_params,
    };
    finite("memory per GPU", breakdown.total())?;
    Ok(breakdown)
}

/// The model states on one GPU holding `params_per_gpu` parameters over
/// `layers_per_stage` layers, with the optimizer's and LoRA's departures from
/// [`model_state_bytes`]' uniform bytes per parameter; and the parameters trained.
fn model_states_on_gpu(
    cfg: &TransformerConfig,
    setup: &TrainingSetup,
    layers_per_stage: u64,
    params_per_gpu: f64,
) -> Result<(ModelStates, f64)> {
    let TrainingSetup { dp, tp, pp, .. } = *setup;
    // ZeRO 1+ shards the optimizer states over the data-parallel ranks.
    let shard = if setup.zero_stage >= 1 {
        dp as f64
    } else {
        1.0
    };
    let states = |params| {
        model_state_bytes(
            params,
            setup.precision,
            setup.optimizer,
            setup.zero_stage,
            dp,
        )
    };
    let mut all = states(params_per_gpu)?;
    if let Some(r) = setup.lora_rank {
        // Frozen weights need no gradient, master or moments; the adapters need all
        // three, and weights of their own.
        let adapters = layers_per_stage as f64 * layer_lora_params(cfg, tp, r);
        let trained = states(adapters)?;
        all.weights += trained.weights;
        all.gradients = trained.gradients;
        all.master_weights = trained.master_weights;
        all.optimizer_states = trained.optimizer_states;
        return Ok((all, adapters));
    }
    match setup.optimizer {
        Optimizer::Adam8bit => {
            // The small parameters at Adam's 8 bytes instead of 8-bit's.
            let (layer, head) = small_param_elems(cfg, tp);
            let small = layers_per_stage as f64 * layer + if pp == 1 { head } else { 0.0 };
            let extra =
                Optimizer::Adam.state_bytes_per_param() - setup.optimizer.state_bytes_per_param();
            all.optimizer_states += small * extra / shard;
        }
        Optimizer::GaLore { rank } => {
            // The layers' matrices at GaLore's bytes instead of Adam's 8 per parameter.
            let (adam, galore) = layer_galore_state_bytes(cfg, tp, rank);
            all.optimizer_states -= layers_per_stage as f64 * (adam - galore) / shard;
        }
        _ => {}
    }
    Ok((all, params_per_gpu))
}

/// The sizes `estimate_memory` needs to divide: degrees and batches of at least one,
/// layers over the pipeline's stages (and chunks), heads and FFN width over `tp`.
fn check_setup(cfg: &TransformerConfig, setup: &TrainingSetup) -> Result<()> {
    cfg.validate()?;
    let TrainingSetup { dp, tp, pp, .. } = *setup;
    at_least_one("data parallel degree", dp)?;
    at_least_one("gradient accumulation steps", setup.grad_accum)?;
    at_least_one("micro-batch size", setup.micro_batch)?;
    if let Some(rank) = setup.lora_rank {
        at_least_one("LoRA rank", rank)?;
    }
    divides("layers", cfg.layers, "pipeline parallel degree", pp)?;
    divides("attention heads", cfg.heads, "tensor parallel degree", tp)?;
    divides(
        "ffn hidden size",
        cfg.ffn_hidden,
        "tensor parallel degree",
        tp,
    )?;
    if let PipelineSchedule::Interleaved { chunks } = setup.schedule {
        at_least_one("interleaved chunks", chunks)?;
        let stages = checked_product(
            "pipeline stages × chunks",
            &[("pipeline parallel degree", pp), ("chunks", chunks)],
        )?;
        divides("layers", cfg.layers, "pipeline stages × chunks", stages)?;
    }
    Ok(())
}

/// Micro-batches whose activations the first stage holds at its peak: 1 without a
/// pipeline, `m` under GPipe, `min(p, m)` under 1F1B, and for the interleaved schedule
/// `min(p, m)·(1 + (p − 1)/(p·v))` (Narayanan et al. 2021, §2.2).
fn microbatches_in_flight(setup: &TrainingSetup) -> f64 {
    let (p, m) = (setup.pp as f64, setup.grad_accum as f64);
    if setup.pp == 1 {
        return 1.0;
    }
    match setup.schedule {
        PipelineSchedule::GPipe => m,
        PipelineSchedule::OneFOneB => p.min(m),
        PipelineSchedule::Interleaved { chunks } => {
            p.min(m) * (1.0 + (p - 1.0) / (p * chunks as f64))
        }
    }
}

/// Activations outside the blocks, bytes (Korthikanti et al. 2022, Section 4.3): the
/// embedding's dropout mask, sbh bytes per in-flight micro-batch, split by t under
/// sequence parallelism; and on the single stage when p = 1 the output's: final
/// LayerNorm input 2sbh and projection input 2sbh at 16 bits (twice that in fp32; split
/// by t under SP), fp32 logits 4sbV/t (always vocabulary-parallel).
fn other_activation_bytes(cfg: &TransformerConfig, setup: &TrainingSetup, in_flight: f64) -> f64 {
    let (s, b, h, v, t) = (
        cfg.seq_len as f64,
        setup.micro_batch as f64,
        cfg.hidden as f64,
        cfg.vocab as f64,
        setup.tp as f64,
    );
    let sp_div = if setup.sequence_parallel { t } else { 1.0 };
    let mut bytes = s * b * h / sp_div * in_flight;
    if setup.pp == 1 {
        let e = setup.precision.activation_bytes();
        bytes += 2.0 * e * s * b * h / sp_div + 4.0 * s * b * v / t;
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPT-2 small has 124,439,808 parameters (Hugging Face `gpt2`, tied LM head).
    #[test]
    fn gpt2_param_count() {
        let c = TransformerConfig::preset("gpt2").unwrap();
        assert_eq!(c.params(), 124_439_808.0);
        assert_eq!(
            c.params() - 2.0 * 768.0,
            megatron_params(12, 768, 1024, 50257)
        );
    }

    /// Seed-level fact: mixed-precision Adam needs 16 bytes per parameter (2 + 2 + 12), so a
    /// 1B-parameter model needs 16 GB of model states (ZeRO, Section 3.1).
    #[test]
    fn sixteen_bytes_per_param() {
        let s = model_state_bytes(1e9, Precision::Mixed, Optimizer::Adam, 0, 1).unwrap();
        assert_eq!(s.total(), 16e9);
        assert_eq!(s.master_weights + s.optimizer_states, 12e9); // K = 12
        let f = model_state_bytes(1e9, Precision::Fp32, Optimizer::Adam, 0, 1).unwrap();
        assert_eq!(f.total(), 16e9);
        let sgd = model_state_bytes(1e9, Precision::Fp32, Optimizer::SgdMomentum, 0, 1).unwrap();
        assert_eq!(sgd.total(), 12e9);
    }

    #[test]
    fn offload_moves_the_masters_and_moments_to_the_host() {
        let gpt2 = TransformerConfig::gpt(12, 768, 12, 1024, 50257);
        let base = estimate_memory(&gpt2, &TrainingSetup::default()).unwrap();
        let off = estimate_memory(
            &gpt2,
            &TrainingSetup {
                offload: true,
                ..TrainingSetup::default()
            },
        )
        .unwrap();
        // 12 of mixed-precision Adam's 16 bytes per parameter leave the GPU.
        assert_eq!(off.offloaded, 12.0 * base.params_per_gpu);
        assert_eq!(off.total(), base.total() - off.offloaded);
        assert_eq!(
            off.states.weights + off.states.gradients,
            4.0 * base.params_per_gpu
        );
    }

    #[test]
    fn eight_bit_adam_keeps_small_parameters_in_f32() {
        // GPT-2 small: each layer's biases and LayerNorms (3h + h + 4h + h + 4h) and the
        // final LayerNorm (2h) are under 4096 elements; every matrix is above.
        let gpt2 = TransformerConfig::gpt(12, 768, 12, 1024, 50257);
        let (layer, head) = small_param_elems(&gpt2, 1);
        assert_eq!((layer, head), (13.0 * 768.0, 2.0 * 768.0));
        let m = estimate_memory(
            &gpt2,
            &TrainingSetup {
                optimizer: Optimizer::Adam8bit,
                ..TrainingSetup::default()
            },
        )
        .unwrap();
        let small = 12.0 * layer + head;
        let k = 2.0 + 8.0 / 2048.0;
        let want = k * (m.params_per_gpu - small) + 8.0 * small;
        assert!(
            (m.states.optimizer_states - want).abs() < 1e-3,
            "{}",
            m.states.optimizer_states
        );
        // Under tensor parallelism the QKV and MLP biases split; a wide model's are large.
        let wide = TransformerConfig::gpt(2, 4096, 32, 1024, 50257);
        assert_eq!(small_param_elems(&wide, 1).0, 0.0);
        assert_eq!(
            small_param_elems(&wide, 8).0,
            (3 * 4096 / 8 + 4 * 4096 / 8) as f64
        );
    }

    #[test]
    fn lora_trains_r_times_in_plus_out_per_matrix() {
        // GPT-2 small at r = 8: 8 · (768+2304 + 768+768 + 768+3072 + 3072+768) per layer.
        let gpt2 = TransformerConfig::gpt(12, 768, 12, 1024, 50257);
        assert_eq!(layer_lora_params(&gpt2, 1, 8), 8.0 * 12288.0);
        let fp32 = |lora_rank| TrainingSetup {
            precision: Precision::Fp32,
            lora_rank,
            ..TrainingSetup::default()
        };
        let full = estimate_memory(&gpt2, &fp32(None)).unwrap();
        let lora = estimate_memory(&gpt2, &fp32(Some(8))).unwrap();
        let trained = 12.0 * 8.0 * 12288.0;
        assert_eq!(lora.trained_params, trained);
        assert_eq!(full.trained_params, full.params_per_gpu);
        // Frozen weights stay; gradients and moments are the adapters' alone.
        assert_eq!(lora.states.weights, full.states.weights + 4.0 * trained);
        assert_eq!(lora.states.gradients, 4.0 * trained);
        assert_eq!(lora.states.optimizer_states, 8.0 * trained);
        assert!(estimate_memory(&gpt2, &fp32(Some(0))).is_err());
    }

    #[test]
    fn galore_prices_each_layer_matrix_at_its_rank() {
        // GPT-2 small at r = 128: [768, 2304], [768, 768], [768, 3072], [3072, 768].
        let gpt2 = TransformerConfig::gpt(12, 768, 12, 1024, 50257);
        let (adam, galore) = layer_galore_state_bytes(&gpt2, 1, 128);
        assert_eq!(adam, 8.0 * 12.0 * 768.0 * 768.0);
        let want =
            4.0 * 128.0 * ((768.0 + 2.0 * 2304.0) + 3.0 * 768.0 + 2.0 * (768.0 + 2.0 * 3072.0));
        assert_eq!(galore, want);
        let setup = |optimizer| TrainingSetup {
            optimizer,
            ..TrainingSetup::default()
        };
        let a = estimate_memory(&gpt2, &setup(Optimizer::Adam))
            .unwrap()
            .states;
        let g = estimate_memory(&gpt2, &setup(Optimizer::GaLore { rank: 128 }))
            .unwrap()
            .states;
        assert_eq!(
            a.optimizer_states - g.optimizer_states,
            12.0 * (adam - galore)
        );
        assert_eq!(
            Optimizer::parse("galore:64:200").unwrap(),
            Optimizer::GaLore { rank: 64 }
        );
        assert!(Optimizer::parse("galore:0").is_err());
    }

    #[test]
    fn activation_formulas_agree_with_each_other() {
        let c = TransformerConfig::preset("gpt3-175b").unwrap();
        let none =
            activation_bytes_per_layer(&c, 1, 1, false, Recompute::None, Precision::Mixed).unwrap();
        let sbh = 2048.0 * 12288.0;
        // 5as/h = 5 × 96 × 2048 / 12288 = 80.
        assert_eq!(none, sbh * (34.0 + 80.0));
        // At t = 1, SP changes nothing.
        assert_eq!(
            none,
            activation_bytes_per_layer(&c, 1, 1, true, Recompute::None, Precision::Mixed).unwrap()
        );
        let tp8 =
            activation_bytes_per_layer(&c, 1, 8, false, Recompute::None, Precision::Mixed).unwrap();
        assert_eq!(tp8, sbh * (10.0 + 24.0 / 8.0 + 80.0 / 8.0));
        let tp8sp =
            activation_bytes_per_layer(&c, 1, 8, true, Recompute::None, Precision::Mixed).unwrap();
        assert_eq!(tp8sp, none / 8.0);
        let sel =
            activation_bytes_per_layer(&c, 1, 8, true, Recompute::Selective, Precision::Mixed)
                .unwrap();
        assert_eq!(sel, 34.0 * sbh / 8.0);
        assert_eq!(
            activation_bytes_per_layer(&c, 1, 8, true, Recompute::Full, Precision::Mixed).unwrap(),
            2.0 * sbh
        );
    }

    /// fp32 activations: every tensor term doubles, the three 1-byte dropout masks stay.
    #[test]
    fn fp32_activations_are_four_bytes_and_masks_one() {
        let c = TransformerConfig::preset("gpt3-175b").unwrap();
        let sbh = 2048.0 * 12288.0;
        let fp32 = |t, sp, r| activation_bytes_per_layer(&c, 1, t, sp, r, Precision::Fp32);
        // 9as/h = 9 × 96 × 2048 / 12288 = 144.
        assert_eq!(
            fp32(1, false, Recompute::None).unwrap(),
            sbh * (66.0 + 144.0)
        );
        assert_eq!(
            fp32(8, false, Recompute::None).unwrap(),
            sbh * (18.0 + 48.0 / 8.0 + 144.0 / 8.0)
        );
        assert_eq!(
            fp32(8, true, Recompute::Selective).unwrap(),
            sbh * 66.0 / 8.0
        );
        assert_eq!(fp32(8, true, Recompute::Full).unwrap(), 4.0 * sbh);
        // The whole estimate (before this, fp32 counted 16-bit activations too): each
        // layer's bytes as above, and the output's LayerNorm and projection inputs
        // doubled beside the masks and fp32 logits, which stay.
        let mut setup = TrainingSetup::default();
        let mixed = estimate_memory(&c, &setup).unwrap();
        setup.precision = Precision::Fp32;
        let full = estimate_memory(&c, &setup).unwrap();
        assert_eq!(full.activations_layers, 96.0 * sbh * (66.0 + 144.0));
        assert_eq!(full.activations_other - mixed.activations_other, 4.0 * sbh);
    }

    #[test]
    fn bad_layouts_are_errors() {
        let c = TransformerConfig::preset("gpt2").unwrap(); // 12 layers, 12 heads
        let base = TrainingSetup::default();
        let err = |s: TrainingSetup| estimate_memory(&c, &s).unwrap_err();
        assert!(matches!(
            err(TrainingSetup {
                pp: 5,
                ..base.clone()
            }),
            PerfError::NotDivisible { what: "layers", .. }
        ));
        assert!(matches!(
            err(TrainingSetup {
                tp: 5,
                ..base.clone()
            }),
            PerfError::NotDivisible {
                what: "attention heads",
                ..
            }
        ));
        assert!(matches!(
            err(TrainingSetup {
                dp: 0,
                ..base.clone()
            }),
            PerfError::NonPositive { .. }
        ));
        assert!(matches!(
            err(TrainingSetup {
                tp: 0,
                ..base.clone()
            }),
            PerfError::NonPositive { .. }
        ));
        assert!(matches!(
            err(TrainingSetup {
                micro_batch: 0,
                ..base.clone()
            }),
            PerfError::NonPositive { .. }
        ));
        assert!(matches!(
            err(TrainingSetup {
                zero_stage: 4,
                ..base.clone()
            }),
            PerfError::OutOfRange { .. }
        ));
        assert!(
            err(TrainingSetup {
                pp: 2,
                schedule: PipelineSchedule::Interleaved { chunks: 4 },
                ..base.clone()
            })
            .to_string()
            .contains("12 is not divisible by pipeline stages × chunks = 8")
        );
        assert!(model_state_bytes(-1.0, Precision::Mixed, Optimizer::Adam, 0, 1).is_err());
    }

    #[test]
    fn pipeline_first_stage_holds_l_layers_under_1f1b() {
        let c = TransformerConfig::preset("megatron-145b").unwrap(); // 80 layers
        let mk = |pp, schedule| TrainingSetup {
            tp: 8,
            pp,
            grad_accum: 64,
            schedule,
            sequence_parallel: true,
            ..Default::default()
        };
        let one = estimate_memory(&c, &mk(1, PipelineSchedule::OneFOneB)).unwrap();
        let eight = estimate_memory(&c, &mk(8, PipelineSchedule::OneFOneB)).unwrap();
        assert_eq!(one.activations_layers, eight.activations_layers);
        let inter =
            estimate_memory(&c, &mk(8, PipelineSchedule::Interleaved { chunks: 2 })).unwrap();
        assert!(
            (inter.activations_layers / eight.activations_layers - (1.0 + 7.0 / 16.0)).abs()
                < 1e-12
        );
        let gpipe = estimate_memory(&c, &mk(8, PipelineSchedule::GPipe)).unwrap();
        assert_eq!(gpipe.activations_layers, eight.activations_layers * 8.0);
        assert_eq!(eight.gpus, 64);
        assert_eq!(eight.global_batch, 64);
    }
}
