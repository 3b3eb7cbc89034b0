//! GEMM two ways: cuBLAS (production) and brrr's own numbered kernels (the lesson).
//!
//! # Row-major GEMM on column-major cuBLAS
//!
//! brrr stores matrices row-major; cuBLAS (Fortran heritage) reads them column-major.
//! A row-major `r x c` matrix with row stride `c` is, byte for byte, the column-major
//! `c x r` matrix `X^T` with leading dimension `c`. So instead of transposing data, we
//! transpose the equation:
//!
//! ```text
//!   C = op(A) op(B)          (row-major, C is m x n)
//!   C^T = op(B)^T op(A)^T    (the same bytes, read column-major: C^T is n x m, ld = n)
//! ```
//!
//! and ask cuBLAS for the second product: its "A" is our B, its "B" is our A, its m is
//! our n and its n is our m. Our B stored `k x n` (no transpose) is column-major `n x k`
//! with leading dimension n, which is exactly op'(A') for cuBLAS with `CUBLAS_OP_N`; our
//! B stored `n x k` (trans_b) is column-major `k x n` with ld k, so cuBLAS must transpose
//! it: `CUBLAS_OP_T`. Likewise for A, with ld = k (no transpose) or m (trans_a):
//!
//! ```text
//!   cublasGemmStridedBatchedEx(transa = trans_b, transb = trans_a, m = n, n = m, k,
//!       A = B, lda = trans_b ? k : n, strideA = stride_b,
//!       B = A, ldb = trans_a ? m : k, strideB = stride_a,
//!       C,     ldc = n,               strideC = stride_c)
//! ```
//!
//! f16/bf16 run on tensor cores with f32 accumulation (`CUBLAS_COMPUTE_32F`); f32 runs in
//! full f32 unless TF32 is allowed ([`crate::CudaBackend::set_allow_tf32`]); f64 in f64.
//! The fused-epilogue variant ([`crate::CudaBackend::gemm_bias_gelu`]) goes through
//! cuBLASLt with the same mapping; the row-major bias (one value per column of C) is a
//! per-row bias of C^T, which is what cuBLASLt's BIAS epilogue adds.

use crate::backend::{CudaBackend, CudaBuffer};
use crate::device::{Arg, BlasGemm, LaunchCfg, LtMatmul};
use crate::kernels::Family;
use crate::ops::{GemmArgs, check_float, suffix};
use brrr_backend::{DType, Error, GemmSpec, Result};

/// Which implementation computes a GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum GemmImpl {
    /// cuBLAS `cublasGemmStridedBatchedEx` (the default).
    Cublas = 0,
    /// cuBLASLt `cublasLtMatmul` (no batching; batched specs fall back to cuBLAS).
    CublasLt = 1,
    /// gemm.cu v1: one thread per output, no reuse.
    V1Naive = 2,
    /// gemm.cu v2: 32x32 shared-memory tiles.
    V2Tiled = 3,
    /// gemm.cu v3: 128x128 block tiles, 8x8 register tiles per thread.
    V3RegisterBlocked = 4,
    /// gemm.cu v4: tensor cores (mma.sync, ldmatrix, cp.async pipeline); f16/bf16 on
    /// sm_80+ with 8-element-aligned operands, otherwise it runs v3.
    V4TensorCore = 5,
}

impl GemmImpl {
    /// Every implementation, the production paths (cuBLAS, cuBLASLt) first, then brrr's
    /// own kernels in lesson order.
    pub const ALL: [GemmImpl; 6] = [
        GemmImpl::Cublas,
        GemmImpl::CublasLt,
        GemmImpl::V1Naive,
        GemmImpl::V2Tiled,
        GemmImpl::V3RegisterBlocked,
        GemmImpl::V4TensorCore,
    ];
    /// brrr's own kernels, in lesson order.
    pub const OWN: [GemmImpl; 4] = [
        GemmImpl::V1Naive,
        GemmImpl::V2Tiled,
        GemmImpl::V3RegisterBlocked,
        GemmImpl::V4TensorCore,
    ];

    pub(crate) fn from_u8(v: u8) -> GemmImpl {
        GemmImpl::ALL
            .into_iter()
            .find(|g| *g as u8 == v)
            .unwrap_or(GemmImpl::Cublas)
    }

    /// A short name for tables: `cublas`, `cublaslt`, `v1-naive`, ...
    pub fn name(self) -> &'static str {
        match self {
            GemmImpl::Cublas => "cublas",
            GemmImpl::CublasLt => "cublaslt",
            GemmImpl::V1Naive => "v1-naive",
            GemmImpl::V2Tiled => "v2-smem-tiled",
            GemmImpl::V3RegisterBlocked => "v3-register-blocked",
            GemmImpl::V4TensorCore => "v4-tensor-core",
        }
    }

    /// Parses [`GemmImpl::name`] (also accepts `v1`..`v4`).
    pub fn parse(s: &str) -> Option<GemmImpl> {
        match s {
            "v1" => Some(GemmImpl::V1Naive),
            "v2" => Some(GemmImpl::V2Tiled),
            "v3" => Some(GemmImpl::V3RegisterBlocked),
            "v4" => Some(GemmImpl::V4TensorCore),
            _ => GemmImpl::ALL.into_iter().find(|g| g.name() == s),
        }
    }
}

impl std::fmt::Display for GemmImpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The grid's z dimension limit: batches beyond it are split into several launches.
const MAX_GRID_Z: usize = 65535;

fn check_i32(op: &'static str, what: &'static str, v: usize) -> Result<()> {
    if v > i32::MAX as usize {
        Err(Error::LimitExceeded {
            backend: "cuda",
            limit: what,
            requested: v as u64,
            max: i32::MAX as u64,
        })
    } else {
        let _ = op;
        Ok(())
    }
}

/// The cuBLAS call for a row-major spec (see the module documentation). `dtype` is the
/// operands' dtype, `c_dtype` C's.
pub(crate) fn blas_for(
    spec: &GemmSpec,
    a: u64,
    b: u64,
    c: u64,
    (dtype, c_dtype): (DType, DType),
    tf32: bool,
) -> BlasGemm {
    BlasGemm {
        dtype,
        c_dtype,
        trans_a: spec.trans_b,
        trans_b: spec.trans_a,
        m: spec.n,
        n: spec.m,
        k: spec.k,
        alpha: spec.alpha,
        beta: spec.beta,
        a: b,
        lda: if spec.trans_b { spec.k } else { spec.n },
        stride_a: spec.stride_b,
        b: a,
        ldb: if spec.trans_a { spec.m } else { spec.k },
        stride_b: spec.stride_a,
        c,
        ldc: spec.n,
        stride_c: spec.stride_c,
        batch: spec.batch,
        tf32,
    }
}

impl CudaBackend {
    /// Dtypes and lengths. `allow_mixed` admits an f32 C with f16/bf16 operands. The
    /// lengths come from the checked [`GemmSpec::required_lens`]: every kernel below
    /// trusts them.
    fn check_gemm(
        &self,
        op: &'static str,
        spec: &GemmSpec,
        (a, b, c): (&CudaBuffer, &CudaBuffer, &CudaBuffer),
        allow_mixed: bool,
    ) -> Result<()> {
        check_float(op, a.dtype())?;
        Error::check_dtype(op, a.dtype(), b.dtype())?;
        if !(allow_mixed && is_mixed(a.dtype(), c.dtype())) {
            Error::check_dtype(op, a.dtype(), c.dtype())?;
        }
        let (na, nb, nc) = spec.required_lens()?;
        Error::check_len(op, na, a.len())?;
        Error::check_len(op, nb, b.len())?;
        Error::check_len(op, nc, c.len())?;
        Ok(())
    }

    /// Whether the tensor-core kernel (v4) can run this GEMM (see gemm.cu).
    /// Only same-dtype products: the tensor-core kernel stores C in the operands' dtype.
    pub fn v4_eligible(&self, spec: &GemmSpec, dtype: DType) -> bool {
        let cc = self.compute_capability();
        let lda_contig = if spec.trans_a { spec.m } else { spec.k };
        let ldb_contig = if spec.trans_b { spec.k } else { spec.n };
        matches!(dtype, DType::F16 | DType::BF16)
            && cc.0 >= 8
            && lda_contig.is_multiple_of(8)
            && ldb_contig.is_multiple_of(8)
            && spec.offset_a.is_multiple_of(8)
            && spec.offset_b.is_multiple_of(8)
            && spec.offset_c.is_multiple_of(8)
            && (spec.batch <= 1
                || (spec.stride_a.is_multiple_of(8) && spec.stride_b.is_multiple_of(8)))
    }

    /// [`brrr_backend::Backend::gemm`] with an explicit implementation. Returns the
    /// implementation that actually ran: v4 runs v3 where it is not eligible (wrong
    /// dtype, pre-Ampere GPU, unaligned extents), cuBLASLt runs cuBLAS for batched specs,
    /// and the cuBLAS paths run v1 for `k = 0` (which only scales C). A mixed product
    /// (f16/bf16 operands, f32 C) runs cuBLAS for cuBLASLt and v3 for v4.
    pub fn gemm_with(
        &self,
        which: GemmImpl,
        spec: &GemmSpec,
        a: &CudaBuffer,
        b: &CudaBuffer,
        c: &mut CudaBuffer,
    ) -> Result<GemmImpl> {
        const OP: &str = "gemm";
        self.check_gemm(OP, spec, (a, b, c), true)?;
        if spec.batch == 0 || spec.m == 0 || spec.n == 0 {
            return Ok(which);
        }
        let dtype = a.dtype();
        let mixed = is_mixed(dtype, c.dtype());
        let mut which = which;
        if spec.k == 0 && matches!(which, GemmImpl::Cublas | GemmImpl::CublasLt) {
            which = GemmImpl::V1Naive;
        }
        // cuBLASLt's heuristics assume 256-byte aligned operands unless told otherwise;
        // an operand inside a flat buffer may start anywhere, so it takes plain cuBLAS.
        if which == GemmImpl::CublasLt && (spec.batch > 1 || mixed || has_offsets(spec)) {
            which = GemmImpl::Cublas;
        }
        if which == GemmImpl::V4TensorCore && (mixed || !self.v4_eligible(spec, dtype)) {
            which = GemmImpl::V3RegisterBlocked;
        }
        match which {
            GemmImpl::Cublas => {
                for (what, v) in [
                    ("gemm m", spec.m),
                    ("gemm n", spec.n),
                    ("gemm k", spec.k),
                    ("gemm batch", spec.batch),
                ] {
                    check_i32(OP, what, v)?;
                }
                self.blas_batches(spec, a, b, c)?;
            }
            GemmImpl::CublasLt => {
                self.lt(spec, a, b, None, false, c)?;
            }
            own => self.own_gemm(own, spec, a, b, c)?,
        }
        Ok(which)
    }

    /// The cuBLAS call, or one call per matrix of the batch where C's matrices overlap
    /// (`stride_c < m n`, e.g. 0 for a gradient summed over the batch): the spec applies
    /// the batch in order, while a strided-batched call computes its matrices
    /// concurrently and leaves overlapping outputs undefined.
    fn blas_batches(
        &self,
        spec: &GemmSpec,
        a: &CudaBuffer,
        b: &CudaBuffer,
        c: &CudaBuffer,
    ) -> Result<()> {
        let (dtype, c_dtype) = (a.dtype(), c.dtype());
        let tf32 = self.allow_tf32();
        let (pa, pb, pc) = operand_ptrs(spec, a, b, c);
        if !c_overlaps(spec) {
            let g = blas_for(spec, pa, pb, pc, (dtype, c_dtype), tf32);
            return self.dev().blas_gemm(&g);
        }
        let one = GemmSpec { batch: 1, ..*spec };
        let (es, es_c) = (dtype.size_in_bytes(), c_dtype.size_in_bytes());
        for i in 0..spec.batch {
            // In range: `i * stride` is below the checked `required_lens`.
            let a_i = pa + (i * spec.stride_a * es) as u64;
            let b_i = pb + (i * spec.stride_b * es) as u64;
            let c_i = pc + (i * spec.stride_c * es_c) as u64;
            let g = blas_for(&one, a_i, b_i, c_i, (dtype, c_dtype), tf32);
            self.dev().blas_gemm(&g)?;
        }
        Ok(())
    }

    fn lt(
        &self,
        spec: &GemmSpec,
        a: &CudaBuffer,
        b: &CudaBuffer,
        bias: Option<&CudaBuffer>,
        gelu: bool,
        c: &mut CudaBuffer,
    ) -> Result<()> {
        for (what, v) in [("gemm m", spec.m), ("gemm n", spec.n), ("gemm k", spec.k)] {
            check_i32("gemm", what, v)?;
        }
        let (pa, pb, pc) = operand_ptrs(spec, a, b, c);
        let g = blas_for(spec, pa, pb, pc, (a.dtype(), c.dtype()), self.allow_tf32());
        self.dev().lt_matmul(&LtMatmul {
            gemm: g,
            bias: bias.map(CudaBuffer::device_ptr),
            gelu,
        })
    }

    /// `C = act(alpha op(A) op(B) + beta C + bias)` in one cuBLASLt call, where `bias`
    /// (n values, the dtype of C) is added to every row of the row-major `m x n` C and
    /// `act` is GELU (cuBLASLt's tanh approximation) when `gelu` is set. The bias add and
    /// the activation happen in the GEMM's epilogue, while the tile is still in registers,
    /// instead of as two more passes over C in memory. `spec.batch` must be 1.
    pub fn gemm_bias_gelu(
        &self,
        spec: &GemmSpec,
        a: &CudaBuffer,
        b: &CudaBuffer,
        bias: Option<&CudaBuffer>,
        gelu: bool,
        c: &mut CudaBuffer,
    ) -> Result<()> {
        const OP: &str = "gemm_bias_gelu";
        self.check_gemm(OP, spec, (a, b, c), false)?;
        if spec.batch != 1 {
            return Err(Error::invalid(
                OP,
                format!("batch must be 1, got {}", spec.batch),
            ));
        }
        if has_offsets(spec) {
            // cuBLASLt assumes 256-byte aligned operands (see `gemm_with`).
            return Err(Error::invalid(
                OP,
                "operands start at element 0 of their buffers (offsets are for `gemm`)",
            ));
        }
        if let Some(bias) = bias {
            Error::check_dtype(OP, c.dtype(), bias.dtype())?;
            Error::check_len(OP, spec.n, bias.len())?;
        }
        if spec.m == 0 || spec.n == 0 {
            return Ok(());
        }
        if spec.k == 0 {
            return Err(Error::invalid(OP, "k must be positive"));
        }
        self.lt(spec, a, b, bias, gelu, c)
    }

    fn own_gemm(
        &self,
        which: GemmImpl,
        spec: &GemmSpec,
        a: &CudaBuffer,
        b: &CudaBuffer,
        c: &mut CudaBuffer,
    ) -> Result<()> {
        let dtype = a.dtype();
        // Same-dtype kernels are named by the dtype (`f16`), mixed ones by both (`f16_f32`).
        let s = if is_mixed(dtype, c.dtype()) {
            format!("{}_{}", suffix(dtype), suffix(c.dtype()))
        } else {
            suffix(dtype).to_string()
        };
        let (es, es_c) = (
            dtype.size_in_bytes() as u64,
            c.dtype().size_in_bytes() as u64,
        );
        let (name, block, tile_m, tile_n, smem) = match which {
            GemmImpl::V1Naive => (format!("gemm_v1_{s}"), (16, 16, 1), 16, 16, 0),
            GemmImpl::V2Tiled => (format!("gemm_v2_{s}"), (32, 32, 1), 32, 32, 0),
            GemmImpl::V3RegisterBlocked => (format!("gemm_v3_{s}"), (256, 1, 1), 128, 128, 0),
            GemmImpl::V4TensorCore => {
                let layout = match (spec.trans_a, spec.trans_b) {
                    (false, false) => "nn",
                    (false, true) => "nt",
                    (true, false) => "tn",
                    (true, true) => "tt",
                };
                (
                    format!("gemm_v4_{s}_{layout}"),
                    (256, 1, 1),
                    128,
                    128,
                    V4_SMEM_BYTES,
                )
            }
            GemmImpl::Cublas | GemmImpl::CublasLt => unreachable!("handled by the caller"),
        };
        let grid_x = spec.n.div_ceil(tile_n);
        let grid_y = spec.m.div_ceil(tile_m);
        if grid_y > 65535 || grid_x > i32::MAX as usize {
            return Err(Error::LimitExceeded {
                backend: "cuda",
                limit: "gemm grid (m / tile)",
                requested: grid_y as u64,
                max: 65535,
            });
        }
        let args = GemmArgs {
            m: spec.m as u64,
            n: spec.n as u64,
            k: spec.k as u64,
            stride_a: spec.stride_a as u64,
            stride_b: spec.stride_b as u64,
            stride_c: spec.stride_c as u64,
            alpha: spec.alpha,
            beta: spec.beta,
            trans_a: i32::from(spec.trans_a),
            trans_b: i32::from(spec.trans_b),
        };
        let (pa, pb, pc) = operand_ptrs(spec, a, b, c);
        let mut start = 0;
        while start < spec.batch {
            // Overlapping C matrices are written one launch at a time, in batch order.
            let count = if c_overlaps(spec) {
                1
            } else {
                (spec.batch - start).min(MAX_GRID_Z)
            };
            // In range: `start * stride` is below the checked `required_lens`.
            let off = |stride: usize, es: u64| (start * stride) as u64 * es;
            self.launch(
                Family::Gemm,
                &name,
                LaunchCfg {
                    grid: (grid_x as u32, grid_y as u32, count as u32),
                    block,
                    smem,
                },
                &[
                    Arg::Ptr(pc + off(spec.stride_c, es_c)),
                    Arg::Ptr(pa + off(spec.stride_a, es)),
                    Arg::Ptr(pb + off(spec.stride_b, es)),
                    Arg::pod(&args),
                ],
            )?;
            start += count;
        }
        Ok(())
    }
}

/// Whether any operand starts part-way into its buffer.
fn has_offsets(spec: &GemmSpec) -> bool {
    spec.offset_a != 0 || spec.offset_b != 0 || spec.offset_c != 0
}

/// Where A, B and C start: each buffer's address plus the spec's offset, in bytes. In
/// range: an offset is below the checked [`GemmSpec::required_lens`] (or the operand is
/// empty and never touched).
fn operand_ptrs(
    spec: &GemmSpec,
    a: &CudaBuffer,
    b: &CudaBuffer,
    c: &CudaBuffer,
) -> (u64, u64, u64) {
    let es = a.dtype().size_in_bytes() as u64;
    let es_c = c.dtype().size_in_bytes() as u64;
    (
        a.device_ptr() + spec.offset_a as u64 * es,
        b.device_ptr() + spec.offset_b as u64 * es,
        c.device_ptr() + spec.offset_c as u64 * es_c,
    )
}

/// Whether the batch's C matrices overlap (`stride_c < m n`), so that they must be
/// computed one after another rather than concurrently.
fn c_overlaps(spec: &GemmSpec) -> bool {
    // m * n fits: `required_lens` checked it.
    spec.batch > 1 && spec.stride_c < spec.m * spec.n
}

/// Whether a product of `ab` operands into a `c` output is the mixed-precision case
/// (f16/bf16 operands, f32 C).
pub(crate) fn is_mixed(ab: DType, c: DType) -> bool {
    matches!(ab, DType::F16 | DType::BF16) && c == DType::F32
}

/// Dynamic shared memory of the v4 kernel: 4 pipeline stages of a 128x32 A tile and a
/// 32x128 B tile in 16-bit elements (TC_SMEM_BYTES in gemm.cu).
pub(crate) const V4_SMEM_BYTES: u32 = 4 * (128 * 32 * 2 + 128 * 32 * 2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cublas_mapping_swaps_operands() {
        let spec = GemmSpec::new(2, 3, 4).trans_b(true);
        let g = blas_for(&spec, 0xA, 0xB, 0xC, (DType::F32, DType::F32), false);
        assert_eq!((g.m, g.n, g.k), (3, 2, 4));
        assert_eq!((g.a, g.b, g.c), (0xB, 0xA, 0xC));
        assert!(g.trans_a && !g.trans_b);
        assert_eq!((g.lda, g.ldb, g.ldc), (4, 4, 3));
    }

    #[test]
    fn names_round_trip() {
        for g in GemmImpl::ALL {
            assert_eq!(GemmImpl::parse(g.name()), Some(g));
            assert_eq!(GemmImpl::from_u8(g as u8), g);
        }
        assert_eq!(GemmImpl::parse("v3"), Some(GemmImpl::V3RegisterBlocked));
    }
}
