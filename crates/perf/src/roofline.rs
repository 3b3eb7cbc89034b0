//! Rooflines and regimes: arithmetic intensity of ops, predicted time, and a classifier for
//! measured times; tile and wave quantization for GEMMs.
//!
//! The roofline model (Williams, Waterman and Patterson, "Roofline: an insightful visual
//! performance model for multicore architectures", CACM 2009): an op that does `F` FLOPs and
//! must move at least `B` bytes between DRAM and the chip takes at least
//!
//! ```text
//! t = max(F / peak_flops, B / bandwidth)
//! ```
//!
//! Its arithmetic intensity `I = F / B` (FLOP/byte) decides which term wins: below the ridge
//! point `peak_flops / bandwidth` it is memory-bound, above it compute-bound. A measured time
//! far above both terms is the third regime, overhead (launches, Python, synchronisation):
//! H. He, "Making Deep Learning Go Brrrr From First Principles" (2022).
//!
//! Byte counts here are *minimum* traffic: each input read once, each output written once.
//! Real kernels move more (re-reads when tiles do not fit on chip), so measured intensity is
//! lower; FLOP counts count a fused multiply-add as 2.

use crate::error::{Result, at_least_one, checked_product, positive};
use crate::specs::{DType, GpuSpec, Unit};
use serde::Serialize;

/// FLOPs and minimum bytes of one op.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpCost {
    /// Human-readable description, e.g. `gemm 4096x4096x4096 bf16`.
    pub name: String,
    /// Floating-point operations (an FMA counts 2).
    pub flops: f64,
    /// Minimum bytes moved to and from DRAM.
    pub bytes: f64,
    /// Whether the op is matmul-shaped (can run on tensor cores).
    pub matmul: bool,
    /// `[batch, m, n, k]` for GEMMs, for tile and alignment analysis.
    pub gemm_shape: Option<[u64; 4]>,
}

/// Shape of one attention call: `batch × heads` independent `seq × seq` problems of width
/// `head_dim`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AttentionShape {
    /// Batch size.
    pub batch: u64,
    /// Number of heads.
    pub heads: u64,
    /// Sequence length (queries = keys).
    pub seq: u64,
    /// Per-head width.
    pub head_dim: u64,
    /// Causal mask: only the lower triangle is computed (half the FLOPs) by a kernel that
    /// skips masked blocks, as FlashAttention does.
    pub causal: bool,
    /// Fused (FlashAttention-style): the `seq × seq` scores never touch DRAM. Unfused writes
    /// the scores, reads them in softmax, writes the probabilities, reads them for `P·V`.
    pub fused: bool,
}

impl OpCost {
    /// An op from explicit counts. `flops ≥ 0`, `bytes > 0`.
    pub fn new(name: impl Into<String>, flops: f64, bytes: f64, matmul: bool) -> Result<Self> {
        if !(flops.is_finite() && flops >= 0.0) {
            return Err(crate::PerfError::OutOfRange {
                name: "flops",
                value: flops,
                expected: "finite and >= 0",
            });
        }
        positive("bytes", bytes)?;
        Ok(Self {
            name: name.into(),
            flops,
            bytes,
            matmul,
            gemm_shape: None,
        })
    }

    /// Arithmetic intensity `flops / bytes` in FLOP/byte.
    pub fn intensity(&self) -> f64 {
        self.flops / self.bytes
    }

    /// `C[m,n] = A[m,k] · B[k,n]`: `2mnk` FLOPs, `(mk + kn + mn) × bytes(dtype)` bytes (read A
    /// and B once, write C once). For a square `n³` GEMM the intensity is `2n³ / (3n² × size)
    /// = n / (1.5 × size)`: it grows with `n`, which is why big GEMMs are compute-bound.
    pub fn gemm(m: u64, n: u64, k: u64, dtype: DType) -> Result<Self> {
        Self::batched_gemm(1, m, n, k, dtype)
    }

    /// `batch` independent GEMMs of shape `m×k · k×n`: `batch ×` the counts of [`Self::gemm`].
    pub fn batched_gemm(batch: u64, m: u64, n: u64, k: u64, dtype: DType) -> Result<Self> {
        for (name, v) in [("batch", batch), ("m", m), ("n", n), ("k", k)] {
            at_least_one(name, v)?;
        }
        let shape = [batch, m, n, k];
        let (b, m, n, k) = (batch as f64, m as f64, n as f64, k as f64);
        let name = if batch == 1 {
            format!("gemm {m}x{n}x{k} {dtype}")
        } else {
            format!("gemm {batch}x({m}x{n}x{k}) {dtype}")
        };
        let mut op = Self::new(
            name,
            2.0 * b * m * n * k,
            b * (m * k + k * n + m * n) * dtype.bytes(),
            true,
        )?;
        op.gemm_shape = Some(shape);
        Ok(op)
    }

    /// One element-wise op over `n` elements with `inputs` input tensors and `outputs` outputs,
    /// doing `flops_per_element` FLOPs per element: `n × flops_per_element` FLOPs and
    /// `n × (inputs + outputs) × bytes(dtype)` bytes. `x + y` in bf16 has intensity
    /// `1 / 6` FLOP/byte: hopelessly memory-bound on every GPU.
    pub fn elementwise(
        n: u64,
        flops_per_element: f64,
        inputs: u64,
        outputs: u64,
        dtype: DType,
    ) -> Result<Self> {
        at_least_one("n", n)?;
        // Summed in f64: two counts near u64::MAX must not overflow.
        let tensors = inputs as f64 + outputs as f64;
        crate::error::positive("inputs + outputs", tensors)?;
        let n = n as f64;
        Self::new(
            format!("elementwise n={n} {flops_per_element} flop/elem {dtype}"),
            n * flops_per_element,
            n * tensors * dtype.bytes(),
            false,
        )
    }

    /// A chain of `ops` unary element-wise ops (1 FLOP per element each, e.g. `x.cos().cos()`)
    /// over `n` elements. Unfused, every op reads and writes the whole tensor: `2 × ops × n`
    /// element transfers. Fused into one kernel, the chain reads once and writes once: `2n`.
    /// Same FLOPs, `ops`× fewer bytes: the point of operator fusion (He 2022, "operator fusion").
    pub fn elementwise_chain(n: u64, ops: u64, dtype: DType, fused: bool) -> Result<Self> {
        at_least_one("n", n)?;
        at_least_one("ops", ops)?;
        let (nf, of) = (n as f64, ops as f64);
        let transfers = if fused { 2.0 * nf } else { 2.0 * of * nf };
        let kind = if fused { "fused" } else { "unfused" };
        Self::new(
            format!("{kind} chain of {ops} elementwise ops n={n} {dtype}"),
            nf * of,
            transfers * dtype.bytes(),
            false,
        )
    }

    /// Row softmax over a `rows × cols` matrix: 5 FLOPs per element (max, subtract, exp, sum,
    /// divide; counting `exp` as one FLOP, the usual convention), reads once and writes once:
    /// `2 × rows × cols × bytes` with a single-pass (online) kernel.
    pub fn softmax(rows: u64, cols: u64, dtype: DType) -> Result<Self> {
        at_least_one("rows", rows)?;
        at_least_one("cols", cols)?;
        let e = rows as f64 * cols as f64;
        Self::new(
            format!("softmax {rows}x{cols} {dtype}"),
            5.0 * e,
            2.0 * e * dtype.bytes(),
            false,
        )
    }

    /// LayerNorm over the last dimension of `rows × cols`: about 8 FLOPs per element (mean:
    /// 1, variance: 3, normalise: 2, scale and shift: 2); reads x, writes y, reads γ and β:
    /// `(2 × rows × cols + 2 × cols) × bytes`.
    pub fn layernorm(rows: u64, cols: u64, dtype: DType) -> Result<Self> {
        at_least_one("rows", rows)?;
        at_least_one("cols", cols)?;
        let (r, c) = (rows as f64, cols as f64);
        Self::new(
            format!("layernorm {rows}x{cols} {dtype}"),
            8.0 * r * c,
            (2.0 * r * c + 2.0 * c) * dtype.bytes(),
            false,
        )
    }

    /// Attention forward `softmax(Q Kᵀ / √d) V`: FLOPs `4 × b × h × s² × d` for the two GEMMs
    /// (each `2 s² d` per head) plus `5 × b × h × s²` for the softmax, halved when causal.
    /// Bytes: Q, K, V read and O written (`4 b h s d`); unfused adds the scores and
    /// probabilities written and read back (`4 b h s²`), which is why FlashAttention (Dao et
    /// al. 2022) is fast: same FLOPs, far fewer bytes.
    pub fn attention(shape: AttentionShape, dtype: DType) -> Result<Self> {
        let AttentionShape {
            batch,
            heads,
            seq,
            head_dim,
            causal,
            fused,
        } = shape;
        for (name, v) in [
            ("batch", batch),
            ("heads", heads),
            ("seq", seq),
            ("head_dim", head_dim),
        ] {
            at_least_one(name, v)?;
        }
        let (b, h, s, d) = (batch as f64, heads as f64, seq as f64, head_dim as f64);
        let frac = if causal { 0.5 } else { 1.0 };
        let flops = frac * (4.0 * b * h * s * s * d + 5.0 * b * h * s * s);
        let mut elems = 4.0 * b * h * s * d;
        if !fused {
            elems += frac * 4.0 * b * h * s * s;
        }
        let name = format!(
            "attention b={batch} h={heads} s={seq} d={head_dim}{}{} {dtype}",
            if causal { " causal" } else { "" },
            if fused { " fused" } else { " unfused" }
        );
        Self::new(name, flops, elems * dtype.bytes(), true)
    }
}

/// Parses an op description for the CLI:
///
/// - `gemm:M,N,K` or `gemm:BATCH,M,N,K`
/// - `elementwise:N[,FLOPS_PER_ELEM[,INPUTS[,OUTPUTS]]]` (defaults 1, 2, 1: `x + y`)
/// - `chain:N,OPS[,fused]`
/// - `softmax:ROWS,COLS`, `layernorm:ROWS,COLS`
/// - `attention:B,H,S,D[,causal][,unfused]`
///
/// Numbers accept `_` separators and exponents (`1e8`).
pub fn parse_op(spec: &str, dtype: DType) -> Result<OpCost> {
    let bad = |why: &str| {
        crate::PerfError::Invalid(format!(
            "op '{spec}': {why}; expected e.g. gemm:4096,4096,4096, elementwise:1e8, chain:1e8,4,fused, \
             softmax:8192,50304, layernorm:8192,768, attention:8,12,1024,64,causal"
        ))
    };
    let (kind, rest) = spec.split_once(':').ok_or_else(|| bad("missing ':'"))?;
    let mut nums = Vec::new();
    let mut flags = Vec::new();
    for part in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match parse_count(part) {
            Some(v) => nums.push(v),
            None => flags.push(part.to_ascii_lowercase()),
        }
    }
    let flag = |f: &str| flags.iter().any(|x| x == f);
    if let Some(unknown) = flags
        .iter()
        .find(|f| !["causal", "fused", "unfused", "flash"].contains(&f.as_str()))
    {
        return Err(bad(&format!("unknown flag '{unknown}'")));
    }
    match (kind.trim().to_ascii_lowercase().as_str(), nums.as_slice()) {
        ("gemm" | "matmul", [m, n, k]) => OpCost::gemm(*m, *n, *k, dtype),
        ("gemm" | "matmul", [b, m, n, k]) => OpCost::batched_gemm(*b, *m, *n, *k, dtype),
        ("elementwise" | "ew", [n]) => OpCost::elementwise(*n, 1.0, 2, 1, dtype),
        ("elementwise" | "ew", [n, f]) => OpCost::elementwise(*n, *f as f64, 2, 1, dtype),
        ("elementwise" | "ew", [n, f, i]) => OpCost::elementwise(*n, *f as f64, *i, 1, dtype),
        ("elementwise" | "ew", [n, f, i, o]) => OpCost::elementwise(*n, *f as f64, *i, *o, dtype),
        ("chain", [n, ops]) => OpCost::elementwise_chain(*n, *ops, dtype, flag("fused")),
        ("softmax", [r, c]) => OpCost::softmax(*r, *c, dtype),
        ("layernorm" | "ln", [r, c]) => OpCost::layernorm(*r, *c, dtype),
        ("attention" | "attn", [b, h, s, d]) => OpCost::attention(
            AttentionShape {
                batch: *b,
                heads: *h,
                seq: *s,
                head_dim: *d,
                causal: flag("causal"),
                fused: !flag("unfused"),
            },
            dtype,
        ),
        (k, _) => Err(bad(&format!(
            "unknown op kind '{k}' or wrong number of sizes"
        ))),
    }
}

/// Parses a non-negative integer count, allowing `_` separators and exponent notation.
fn parse_count(s: &str) -> Option<u64> {
    let s = s.replace('_', "");
    if let Ok(v) = s.parse::<u64>() {
        return Some(v);
    }
    let f = s.parse::<f64>().ok()?;
    (f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < 1.8e19).then_some(f as u64)
}

/// Which ceiling limits an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Regime {
    /// Limited by arithmetic throughput.
    Compute,
    /// Limited by DRAM bandwidth.
    Memory,
    /// Neither: most of the time is spent outside both ceilings (launch latency, host code,
    /// synchronisation). Only a *measured* time can show this.
    Overhead,
}

impl std::fmt::Display for Regime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Regime::Compute => "compute-bound",
            Regime::Memory => "memory-bound",
            Regime::Overhead => "overhead-bound",
        })
    }
}

/// One roofline: a compute ceiling and a bandwidth ceiling.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Roofline {
    /// What the ceilings belong to, e.g. `NVIDIA A100 SXM4 80GB bf16 tensor cores`.
    pub label: String,
    /// Compute ceiling in FLOP/s.
    pub peak_flops: f64,
    /// Bandwidth ceiling in bytes/s.
    pub bandwidth: f64,
}

/// The roofline's prediction for one op.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// The op.
    pub op: OpCost,
    /// Arithmetic intensity, FLOP/byte.
    pub intensity: f64,
    /// Ridge point of the roofline, FLOP/byte.
    pub ridge: f64,
    /// `flops / peak_flops`, seconds.
    pub compute_s: f64,
    /// `bytes / bandwidth`, seconds.
    pub memory_s: f64,
    /// `max(compute_s, memory_s)`: the fastest the op can possibly run.
    pub time_s: f64,
    /// `min(peak, intensity × bandwidth)`: the attainable FLOP/s.
    pub attainable_flops: f64,
    /// Compute if `intensity ≥ ridge`, else memory.
    pub regime: Regime,
}

/// A measured time judged against the roofline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Classification {
    /// The roofline's prediction for the same op.
    pub predicted: Prediction,
    /// The measured time, seconds.
    pub measured_s: f64,
    /// `flops / measured_s`.
    pub achieved_flops: f64,
    /// `bytes / measured_s` (minimum bytes, so a lower bound on real traffic).
    pub achieved_bandwidth: f64,
    /// `achieved_flops / peak_flops`: how close to the compute ceiling.
    pub compute_fraction: f64,
    /// `achieved_bandwidth / bandwidth`: how close to the bandwidth ceiling.
    pub memory_fraction: f64,
    /// `measured_s − predicted.time_s`: time neither ceiling explains.
    pub overhead_s: f64,
    /// The regime: the ceiling the op is nearer to if it reaches at least
    /// [`OVERHEAD_THRESHOLD`] of it, otherwise overhead.
    pub regime: Regime,
    /// True if the measurement beats the roofline: the FLOP or byte count is too high, or the
    /// data came from cache (L2 is larger than many "DRAM" working sets).
    pub faster_than_roofline: bool,
}

/// A measured op is overhead-bound when it reaches less than this fraction of both ceilings,
/// i.e. when more than half of its time is unexplained by either (`max(compute_fraction,
/// memory_fraction) = predicted_time / measured_time`).
pub const OVERHEAD_THRESHOLD: f64 = 0.5;

impl Roofline {
    /// A roofline from explicit ceilings (FLOP/s, bytes/s).
    pub fn new(label: impl Into<String>, peak_flops: f64, bandwidth: f64) -> Result<Self> {
        positive("peak_flops", peak_flops)?;
        positive("bandwidth", bandwidth)?;
        Ok(Self {
            label: label.into(),
            peak_flops,
            bandwidth,
        })
    }

    /// The roofline of `gpu` for `dtype` on `unit` (HBM bandwidth, dense peak).
    pub fn for_gpu(gpu: &GpuSpec, dtype: DType, unit: Unit) -> Result<Self> {
        Self::new(
            format!("{} {dtype} {unit}", gpu.name),
            gpu.peak(dtype, unit)?,
            gpu.memory_bandwidth,
        )
    }

    /// The roofline `op` runs under on `gpu`: tensor cores for matmul-shaped ops where the GPU
    /// has them in `dtype`, CUDA cores otherwise.
    pub fn for_op(gpu: &GpuSpec, op: &OpCost, dtype: DType) -> Result<Self> {
        let unit = if op.matmul {
            gpu.matmul_peak(dtype)?.1
        } else {
            Unit::Vector
        };
        // Element-wise ops in 16-bit formats compute in fp32 on many GPUs; fall back to the
        // fp32 vector peak where the datasheet lists no 16-bit vector rate.
        match Self::for_gpu(gpu, dtype, unit) {
            Ok(r) => Ok(r),
            Err(e) if unit == Unit::Vector => {
                Self::for_gpu(gpu, DType::F32, Unit::Vector).map_err(|_| e)
            }
            Err(e) => Err(e),
        }
    }

    /// Ridge point `peak_flops / bandwidth`, FLOP/byte.
    pub fn ridge(&self) -> f64 {
        self.peak_flops / self.bandwidth
    }

    /// Attainable FLOP/s at intensity `i`: `min(peak, i × bandwidth)`.
    pub fn attainable(&self, intensity: f64) -> f64 {
        self.peak_flops.min(intensity * self.bandwidth)
    }

    /// Predicted time `max(flops / peak, bytes / bandwidth)` and regime of `op`.
    pub fn predict(&self, op: &OpCost) -> Prediction {
        let compute_s = op.flops / self.peak_flops;
        let memory_s = op.bytes / self.bandwidth;
        let intensity = op.intensity();
        Prediction {
            op: op.clone(),
            intensity,
            ridge: self.ridge(),
            compute_s,
            memory_s,
            time_s: compute_s.max(memory_s),
            attainable_flops: self.attainable(intensity),
            regime: if compute_s >= memory_s {
                Regime::Compute
            } else {
                Regime::Memory
            },
        }
    }

    /// Classifies a *measured* time for `op`: achieved FLOP/s and bandwidth, the fraction of
    /// each ceiling reached, the overhead, and the regime (see [`OVERHEAD_THRESHOLD`]).
    pub fn classify(&self, op: &OpCost, measured_s: f64) -> Result<Classification> {
        positive("measured time", measured_s)?;
        let predicted = self.predict(op);
        let achieved_flops = op.flops / measured_s;
        let achieved_bandwidth = op.bytes / measured_s;
        let compute_fraction = achieved_flops / self.peak_flops;
        let memory_fraction = achieved_bandwidth / self.bandwidth;
        let regime = if compute_fraction.max(memory_fraction) < OVERHEAD_THRESHOLD {
            Regime::Overhead
        } else if compute_fraction >= memory_fraction {
            Regime::Compute
        } else {
            Regime::Memory
        };
        Ok(Classification {
            faster_than_roofline: measured_s < predicted.time_s * (1.0 - 1e-9),
            overhead_s: measured_s - predicted.time_s,
            predicted,
            measured_s,
            achieved_flops,
            achieved_bandwidth,
            compute_fraction,
            memory_fraction,
            regime,
        })
    }
}

/// How a GEMM's output tiles map onto the GPU (NVIDIA, "Matrix Multiplication Background
/// User's Guide", sections "Tile Quantization" and "Wave Quantization").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GemmQuantization {
    /// Output tiles along M: `ceil(m / tile_m)`.
    pub tiles_m: u64,
    /// Output tiles along N: `ceil(n / tile_n)`.
    pub tiles_n: u64,
    /// Total tiles (thread blocks).
    pub tiles: u64,
    /// Useful fraction of the computed tiles: `m·n / (tiles × tile_m × tile_n)`.
    pub tile_efficiency: f64,
    /// Tiles that run at once: `sm_count × tiles_per_sm`.
    pub wave_size: u64,
    /// `tiles / wave_size`.
    pub waves: f64,
    /// Busy fraction of the SM-slots over all waves: `waves / ceil(waves)`.
    pub wave_efficiency: f64,
    /// `tile_efficiency × wave_efficiency`: fraction of the tensor-core time doing useful work.
    pub efficiency: f64,
}

/// Tile and wave quantization of an `m × n` GEMM output computed in `tile_m × tile_n` tiles,
/// `tiles_per_sm` resident per SM, on `sm_count` SMs.
///
/// A dimension that is not a multiple of the tile wastes part of the last tile (tile
/// quantization); a tile count that is not a multiple of the number of concurrently running
/// tiles leaves SMs idle in the last wave (wave quantization). Both are why padding sizes up
/// (GPT-2's vocabulary 50257 → 50304 in nanoGPT) can make a GEMM *faster*.
pub fn gemm_quantization(
    m: u64,
    n: u64,
    tile_m: u64,
    tile_n: u64,
    sm_count: u64,
    tiles_per_sm: u64,
) -> Result<GemmQuantization> {
    for (name, v) in [
        ("m", m),
        ("n", n),
        ("tile_m", tile_m),
        ("tile_n", tile_n),
        ("sm_count", sm_count),
        ("tiles_per_sm", tiles_per_sm),
    ] {
        at_least_one(name, v)?;
    }
    let tiles_m = m.div_ceil(tile_m);
    let tiles_n = n.div_ceil(tile_n);
    let tiles = checked_product(
        "GEMM tiles",
        &[("tiles in m", tiles_m), ("tiles in n", tiles_n)],
    )?;
    let tile_efficiency = (m as f64 * n as f64) / (tiles as f64 * tile_m as f64 * tile_n as f64);
    let wave_size = checked_product(
        "tiles per wave",
        &[("SMs", sm_count), ("tiles per SM", tiles_per_sm)],
    )?;
    let waves = tiles as f64 / wave_size as f64;
    let wave_efficiency = waves / waves.ceil();
    Ok(GemmQuantization {
        tiles_m,
        tiles_n,
        tiles,
        tile_efficiency,
        wave_size,
        waves,
        wave_efficiency,
        efficiency: tile_efficiency * wave_efficiency,
    })
}

/// Rounds `x` up to a multiple of `multiple` (`round_up(50257, 64) = 50304`).
pub fn round_up(x: u64, multiple: u64) -> Result<u64> {
    at_least_one("multiple", multiple)?;
    checked_product(
        "rounded-up size",
        &[("blocks", x.div_ceil(multiple)), ("multiple", multiple)],
    )
}

/// Elements per 16 bytes in `dtype` (8 for fp16/bf16, 4 for fp32/tf32, 16 for int8/fp8).
///
/// cuBLAS uses tensor cores most efficiently when the GEMM dimensions and leading dimensions
/// are multiples of 16 bytes: "multiples of 8 for FP16, 4 for TF32, 16 for INT8" (NVIDIA,
/// "Matrix Multiplication Background User's Guide", Tensor Core Requirements). An odd
/// dimension such as GPT-2's 50257 breaks 16-byte vector loads for every row.
pub fn tensor_core_alignment(dtype: DType) -> u64 {
    (16.0 / dtype.bytes()) as u64
}

/// Whether a GEMM dimension is a multiple of [`tensor_core_alignment`].
pub fn is_tensor_core_aligned(dim: u64, dtype: DType) -> bool {
    dim.is_multiple_of(tensor_core_alignment(dtype))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs::gpu;

    #[test]
    fn gemm_counts_and_intensity() {
        // Square bf16 GEMM n=4096: I = n / (1.5 × 2) = 1365.3 FLOP/byte.
        let g = OpCost::gemm(4096, 4096, 4096, DType::Bf16).unwrap();
        assert_eq!(g.flops, 2.0 * 4096f64.powi(3));
        assert!((g.intensity() - 4096.0 / 3.0).abs() < 1e-9);
        let a100 = gpu("a100").unwrap();
        let r = Roofline::for_op(&a100, &g, DType::Bf16).unwrap();
        let p = r.predict(&g);
        assert_eq!(p.regime, Regime::Compute);
        // 137.4 GFLOP at 312 TFLOP/s = 440.5 µs.
        assert!((p.time_s - 2.0 * 4096f64.powi(3) / 312e12).abs() < 1e-12);
    }

    #[test]
    fn elementwise_is_memory_bound_and_fusion_helps() {
        let a100 = gpu("a100").unwrap();
        let add = OpCost::elementwise(1 << 24, 1.0, 2, 1, DType::Bf16).unwrap();
        assert!((add.intensity() - 1.0 / 6.0).abs() < 1e-12);
        let r = Roofline::for_op(&a100, &add, DType::Bf16).unwrap();
        assert_eq!(r.predict(&add).regime, Regime::Memory);
        let unfused = OpCost::elementwise_chain(1 << 24, 4, DType::F32, false).unwrap();
        let fused = OpCost::elementwise_chain(1 << 24, 4, DType::F32, true).unwrap();
        assert_eq!(unfused.flops, fused.flops);
        assert_eq!(unfused.bytes, 4.0 * fused.bytes);
    }

    #[test]
    fn flash_attention_moves_fewer_bytes() {
        let shape = AttentionShape {
            batch: 8,
            heads: 12,
            seq: 1024,
            head_dim: 64,
            causal: true,
            fused: true,
        };
        let fused = OpCost::attention(shape, DType::Bf16).unwrap();
        let unfused = OpCost::attention(
            AttentionShape {
                fused: false,
                ..shape
            },
            DType::Bf16,
        )
        .unwrap();
        assert_eq!(fused.flops, unfused.flops);
        assert!(unfused.bytes > 5.0 * fused.bytes);
    }

    #[test]
    fn classifier_regimes() {
        let r = Roofline::new("toy", 100e12, 1e12).unwrap();
        let g = OpCost::new("g", 1e12, 1e9, true).unwrap(); // I = 1000 > ridge 100
        // 12.5 ms → 80 TFLOP/s = 80% of peak: compute-bound.
        let c = r.classify(&g, 0.0125).unwrap();
        assert_eq!(c.regime, Regime::Compute);
        assert!((c.compute_fraction - 0.8).abs() < 1e-12);
        // 100 ms → 10% of peak: overhead-bound, 90 ms unexplained.
        let c = r.classify(&g, 0.1).unwrap();
        assert_eq!(c.regime, Regime::Overhead);
        assert!((c.overhead_s - 0.09).abs() < 1e-12);
        let m = OpCost::new("m", 1e9, 1e9, false).unwrap(); // I = 1 < ridge
        let c = r.classify(&m, 1.25e-3).unwrap();
        assert_eq!(c.regime, Regime::Memory);
        assert!((c.memory_fraction - 0.8).abs() < 1e-12);
        assert!(r.classify(&m, 1e-4).unwrap().faster_than_roofline);
        assert!(r.classify(&m, 0.0).is_err());
        assert!(r.classify(&m, -1.0).is_err());
    }

    /// nanoGPT (Karpathy 2023, model.py): "vocab_size ... 50304 (50257 rounded up to nearest
    /// multiple of 64 for efficiency)". 50304 = 393 × 128, so it also fills 128-wide tiles
    /// exactly, where 50257 wastes 47 columns of the last one; and 50257 is odd, so it is not
    /// 16-byte aligned in bf16.
    #[test]
    fn vocab_padding_50257_to_50304() {
        assert_eq!(round_up(50257, 64).unwrap(), 50304);
        assert!(!is_tensor_core_aligned(50257, DType::Bf16));
        assert!(is_tensor_core_aligned(50304, DType::Bf16));
        let before = gemm_quantization(8192, 50257, 128, 128, 108, 1).unwrap();
        let after = gemm_quantization(8192, 50304, 128, 128, 108, 1).unwrap();
        assert_eq!(before.tiles, after.tiles);
        assert_eq!(after.tile_efficiency, 1.0);
        assert!((before.tile_efficiency - 50257.0 / 50304.0).abs() < 1e-12);
    }

    #[test]
    fn wave_quantization() {
        // 108 SMs, one 128x128 tile each: a 1536x1152 output is 12 × 9 = 108 tiles, exactly one
        // wave; one more row of tiles (1664 rows) needs 117 tiles: a second wave with 9 tiles,
        // 117 / 216 = 54% busy.
        let one = gemm_quantization(1536, 1152, 128, 128, 108, 1).unwrap();
        assert_eq!((one.tiles, one.wave_efficiency), (108, 1.0));
        let two = gemm_quantization(1664, 1152, 128, 128, 108, 1).unwrap();
        assert_eq!(two.tiles, 117);
        assert!((two.wave_efficiency - 117.0 / 216.0).abs() < 1e-12);
        assert!(gemm_quantization(0, 1, 1, 1, 1, 1).is_err());
    }

    #[test]
    fn parses_ops() {
        let g = parse_op("gemm:4096,4096,4096", DType::Bf16).unwrap();
        assert_eq!(g, OpCost::gemm(4096, 4096, 4096, DType::Bf16).unwrap());
        assert_eq!(parse_op("ew:1e8", DType::F32).unwrap().flops, 1e8);
        let a = parse_op("attention:8,12,1024,64,causal", DType::Bf16).unwrap();
        assert!(a.name.contains("causal") && a.name.contains("fused"));
        assert!(
            parse_op("chain:1_000_000,4,fused", DType::F32)
                .unwrap()
                .name
                .starts_with("fused")
        );
        assert!(parse_op("gemm:1,2", DType::F32).is_err());
        assert!(parse_op("conv:1,2,3", DType::F32).is_err());
        assert!(parse_op("gemm:0,2,3", DType::F32).is_err());
        assert!(parse_op("softmax:1,2,bogus", DType::F32).is_err());
    }
}
