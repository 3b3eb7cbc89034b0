//! GPU specification table: peak FLOP/s per dtype and unit, memory, caches and interconnects.
//!
//! Every figure is a *dense* (no 2:4 structured sparsity) datasheet peak. NVIDIA's Ampere and
//! later datasheets print the sparse figure first ("312/624"); we always store the smaller one,
//! because training does not use structured sparsity. Bandwidths are bytes/s; NVLink and PCIe
//! are the datasheet's *bidirectional* totals per GPU (use [`GpuSpec::nvlink_unidirectional`]
//! for the one-way egress that collective costs need); the network figure is one direction per
//! GPU in the vendor's reference system (one NIC per GPU in DGX A100/H100/H200/B200).
//!
//! Memory and cache *capacities* are binary: a datasheet's "80 GB" of HBM on an H100 is 80 GiB
//! (`80 × 2^30` = 85.9e9 bytes; `nvidia-smi` reports 81559 MiB of its 81920 MiB usable), and
//! so for every card here (DRAM and SRAM come in power-of-two sizes; JEDEC's "GB" is 2^30).
//! Bandwidths and FLOP/s are decimal (`GB/s` = 1e9 bytes/s).
//!
//! Sources are cited next to each entry. Where sources disagree, the comment says so.

use crate::error::{PerfError, Result};
use serde::Serialize;
use std::fmt;

/// A number format the hardware computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE double.
    F64,
    /// IEEE single.
    F32,
    /// NVIDIA TensorFloat-32: f32 storage, 10-bit mantissa inside tensor cores.
    Tf32,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// 8-bit float (E4M3/E5M2).
    Fp8,
    /// 8-bit integer.
    Int8,
    /// 4-bit float (Blackwell NVFP4/MXFP4).
    Fp4,
}

impl DType {
    /// Every dtype, widest first.
    pub const ALL: [DType; 8] = [
        DType::F64,
        DType::F32,
        DType::Tf32,
        DType::F16,
        DType::Bf16,
        DType::Fp8,
        DType::Int8,
        DType::Fp4,
    ];

    /// Bytes per element in memory (TF32 is stored as f32; FP4 packs two per byte).
    pub fn bytes(self) -> f64 {
        match self {
            DType::F64 => 8.0,
            DType::F32 | DType::Tf32 => 4.0,
            DType::F16 | DType::Bf16 => 2.0,
            DType::Fp8 | DType::Int8 => 1.0,
            DType::Fp4 => 0.5,
        }
    }

    /// Short lowercase name, as accepted by [`DType::parse`].
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "fp64",
            DType::F32 => "fp32",
            DType::Tf32 => "tf32",
            DType::F16 => "fp16",
            DType::Bf16 => "bf16",
            DType::Fp8 => "fp8",
            DType::Int8 => "int8",
            DType::Fp4 => "fp4",
        }
    }

    /// Parses a dtype name (`fp32`/`f32`/`float32`, `bf16`, `fp16`/`f16`/`half`, `tf32`,
    /// `fp8`/`e4m3`/`e5m2`, `int8`/`i8`, `fp4`, `fp64`/`f64`/`double`), case-insensitively.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "fp64" | "f64" | "float64" | "double" => DType::F64,
            "fp32" | "f32" | "float32" | "float" => DType::F32,
            "tf32" => DType::Tf32,
            "fp16" | "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::Bf16,
            "fp8" | "f8" | "e4m3" | "e5m2" => DType::Fp8,
            "int8" | "i8" => DType::Int8,
            "fp4" | "f4" | "nvfp4" => DType::Fp4,
            _ => {
                return Err(PerfError::Unknown {
                    kind: "dtype",
                    name: s.to_string(),
                    known: DType::ALL.map(DType::name).join(", "),
                });
            }
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which execution unit a peak belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// General-purpose SIMT lanes: CUDA cores on a GPU, SIMD FMA units on a CPU. Element-wise
    /// ops, reductions and anything not shaped like a matmul run here.
    Vector,
    /// Matrix units: tensor cores. Only matmul-shaped work (GEMM, convolution, attention's
    /// two GEMMs) can use them.
    Tensor,
}

impl Unit {
    /// Short name: `vector` or `tensor`.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Vector => "vector",
            Unit::Tensor => "tensor",
        }
    }

    /// Parses `vector`/`cuda`/`simd`/`cuda-cores` or `tensor`/`tc`/`tensor-cores`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "vector" | "cuda" | "cuda-cores" | "cuda_cores" | "simd" | "simt" => Ok(Unit::Vector),
            "tensor" | "tc" | "tensor-cores" | "tensor_cores" | "matrix" => Ok(Unit::Tensor),
            _ => Err(PerfError::Unknown {
                kind: "unit",
                name: s.to_string(),
                known: "vector (CUDA cores), tensor (tensor cores)".to_string(),
            }),
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unit::Vector => "CUDA cores",
            Unit::Tensor => "tensor cores",
        })
    }
}

/// One dense peak: FLOP/s (or OP/s for integers) of `dtype` on `unit`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Peak {
    /// Input dtype.
    pub dtype: DType,
    /// Execution unit.
    pub unit: Unit,
    /// Dense peak in FLOP/s.
    pub flops: f64,
}

/// A GPU (or "this machine") as the estimators see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSpec {
    /// Lookup key, e.g. `a100-sxm-80gb`.
    pub id: String,
    /// Marketing name.
    pub name: String,
    /// Architecture (Volta, Ampere, Hopper, Blackwell, Ada, or the CPU's SIMD ISA).
    pub architecture: String,
    /// Streaming multiprocessors (for "this machine": cores), used for wave quantization.
    pub sm_count: u32,
    /// Memory capacity in bytes: the datasheet's "GB" read as GiB (2^30 bytes), which is what
    /// the cards hold (see the module docs).
    pub memory_bytes: f64,
    /// Peak DRAM/HBM bandwidth in bytes/s.
    pub memory_bandwidth: f64,
    /// Last-level (L2) cache in bytes (the datasheet's "MB" read as MiB), where published.
    pub l2_bytes: Option<f64>,
    /// NVLink bandwidth per GPU, bidirectional total, where the GPU has an all-to-all NVLink
    /// fabric (SXM boards). PCIe cards with pairwise bridges have `None`.
    pub nvlink_bandwidth: Option<f64>,
    /// PCIe bandwidth, bidirectional total (x16).
    pub pcie_bandwidth: Option<f64>,
    /// Scale-out network bandwidth per GPU, one direction, in the reference system.
    pub network_bandwidth: Option<f64>,
    /// GPUs per node in the reference system (8 for DGX/HGX).
    pub gpus_per_node: u32,
    /// Board power in watts.
    pub tdp_watts: Option<f64>,
    /// Dense peaks, one per (dtype, unit) the datasheet lists.
    pub peaks: Vec<Peak>,
    /// Where the numbers come from.
    pub source: String,
}

const T: f64 = 1e12;
/// Decimal gigabyte, for bandwidths (`GB/s`).
const GB: f64 = 1e9;
/// Binary gibibyte, for memory capacities.
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// Binary mebibyte, for cache capacities.
const MIB: f64 = 1024.0 * 1024.0;

fn peaks(list: &[(DType, Unit, f64)]) -> Vec<Peak> {
    list.iter()
        .map(|&(dtype, unit, tflops)| Peak {
            dtype,
            unit,
            flops: tflops * T,
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn spec(
    id: &str,
    name: &str,
    architecture: &str,
    sm_count: u32,
    memory_gib: f64,
    bandwidth_gb_s: f64,
    l2_mib: Option<f64>,
    nvlink_gb_s: Option<f64>,
    pcie_gb_s: Option<f64>,
    network_gb_s: Option<f64>,
    gpus_per_node: u32,
    tdp_watts: Option<f64>,
    peak_list: &[(DType, Unit, f64)],
    source: &str,
) -> GpuSpec {
    GpuSpec {
        id: id.to_string(),
        name: name.to_string(),
        architecture: architecture.to_string(),
        sm_count,
        memory_bytes: memory_gib * GIB,
        memory_bandwidth: bandwidth_gb_s * GB,
        l2_bytes: l2_mib.map(|m| m * MIB),
        nvlink_bandwidth: nvlink_gb_s.map(|b| b * GB),
        pcie_bandwidth: pcie_gb_s.map(|b| b * GB),
        network_bandwidth: network_gb_s.map(|b| b * GB),
        gpus_per_node,
        tdp_watts,
        peaks: peaks(peak_list),
        source: source.to_string(),
    }
}

use DType::*;
use Unit::{Tensor, Vector};

/// The built-in table of datacenter and consumer GPUs (not "this machine", which is measured:
/// see [`this_machine`]).
pub fn gpus() -> Vec<GpuSpec> {
    // Ampere's shared figures: NVIDIA A100 Tensor Core GPU datasheet (2021, PN 1001-0621):
    // FP64 9.7, FP64 TC 19.5, FP32 19.5, TF32 TC 156 (312 sparse), BF16/FP16 TC 312 (624
    // sparse), INT8 TC 624 TOPS (1248 sparse). Non-tensor FP16 78 and BF16 39 TFLOP/s: NVIDIA
    // A100 Tensor Core GPU Architecture whitepaper (2020), Table 1. 108 SMs and 40 MB L2: same
    // whitepaper. DGX A100: one 200 Gb/s HDR InfiniBand NIC per GPU = 25 GB/s.
    let a100_peaks = [
        (F64, Vector, 9.7),
        (F64, Tensor, 19.5),
        (F32, Vector, 19.5),
        (F16, Vector, 78.0),
        (Bf16, Vector, 39.0),
        (Tf32, Tensor, 156.0),
        (F16, Tensor, 312.0),
        (Bf16, Tensor, 312.0),
        (Int8, Tensor, 624.0),
    ];
    // H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet (2023): FP64 34, FP64 TC 67, FP32 67,
    // TF32 TC 989 sparse, BF16/FP16 TC 1979 sparse, FP8 TC 3958 sparse, INT8 3958 sparse;
    // dense is half. Non-tensor FP16/BF16 133.8: NVIDIA H100 Tensor Core GPU Architecture
    // whitepaper (2022), Table 2 (2x the FP32 rate). 132 SMs, 50 MB L2: same whitepaper.
    let h100_sxm_peaks = [
        (F64, Vector, 34.0),
        (F64, Tensor, 67.0),
        (F32, Vector, 67.0),
        (F16, Vector, 133.8),
        (Bf16, Vector, 133.8),
        (Tf32, Tensor, 494.5),
        (F16, Tensor, 989.5),
        (Bf16, Tensor, 989.5),
        (Fp8, Tensor, 1979.0),
        (Int8, Tensor, 1979.0),
    ];
    // Capacities (the GiB column): each datasheet's "GB" read as GiB, which `nvidia-smi
    // --query-gpu=memory.total` bears out, since it reports more than the decimal figure:
    // V100 SXM2 32 GB: 32510 MiB; A100 40 GB: 40960 MiB; A100 80 GB: 81920 MiB; H100 80 GB
    // (SXM and PCIe): 81559 MiB (85.5e9 bytes > 80e9); H200 141 GB: 143771 MiB; B200 180 GB:
    // 183359 MiB; RTX 4090 24 GB: 24564 MiB; L4 24 GB: 23034 MiB with ECC on (GDDR6 ECC
    // reserves 1/16 of 24576 MiB). The little missing from a full 2^30 multiple is
    // driver-reserved; the estimates' "Not counted" note covers it. L2 sizes likewise: the
    // whitepapers' "40 MB" (A100) is 40 MiB, the CUDA `l2CacheSize` 41943040.
    vec![
        // NVIDIA Tesla V100 GPU datasheet (2020, SXM2 column): FP64 7.8, FP32 15.7, Tensor
        // 125 TFLOP/s (FP16 inputs, FP32 accumulate; Volta has no BF16/TF32), 32 GB HBM2 at
        // 900 GB/s, NVLink 300 GB/s, 300 W. Non-tensor FP16 31.4 TFLOP/s, 80 SMs, 6 MB L2:
        // NVIDIA Tesla V100 GPU Architecture whitepaper (2017), Table 1. Network: DGX-1V has
        // 4x 100 Gb/s EDR InfiniBand for 8 GPUs = 6.25 GB/s per GPU.
        spec(
            "v100-sxm2-32gb",
            "NVIDIA V100 SXM2 32GB",
            "Volta",
            80,
            32.0,
            900.0,
            Some(6.0),
            Some(300.0),
            Some(32.0),
            Some(6.25),
            8,
            Some(300.0),
            &[
                (F64, Vector, 7.8),
                (F32, Vector, 15.7),
                (F16, Vector, 31.4),
                (F16, Tensor, 125.0),
            ],
            "NVIDIA V100 datasheet (SXM2); Volta architecture whitepaper Table 1",
        ),
        // A100 40GB SXM4: 1555 GB/s HBM2, 400 W (A100 datasheet, 40GB SXM column).
        spec(
            "a100-sxm-40gb",
            "NVIDIA A100 SXM4 40GB",
            "Ampere",
            108,
            40.0,
            1555.0,
            Some(40.0),
            Some(600.0),
            Some(64.0),
            Some(25.0),
            8,
            Some(400.0),
            &a100_peaks,
            "NVIDIA A100 datasheet (40GB SXM); A100 architecture whitepaper Table 1",
        ),
        // A100 80GB SXM4: 2039 GB/s HBM2e, 400 W (A100 datasheet, 80GB SXM column).
        spec(
            "a100-sxm-80gb",
            "NVIDIA A100 SXM4 80GB",
            "Ampere",
            108,
            80.0,
            2039.0,
            Some(40.0),
            Some(600.0),
            Some(64.0),
            Some(25.0),
            8,
            Some(400.0),
            &a100_peaks,
            "NVIDIA A100 datasheet (80GB SXM); A100 architecture whitepaper Table 1",
        ),
        // A100 40GB PCIe: 1555 GB/s, 250 W; NVLink only as a 2-GPU bridge (600 GB/s), so no
        // all-to-all NVLink fabric: collectives go over PCIe Gen4 (64 GB/s).
        spec(
            "a100-pcie-40gb",
            "NVIDIA A100 PCIe 40GB",
            "Ampere",
            108,
            40.0,
            1555.0,
            Some(40.0),
            None,
            Some(64.0),
            None,
            8,
            Some(250.0),
            &a100_peaks,
            "NVIDIA A100 datasheet (40GB PCIe); A100 architecture whitepaper Table 1",
        ),
        // A100 80GB PCIe: 1935 GB/s HBM2e, 300 W (A100 datasheet, 80GB PCIe column).
        spec(
            "a100-pcie-80gb",
            "NVIDIA A100 PCIe 80GB",
            "Ampere",
            108,
            80.0,
            1935.0,
            Some(40.0),
            None,
            Some(64.0),
            None,
            8,
            Some(300.0),
            &a100_peaks,
            "NVIDIA A100 datasheet (80GB PCIe); A100 architecture whitepaper Table 1",
        ),
        // H100 PCIe: datasheet FP64 26, FP64 TC 51, FP32 51, TF32 756 sparse, BF16/FP16 1513
        // sparse, FP8 3026 sparse, INT8 3026 sparse; 80 GB HBM2e at 2 TB/s; 300-350 W; NVLink
        // only as a 2-GPU bridge; PCIe Gen5 128 GB/s. 114 SMs, 50 MB L2, non-tensor FP16/BF16
        // 102.4: H100 architecture whitepaper Table 2.
        spec(
            "h100-pcie",
            "NVIDIA H100 PCIe 80GB",
            "Hopper",
            114,
            80.0,
            2000.0,
            Some(50.0),
            None,
            Some(128.0),
            None,
            8,
            Some(350.0),
            &[
                (F64, Vector, 26.0),
                (F64, Tensor, 51.0),
                (F32, Vector, 51.0),
                (F16, Vector, 102.4),
                (Bf16, Vector, 102.4),
                (Tf32, Tensor, 378.0),
                (F16, Tensor, 756.5),
                (Bf16, Tensor, 756.5),
                (Fp8, Tensor, 1513.0),
                (Int8, Tensor, 1513.0),
            ],
            "NVIDIA H100 datasheet (PCIe); H100 architecture whitepaper Table 2",
        ),
        // H100 SXM5 80GB: 3.35 TB/s HBM3, NVLink 900 GB/s, PCIe Gen5 128 GB/s, up to 700 W.
        // DGX H100: 8x 400 Gb/s ConnectX-7 (one per GPU) = 50 GB/s per GPU, 400 GB/s per node,
        // the figure the JAX scaling book's GPU chapter uses for node egress.
        spec(
            "h100-sxm",
            "NVIDIA H100 SXM5 80GB",
            "Hopper",
            132,
            80.0,
            3350.0,
            Some(50.0),
            Some(900.0),
            Some(128.0),
            Some(50.0),
            8,
            Some(700.0),
            &h100_sxm_peaks,
            "NVIDIA H100 datasheet (SXM); H100 architecture whitepaper Table 2; DGX H100 user guide",
        ),
        // H200 SXM 141GB: NVIDIA H200 datasheet (2024): same compute as H100 SXM, 141 GB
        // HBM3e at 4.8 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s, up to 700 W. Same GH100 die:
        // 132 SMs, 50 MB L2 (JAX scaling book GPU chapter, spec summary table).
        spec(
            "h200-sxm",
            "NVIDIA H200 SXM 141GB",
            "Hopper",
            132,
            141.0,
            4800.0,
            Some(50.0),
            Some(900.0),
            Some(128.0),
            Some(50.0),
            8,
            Some(700.0),
            &h100_sxm_peaks,
            "NVIDIA H200 datasheet; JAX scaling book ch. 12 spec table",
        ),
        // B200 (HGX B200, 1000 W configuration): FP64/FP64 TC 40, FP32 80, TF32 TC 1100
        // (2200 sparse), BF16/FP16 TC 2250 (4500 sparse), FP8 and INT8 4500 (9000 sparse), FP4
        // 9000 (18000 sparse) - NVIDIA HGX B200 specifications. Memory: DGX B200 datasheet,
        // 1,440 GB and 64 TB/s for 8 GPUs = 180 GB and 8 TB/s per GPU (later HGX revisions quote
        // 7.7 TB/s, 75 TF FP32 and 37 TF FP64; the scaling book uses 192 GB and 8 TB/s).
        // NVLink 5: 1.8 TB/s. 148 SMs and 126 MB L2: JAX scaling book ch. 12 (NVIDIA does not
        // publish these). DGX B200: 8x 400 Gb/s ConnectX-7 = 50 GB/s per GPU.
        spec(
            "b200",
            "NVIDIA B200 (HGX, 1000 W)",
            "Blackwell",
            148,
            180.0,
            8000.0,
            Some(126.0),
            Some(1800.0),
            Some(128.0),
            Some(50.0),
            8,
            Some(1000.0),
            &[
                (F64, Vector, 40.0),
                (F64, Tensor, 40.0),
                (F32, Vector, 80.0),
                (Tf32, Tensor, 1100.0),
                (F16, Tensor, 2250.0),
                (Bf16, Tensor, 2250.0),
                (Fp8, Tensor, 4500.0),
                (Int8, Tensor, 4500.0),
                (Fp4, Tensor, 9000.0),
            ],
            "NVIDIA HGX B200 specs; DGX B200 datasheet; JAX scaling book ch. 12",
        ),
        // L4: NVIDIA L4 datasheet (2023): FP32 30.3, TF32 TC 120 sparse, BF16/FP16 TC 242
        // sparse, FP8 485 sparse, INT8 485 sparse; 24 GB GDDR6 at 300 GB/s; 72 W; PCIe Gen4
        // x16 (64 GB/s); no NVLink. AD104 with 58 SMs (7,424 CUDA cores / 128) and 48 MB L2:
        // NVIDIA Ada GPU Architecture whitepaper. Cloud hosts put up to 8 in one VM (GCP G2).
        spec(
            "l4",
            "NVIDIA L4",
            "Ada Lovelace",
            58,
            24.0,
            300.0,
            Some(48.0),
            None,
            Some(64.0),
            None,
            8,
            Some(72.0),
            &[
                (F32, Vector, 30.3),
                (Tf32, Tensor, 60.0),
                (F16, Tensor, 121.0),
                (Bf16, Tensor, 121.0),
                (Fp8, Tensor, 242.5),
                (Int8, Tensor, 242.5),
            ],
            "NVIDIA L4 datasheet; Ada architecture whitepaper",
        ),
        // RTX 4090: NVIDIA Ada GPU Architecture whitepaper, Appendix A: 128 SMs, 2520 MHz
        // boost, FP32 82.6, non-tensor FP16 82.6; tensor FP16/BF16 with FP32 accumulate 165.2
        // dense (GeForce runs FP32-accumulate at half the FP16-accumulate rate of 330.3; training
        // accumulates in FP32, so we list 165.2), TF32 82.6, FP8 (FP32 acc.) 330.3, INT8 660.6;
        // 24 GB GDDR6X at 1008 GB/s, 72 MB L2, 450 W, PCIe Gen4. No NVLink.
        spec(
            "rtx-4090",
            "NVIDIA GeForce RTX 4090",
            "Ada Lovelace",
            128,
            24.0,
            1008.0,
            Some(72.0),
            None,
            Some(64.0),
            None,
            1,
            Some(450.0),
            &[
                (F32, Vector, 82.6),
                (F16, Vector, 82.6),
                (Tf32, Tensor, 82.6),
                (F16, Tensor, 165.2),
                (Bf16, Tensor, 165.2),
                (Fp8, Tensor, 330.3),
                (Int8, Tensor, 660.6),
            ],
            "NVIDIA Ada GPU architecture whitepaper, Appendix A (GeForce RTX 4090)",
        ),
    ]
}

/// Aliases accepted by [`gpu`] besides the ids, mapping to an id.
const ALIASES: &[(&str, &str)] = &[
    ("v100", "v100-sxm2-32gb"),
    ("a100", "a100-sxm-80gb"),
    ("a100-80gb", "a100-sxm-80gb"),
    ("a100-40gb", "a100-sxm-40gb"),
    ("a100-sxm", "a100-sxm-80gb"),
    ("a100-pcie", "a100-pcie-80gb"),
    ("h100", "h100-sxm"),
    ("h200", "h200-sxm"),
    ("rtx4090", "rtx-4090"),
    ("4090", "rtx-4090"),
];

/// Ids that mean "this machine" in [`gpu`] (measured, see [`this_machine`]).
pub const THIS_MACHINE_IDS: &[&str] = &["this-machine", "this", "cpu", "local"];

/// Looks a GPU up by id or alias (case-insensitive; spaces and underscores count as dashes).
/// `this-machine` (also `cpu`, `local`) measures the CPU we run on with [`this_machine`].
pub fn gpu(name: &str) -> Result<GpuSpec> {
    let key = name.trim().to_ascii_lowercase().replace([' ', '_'], "-");
    if THIS_MACHINE_IDS.contains(&key.as_str()) {
        return Ok(this_machine());
    }
    let id = ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map(|(_, id)| *id)
        .unwrap_or(key.as_str());
    gpus().into_iter().find(|g| g.id == id).ok_or_else(|| {
        let mut known: Vec<String> = gpus().into_iter().map(|g| g.id).collect();
        known.push("this-machine".into());
        PerfError::Unknown {
            kind: "GPU",
            name: name.to_string(),
            known: known.join(", "),
        }
    })
}

/// The table entry for a GPU as its driver names it (`"NVIDIA H200"`,
/// `"NVIDIA H100 80GB HBM3"`, `"NVIDIA A100-SXM4-40GB"`, `"NVIDIA GeForce RTX 4090"`), or
/// `None` when the table has no such GPU (a software rasterizer, a laptop GPU, ...).
///
/// Used to turn a measured training throughput into MFU on whatever GPU a backend
/// reports, so it matches on whole words of the name: `L40` is not an `L4`.
pub fn gpu_for_device(device_name: &str) -> Option<GpuSpec> {
    let lower = device_name.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| words.contains(&w);
    let pcie = has("pcie");
    let id = if has("h200") {
        "h200-sxm"
    } else if has("h100") {
        if pcie { "h100-pcie" } else { "h100-sxm" }
    } else if has("a100") {
        // The driver says "A100-SXM4-40GB", "A100-PCIE-40GB" or "A100 80GB PCIe".
        match (pcie, has("40gb")) {
            (true, true) => "a100-pcie-40gb",
            (true, false) => "a100-pcie-80gb",
            (false, true) => "a100-sxm-40gb",
            (false, false) => "a100-sxm-80gb",
        }
    } else if has("b200") {
        "b200"
    } else if has("l4") {
        "l4"
    } else if has("4090") {
        "rtx-4090"
    } else if has("v100") && has("sxm2") && has("32gb") {
        // Other V100 variants (PCIe, 16 GB) have other clocks and peaks.
        "v100-sxm2-32gb"
    } else {
        return None;
    };
    gpus().into_iter().find(|g| g.id == id)
}

impl GpuSpec {
    /// Dense peak FLOP/s of `dtype` on `unit`, or [`PerfError::MissingSpec`].
    pub fn peak(&self, dtype: DType, unit: Unit) -> Result<f64> {
        self.peaks
            .iter()
            .find(|p| p.dtype == dtype && p.unit == unit)
            .map(|p| p.flops)
            .ok_or_else(|| PerfError::MissingSpec {
                gpu: self.name.clone(),
                // "this machine" is a CPU: its units are SIMD lanes, not CUDA/tensor cores.
                what: if self.id == "this-machine" {
                    format!("{dtype} peak on its SIMD units")
                } else {
                    format!("{dtype} peak on {unit}")
                },
            })
    }

    /// The peak a matmul in `dtype` can use: tensor cores where the GPU has them for `dtype`,
    /// otherwise the vector units. Returns the unit chosen too.
    pub fn matmul_peak(&self, dtype: DType) -> Result<(f64, Unit)> {
        self.peak(dtype, Unit::Tensor)
            .map(|p| (p, Unit::Tensor))
            .or_else(|_| self.peak(dtype, Unit::Vector).map(|p| (p, Unit::Vector)))
    }

    /// Ridge point (machine balance) in FLOP/byte: `peak(dtype, unit) / memory_bandwidth`.
    /// An op whose arithmetic intensity is below it is memory-bound (Williams, Waterman and
    /// Patterson, "Roofline", CACM 2009).
    pub fn ridge_point(&self, dtype: DType, unit: Unit) -> Result<f64> {
        Ok(self.peak(dtype, unit)? / self.memory_bandwidth)
    }

    /// One-direction NVLink bandwidth per GPU (half the datasheet's bidirectional figure):
    /// 450 GB/s on H100, the "GPU egress bandwidth" of the JAX scaling book ch. 12.
    pub fn nvlink_unidirectional(&self) -> Option<f64> {
        self.nvlink_bandwidth.map(|b| b / 2.0)
    }

    /// One-direction bandwidth a GPU has to its node peers: NVLink if present, else PCIe.
    pub fn intra_node_bandwidth(&self) -> Result<f64> {
        self.nvlink_unidirectional()
            .or(self.pcie_bandwidth.map(|b| b / 2.0))
            .ok_or_else(|| PerfError::MissingSpec {
                gpu: self.name.clone(),
                what: "intra-node interconnect bandwidth".into(),
            })
    }

    /// Node egress to the scale-out network: `network_bandwidth × gpus_per_node` (400 GB/s for
    /// a DGX H100, the scaling book's "node egress bandwidth").
    pub fn node_egress_bandwidth(&self) -> Result<f64> {
        self.network_bandwidth
            .map(|b| b * f64::from(self.gpus_per_node))
            .ok_or_else(|| PerfError::MissingSpec {
                gpu: self.name.clone(),
                what: "scale-out network bandwidth".into(),
            })
    }
}

/// "This machine": the CPU we run on, as a [`GpuSpec`], with its theoretical FP32/FP64 peak
/// from [`crate::machine::cpu_fp32_peak`] and its bandwidth measured by
/// [`crate::machine::measure_cpu_bandwidth`] (about a second). On wasm32 the bandwidth is NaN;
/// build it with [`this_machine_from`] and a bandwidth measured with the browser's clock.
///
/// The FP32 peak is the *measured* FMA throughput of all threads
/// ([`crate::machine::cpu_fp32_peak_measured`]) where it can be measured, and the nominal
/// clock's peak otherwise (the fallback); the source says which.
pub fn this_machine() -> GpuSpec {
    let peak = crate::machine::cpu_fp32_peak_measured();
    let mut spec = this_machine_from(&peak.nominal, crate::machine::measure_cpu_bandwidth());
    if let (true, Some(m)) = (peak.measured, &peak.measurement) {
        for p in &mut spec.peaks {
            // FP64: half the FP32 rate (half as many lanes per register).
            p.flops = if p.dtype == F64 {
                peak.flops / 2.0
            } else {
                peak.flops
            };
        }
        spec.source = format!(
            "{m}; nominal (not used): {}; STREAM-style triad bandwidth",
            peak.nominal
        );
    }
    spec
}

/// Builds the "this machine" spec from a CPU peak and a measured bandwidth (bytes/s).
/// FP64 is half the FP32 peak (half as many lanes per register). Memory capacity is
/// `MemTotal` from `/proc/meminfo` where readable, else 0.
pub fn this_machine_from(peak: &crate::machine::CpuPeak, bandwidth: f64) -> GpuSpec {
    GpuSpec {
        id: "this-machine".into(),
        name: format!("this machine ({})", peak.model),
        architecture: peak.simd_isa.to_string(),
        sm_count: u32::try_from(peak.cores).unwrap_or(u32::MAX),
        memory_bytes: crate::machine::total_memory_bytes().unwrap_or(0) as f64,
        memory_bandwidth: bandwidth,
        l2_bytes: None,
        nvlink_bandwidth: None,
        pcie_bandwidth: None,
        network_bandwidth: None,
        gpus_per_node: 1,
        tdp_watts: None,
        peaks: vec![
            Peak {
                dtype: F64,
                unit: Vector,
                flops: peak.flops / 2.0,
            },
            Peak {
                dtype: F32,
                unit: Vector,
                flops: peak.flops,
            },
        ],
        source: format!("measured: {peak}; STREAM-style triad bandwidth"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names as `nvidia-smi` and the CUDA driver print them map to the right entry.
    #[test]
    fn driver_names_map_to_table_entries() {
        let id = |n: &str| gpu_for_device(n).map(|g| g.id);
        assert_eq!(id("NVIDIA H200").as_deref(), Some("h200-sxm"));
        assert_eq!(id("NVIDIA H100 80GB HBM3").as_deref(), Some("h100-sxm"));
        assert_eq!(id("NVIDIA H100 PCIe").as_deref(), Some("h100-pcie"));
        assert_eq!(
            id("NVIDIA A100-SXM4-40GB").as_deref(),
            Some("a100-sxm-40gb")
        );
        assert_eq!(
            id("NVIDIA A100-PCIE-40GB").as_deref(),
            Some("a100-pcie-40gb")
        );
        assert_eq!(
            id("NVIDIA A100 80GB PCIe").as_deref(),
            Some("a100-pcie-80gb")
        );
        assert_eq!(id("NVIDIA GeForce RTX 4090").as_deref(), Some("rtx-4090"));
        assert_eq!(id("NVIDIA L4").as_deref(), Some("l4"));
        assert_eq!(
            id("Tesla V100-SXM2-32GB").as_deref(),
            Some("v100-sxm2-32gb")
        );
        // Not in the table, and not to be mistaken for something that is.
        assert_eq!(id("NVIDIA L40S"), None);
        assert_eq!(id("Tesla V100-PCIE-16GB"), None);
        assert_eq!(id("llvmpipe (LLVM 15.0.6, 256 bits)"), None);
        assert_eq!(id("SwiftShader Device (Subzero)"), None);
    }

    /// Seed-level fact: A100 has 312 TFLOP/s dense BF16 on tensor cores and 2039 GB/s HBM2e
    /// (80GB SXM). Source: NVIDIA A100 datasheet.
    #[test]
    fn a100_seed_facts() {
        let a100 = gpu("a100").unwrap();
        assert_eq!(a100.peak(Bf16, Tensor).unwrap(), 312e12);
        assert_eq!(a100.memory_bandwidth, 2039e9);
        assert_eq!(a100.sm_count, 108);
        // Ridge point: 312e12 / 2039e9 = 153 FLOP/byte.
        let ridge = a100.ridge_point(Bf16, Tensor).unwrap();
        assert!((ridge - 153.0).abs() < 0.5, "{ridge}");
    }

    /// JAX scaling book ch. 12: H100 GPU egress 450e9 and node egress 400e9 bytes/s; B200
    /// GPU egress 900e9. H100 critical intensity 990e12 / 3.35e12 ~ 295 FLOP/byte.
    #[test]
    fn scaling_book_bandwidths() {
        let h100 = gpu("h100").unwrap();
        assert_eq!(h100.nvlink_unidirectional(), Some(450e9));
        assert_eq!(h100.node_egress_bandwidth().unwrap(), 400e9);
        assert_eq!(gpu("b200").unwrap().nvlink_unidirectional(), Some(900e9));
        let ridge = h100.ridge_point(Bf16, Tensor).unwrap();
        assert!((ridge - 295.0).abs() < 1.0, "{ridge}");
    }

    #[test]
    fn every_gpu_is_sane() {
        for g in gpus() {
            assert!(g.memory_bandwidth > 0.0 && g.memory_bytes > 0.0, "{}", g.id);
            assert!(g.peak(F32, Vector).is_ok(), "{} lacks fp32", g.id);
            // Tensor peaks are never below the vector peak of the same dtype.
            for p in &g.peaks {
                if p.unit == Tensor
                    && let Ok(v) = g.peak(p.dtype, Vector)
                {
                    assert!(p.flops >= v, "{} {}", g.id, p.dtype);
                }
            }
            assert_eq!(gpu(&g.id).unwrap(), g);
        }
    }

    #[test]
    fn lookup_errors_list_known_names() {
        let err = gpu("tpu-v5p").unwrap_err().to_string();
        assert!(
            err.contains("h100-sxm") && err.contains("this-machine"),
            "{err}"
        );
        assert!(matches!(
            gpu("V100").unwrap().peak(Bf16, Tensor),
            Err(PerfError::MissingSpec { .. })
        ));
        assert_eq!(DType::parse("BF16").unwrap(), Bf16);
        assert!(DType::parse("fp7").is_err());
        assert_eq!(Unit::parse("cuda").unwrap(), Vector);
    }
}
