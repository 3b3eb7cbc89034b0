//! The roofline explorer: an op on a GPU's roofline, its regime and predicted time from
//! `brrr_perf::report::roofline_analysis`, the trail it leaves as one size changes, and,
//! for GEMMs, what tile and wave quantization (`brrr_perf::roofline::gemm_quantization`)
//! do to the time around the chosen size.

use brrr_perf::report::{RooflineAnalysis, roofline_analysis};
use brrr_perf::roofline::{
    AttentionShape, GemmQuantization, OpCost, Prediction, gemm_quantization,
    is_tensor_core_aligned, round_up, tensor_core_alignment,
};
use brrr_perf::specs::{GpuSpec, gpus};
use brrr_perf::{DType, PerfError, Result};

/// The ops the explorer offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `C[M,N] = A[M,K] · B[K,N]`.
    Gemm,
    /// A chain of unary element-wise ops, fused or not.
    Chain,
    /// Row softmax.
    Softmax,
    /// LayerNorm over rows.
    LayerNorm,
    /// Attention forward, flash (fused) or not.
    Attention,
}

impl OpKind {
    /// Every kind, in menu order.
    pub const ALL: [OpKind; 5] = [
        OpKind::Gemm,
        OpKind::Chain,
        OpKind::Softmax,
        OpKind::LayerNorm,
        OpKind::Attention,
    ];

    /// Menu label.
    pub fn label(self) -> &'static str {
        match self {
            OpKind::Gemm => "GEMM",
            OpKind::Chain => "element-wise chain",
            OpKind::Softmax => "softmax",
            OpKind::LayerNorm => "LayerNorm",
            OpKind::Attention => "attention",
        }
    }

    /// Stable key (for `<select>` values and tests).
    pub fn key(self) -> &'static str {
        match self {
            OpKind::Gemm => "gemm",
            OpKind::Chain => "chain",
            OpKind::Softmax => "softmax",
            OpKind::LayerNorm => "layernorm",
            OpKind::Attention => "attention",
        }
    }

    /// The kind whose [`OpKind::key`] is `key`.
    pub fn from_key(key: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.key() == key)
    }

    /// The sizes this kind has, in the order the page shows their sliders.
    pub fn dims(self) -> &'static [Dim] {
        match self {
            OpKind::Gemm => &[Dim::M, Dim::N, Dim::K],
            OpKind::Chain => &[Dim::Elements, Dim::ChainOps],
            OpKind::Softmax | OpKind::LayerNorm => &[Dim::Rows, Dim::Cols],
            OpKind::Attention => &[Dim::Batch, Dim::Heads, Dim::Seq, Dim::HeadDim],
        }
    }
}

/// One size of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// GEMM rows of A and C.
    M,
    /// GEMM columns of B and C.
    N,
    /// GEMM reduction size.
    K,
    /// Elements of an element-wise chain.
    Elements,
    /// Ops in the chain.
    ChainOps,
    /// Rows (softmax, LayerNorm).
    Rows,
    /// Columns (softmax, LayerNorm).
    Cols,
    /// Attention batch.
    Batch,
    /// Attention heads.
    Heads,
    /// Sequence length.
    Seq,
    /// Per-head width.
    HeadDim,
}

impl Dim {
    /// Slider label.
    pub fn label(self) -> &'static str {
        match self {
            Dim::M => "M (rows)",
            Dim::N => "N (columns)",
            Dim::K => "K (reduction)",
            Dim::Elements => "elements",
            Dim::ChainOps => "ops in the chain",
            Dim::Rows => "rows",
            Dim::Cols => "columns",
            Dim::Batch => "batch",
            Dim::Heads => "heads",
            Dim::Seq => "sequence length",
            Dim::HeadDim => "head dim",
        }
    }

    /// Stable key (for test ids).
    pub fn key(self) -> &'static str {
        match self {
            Dim::M => "m",
            Dim::N => "n",
            Dim::K => "k",
            Dim::Elements => "elements",
            Dim::ChainOps => "ops",
            Dim::Rows => "rows",
            Dim::Cols => "cols",
            Dim::Batch => "batch",
            Dim::Heads => "heads",
            Dim::Seq => "seq",
            Dim::HeadDim => "head_dim",
        }
    }

    /// Slider range (inclusive); the number box beside it takes any value in it.
    pub fn range(self) -> (u64, u64) {
        match self {
            Dim::M | Dim::N | Dim::K => (1, 1 << 17),
            Dim::Elements => (1, 1 << 32),
            Dim::ChainOps => (1, 64),
            Dim::Rows => (1, 1 << 20),
            Dim::Cols => (1, 1 << 18),
            Dim::Batch => (1, 512),
            Dim::Heads => (1, 256),
            Dim::Seq => (1, 1 << 18),
            Dim::HeadDim => (1, 512),
        }
    }
}

/// Everything the explorer's controls set.
#[derive(Clone, Debug, PartialEq)]
pub struct RooflineInput {
    /// `brrr_perf::specs` id of the GPU.
    pub gpu: String,
    /// Compute dtype.
    pub dtype: DType,
    /// Which op.
    pub kind: OpKind,
    /// Sizes, read through [`RooflineInput::get`].
    pub sizes: Vec<(Dim, u64)>,
    /// Element-wise chain fused into one kernel; attention as FlashAttention.
    pub fused: bool,
    /// Causal attention.
    pub causal: bool,
    /// The size the trail and the quantization chart vary.
    pub vary: Dim,
}

impl Default for RooflineInput {
    /// GPT-2's output projection on an A100: 8 sequences of 1024 tokens (M = 8192),
    /// width 768 (K), vocabulary 50257 (N), in bf16.
    fn default() -> Self {
        RooflineInput {
            gpu: "a100-sxm-80gb".into(),
            dtype: DType::Bf16,
            kind: OpKind::Gemm,
            sizes: vec![
                (Dim::M, 8192),
                (Dim::N, 50257),
                (Dim::K, 768),
                (Dim::Elements, 1 << 24),
                (Dim::ChainOps, 4),
                (Dim::Rows, 8192),
                (Dim::Cols, 50304),
                (Dim::Batch, 8),
                (Dim::Heads, 12),
                (Dim::Seq, 1024),
                (Dim::HeadDim, 64),
            ],
            fused: false,
            causal: true,
            vary: Dim::K,
        }
    }
}

impl RooflineInput {
    /// The value of size `d` (1 if unset).
    pub fn get(&self, d: Dim) -> u64 {
        self.sizes
            .iter()
            .find(|(k, _)| *k == d)
            .map_or(1, |&(_, v)| v)
    }

    /// Sets size `d`, clamped into [`Dim::range`].
    pub fn set(&mut self, d: Dim, v: u64) {
        let (lo, hi) = d.range();
        let v = v.clamp(lo, hi);
        match self.sizes.iter_mut().find(|(k, _)| *k == d) {
            Some(slot) => slot.1 = v,
            None => self.sizes.push((d, v)),
        }
    }

    /// Switches the op, keeping `vary` one of its sizes.
    pub fn set_kind(&mut self, kind: OpKind) {
        self.kind = kind;
        if !kind.dims().contains(&self.vary) {
            self.vary = match kind {
                OpKind::Gemm => Dim::N,
                OpKind::Chain => Dim::Elements,
                OpKind::Softmax | OpKind::LayerNorm => Dim::Cols,
                OpKind::Attention => Dim::Seq,
            };
        }
    }

    /// The op with the current sizes, from `brrr_perf::roofline::OpCost`.
    pub fn op(&self) -> Result<OpCost> {
        self.op_with(self.vary, self.get(self.vary))
    }

    /// The op with size `d` replaced by `v`.
    pub fn op_with(&self, d: Dim, v: u64) -> Result<OpCost> {
        let g = |x: Dim| if x == d { v } else { self.get(x) };
        let dt = self.dtype;
        match self.kind {
            OpKind::Gemm => OpCost::gemm(g(Dim::M), g(Dim::N), g(Dim::K), dt),
            OpKind::Chain => {
                OpCost::elementwise_chain(g(Dim::Elements), g(Dim::ChainOps), dt, self.fused)
            }
            OpKind::Softmax => OpCost::softmax(g(Dim::Rows), g(Dim::Cols), dt),
            OpKind::LayerNorm => OpCost::layernorm(g(Dim::Rows), g(Dim::Cols), dt),
            OpKind::Attention => OpCost::attention(
                AttentionShape {
                    batch: g(Dim::Batch),
                    heads: g(Dim::Heads),
                    seq: g(Dim::Seq),
                    head_dim: g(Dim::HeadDim),
                    causal: self.causal,
                    fused: self.fused,
                },
                dt,
            ),
        }
    }
}

/// The GPU table of `brrr_perf::specs` (the picker's options).
pub fn gpu_table() -> Vec<GpuSpec> {
    gpus()
}

/// The GPU with `id` in [`gpu_table`].
pub fn find_gpu(id: &str) -> Result<GpuSpec> {
    gpus()
        .into_iter()
        .find(|g| g.id == id)
        .ok_or_else(|| PerfError::Invalid(format!("no GPU '{id}' in the spec table")))
}

/// Dtypes `gpu` has a matmul or vector peak for (the dtype menu).
pub fn dtypes_for(gpu: &GpuSpec) -> Vec<DType> {
    DType::ALL
        .into_iter()
        .filter(|&d| gpu.matmul_peak(d).is_ok())
        .collect()
}

/// One point of a trail: the op with one size changed.
#[derive(Clone, Debug, PartialEq)]
pub struct TrailPoint {
    /// The size's value.
    pub value: u64,
    /// The roofline's prediction for it.
    pub prediction: Prediction,
}

/// Tile and wave quantization of a GEMM at one size.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantPoint {
    /// The varied size's value.
    pub value: u64,
    /// `brrr_perf`'s quantization (128×128 tiles, one per SM).
    pub quant: GemmQuantization,
    /// The roofline time with only `efficiency` of the tensor-core time useful:
    /// `max(compute / efficiency, memory)`.
    pub time_s: f64,
    /// Useful FLOP/s at that time: `flops / time_s`.
    pub useful_flops: f64,
}

/// Alignment of one GEMM size for tensor cores.
#[derive(Clone, Debug, PartialEq)]
pub struct Alignment {
    /// `m`, `n` or `k`.
    pub name: &'static str,
    /// The size.
    pub value: u64,
    /// A multiple of 16 bytes of the dtype.
    pub aligned: bool,
    /// The size rounded up to a multiple of 64, as nanoGPT pads its vocabulary.
    pub padded: u64,
}

/// What the explorer shows.
#[derive(Clone, Debug)]
pub struct RooflineView {
    /// The GPU.
    pub gpu: GpuSpec,
    /// Rooflines of the dtype, the op's prediction and (for GEMMs) its quantization.
    pub analysis: RooflineAnalysis,
    /// The op's prediction (`analysis.predictions[0]`).
    pub prediction: Prediction,
    /// The op as the varied size doubles and halves (×2^-6 … ×2^6, within its range).
    pub trail: Vec<TrailPoint>,
    /// GEMMs: quantization at the chosen size.
    pub quant: Option<QuantPoint>,
    /// GEMMs: quantization for every value within ±3 tiles of the chosen M or N.
    pub quant_sweep: Vec<QuantPoint>,
    /// GEMMs: alignment of M, N, K.
    pub alignment: Vec<Alignment>,
    /// Elements per 16 bytes in the dtype.
    pub align_multiple: u64,
}

/// Tile edge and tiles per SM of the quantization model (as `brrr_perf::report`).
pub const TILE: u64 = 128;

/// Everything the explorer shows for `input`.
pub fn explore(input: &RooflineInput) -> Result<RooflineView> {
    let gpu = find_gpu(&input.gpu)?;
    let op = input.op()?;
    let analysis = roofline_analysis(&gpu, input.dtype, None, std::slice::from_ref(&op), &[])?;
    let prediction = analysis
        .predictions
        .first()
        .cloned()
        .ok_or_else(|| PerfError::Invalid("no prediction for the op".into()))?;
    let trail = trail(input, &gpu)?;
    let (mut quant, mut quant_sweep, mut alignment) = (None, Vec::new(), Vec::new());
    if input.kind == OpKind::Gemm {
        let d = quant_dim(input.vary);
        quant = Some(quant_point(input, &gpu, d, input.get(d))?);
        let v = input.get(d);
        let lo = v.saturating_sub(3 * TILE).max(1);
        for x in lo..=v + 3 * TILE {
            quant_sweep.push(quant_point(input, &gpu, d, x)?);
        }
        for (name, dim) in [("m", Dim::M), ("n", Dim::N), ("k", Dim::K)] {
            let value = input.get(dim);
            alignment.push(Alignment {
                name,
                value,
                aligned: is_tensor_core_aligned(value, input.dtype),
                padded: round_up(value, 64)?,
            });
        }
    }
    Ok(RooflineView {
        gpu,
        analysis,
        prediction,
        trail,
        quant,
        quant_sweep,
        alignment,
        align_multiple: tensor_core_alignment(input.dtype),
    })
}

/// The size the quantization chart varies: M when the reader varies M, else N (K does not
/// change the output tiles).
pub fn quant_dim(vary: Dim) -> Dim {
    if vary == Dim::M { Dim::M } else { Dim::N }
}

fn trail(input: &RooflineInput, gpu: &GpuSpec) -> Result<Vec<TrailPoint>> {
    let d = input.vary;
    let (lo, hi) = d.range();
    let v = input.get(d) as f64;
    let mut out: Vec<TrailPoint> = Vec::new();
    for j in -6..=6 {
        let x = (v * 2f64.powi(j)).round().clamp(lo as f64, hi as f64) as u64;
        if out.last().is_some_and(|p| p.value == x) {
            continue;
        }
        let op = input.op_with(d, x)?;
        let r = brrr_perf::roofline::Roofline::for_op(gpu, &op, input.dtype)?;
        out.push(TrailPoint {
            value: x,
            prediction: r.predict(&op),
        });
    }
    Ok(out)
}

fn quant_point(input: &RooflineInput, gpu: &GpuSpec, d: Dim, v: u64) -> Result<QuantPoint> {
    let op = input.op_with(d, v)?;
    let r = brrr_perf::roofline::Roofline::for_op(gpu, &op, input.dtype)?;
    let p = r.predict(&op);
    let (m, n) = match d {
        Dim::M => (v, input.get(Dim::N)),
        _ => (input.get(Dim::M), v),
    };
    let quant = gemm_quantization(m, n, TILE, TILE, u64::from(gpu.sm_count), 1)?;
    let time_s = (p.compute_s / quant.efficiency).max(p.memory_s);
    Ok(QuantPoint {
        value: v,
        useful_flops: op.flops / time_s,
        time_s,
        quant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use brrr_perf::roofline::Regime;

    #[test]
    fn default_is_gpt2_head_on_a100_and_compute_bound() {
        let v = explore(&RooflineInput::default()).unwrap();
        let p = &v.prediction;
        assert_eq!(p.op.flops, 2.0 * 8192.0 * 50257.0 * 768.0);
        assert_eq!(p.regime, Regime::Compute);
        // 312 TFLOP/s bf16 tensor cores (A100 datasheet).
        assert!((p.compute_s - p.op.flops / 312e12).abs() < 1e-15);
        let q = v.quant.unwrap();
        assert_eq!(q.quant.tiles, 64 * 393);
        assert!(!v.alignment[1].aligned && v.alignment[1].padded == 50304);
        assert_eq!(v.quant_sweep.len(), 2 * 3 * 128 + 1);
    }

    #[test]
    fn padding_the_vocabulary_raises_useful_throughput() {
        let mut input = RooflineInput::default();
        let before = explore(&input).unwrap().quant.unwrap();
        input.set(Dim::N, 50304);
        let after = explore(&input).unwrap().quant.unwrap();
        assert_eq!(after.quant.tile_efficiency, 1.0);
        assert!(after.useful_flops > before.useful_flops);
    }

    #[test]
    fn chain_fusion_moves_the_point_right() {
        let mut input = RooflineInput::default();
        input.set_kind(OpKind::Chain);
        assert_eq!(input.vary, Dim::Elements);
        let unfused = explore(&input).unwrap().prediction;
        input.fused = true;
        let fused = explore(&input).unwrap().prediction;
        assert_eq!(unfused.regime, Regime::Memory);
        assert!((fused.intensity / unfused.intensity - 4.0).abs() < 1e-12);
    }

    #[test]
    fn trail_doubles_and_stays_in_range() {
        let mut input = RooflineInput {
            vary: Dim::N,
            ..RooflineInput::default()
        };
        input.set(Dim::N, 1);
        let v = explore(&input).unwrap();
        assert_eq!(v.trail[0].value, 1);
        assert!(v.trail.windows(2).all(|w| w[0].value < w[1].value));
        assert_eq!(v.trail.last().unwrap().value, 64);
    }

    #[test]
    fn unknown_gpu_and_dtype_are_errors() {
        let input = RooflineInput {
            gpu: "nope".into(),
            ..RooflineInput::default()
        };
        assert!(explore(&input).is_err());
        let v100 = find_gpu("v100-sxm2-32gb").unwrap();
        assert!(!dtypes_for(&v100).contains(&DType::Bf16));
        let input = RooflineInput {
            gpu: "v100-sxm2-32gb".into(),
            ..RooflineInput::default()
        };
        assert!(explore(&input).is_err(), "V100 has no bf16");
    }
}
