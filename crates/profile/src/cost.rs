//! What one op costs: its FLOPs and the minimum bytes it moves, from its spec and the
//! sizes and dtypes of its buffers.
//!
//! Conventions are brrr-perf's roofline ones (`brrr_perf::roofline::OpCost`): a fused
//! multiply-add counts 2 FLOPs, a transcendental (`exp`, `tanh`, `sqrt`) counts 1, and bytes
//! are *minimum* traffic: every input read once and every output written once (an output
//! that is accumulated into, `+=`, is read and written). Real kernels may move more, so an
//! op's achieved bandwidth computed from these counts is a lower bound on its real traffic.
//!
//! Counts are `u64` and saturate: they describe ops that already ran, whose sizes fit
//! memory, so saturation only guards against nonsense, never changes a real count.

use brrr_backend::{AttentionSpec, DType, GemmSpec, Layout};

/// One recorded op call: its kind, shape and cost.
#[derive(Clone, Debug, PartialEq)]
pub struct OpCall {
    /// The op's kind, the `Backend` method's name (`gemm`, `softmax`, `adamw`, ...).
    pub kind: &'static str,
    /// The dtype of its main operand.
    pub dtype: DType,
    /// Its shape, as the spec gives it (`"1x64x64x32 nt"`, `"rows=512 cols=128"`).
    pub shape: String,
    /// Floating-point operations (an FMA counts 2).
    pub flops: u64,
    /// Minimum bytes read and written.
    pub bytes: u64,
    /// Whether the op is a matrix product (compute ceiling of matrix units).
    pub matmul: bool,
}

/// `a × b`, saturating.
fn mul(a: usize, b: usize) -> u64 {
    (a as u64).saturating_mul(b as u64)
}

/// `elements × bytes per element of dtype`, saturating.
pub fn bytes_of(dtype: DType, elements: usize) -> u64 {
    mul(elements, dtype.size_in_bytes())
}

impl OpCall {
    /// An op moving bytes only (copies, fills, transfers).
    pub fn memory(kind: &'static str, dtype: DType, shape: String, bytes: u64) -> Self {
        OpCall {
            kind,
            dtype,
            shape,
            flops: 0,
            bytes,
            matmul: false,
        }
    }

    /// An element-wise op over `n` elements doing `flops_per_element`, moving `bytes`.
    pub fn elementwise(
        kind: &'static str,
        dtype: DType,
        n: usize,
        flops_per_element: u64,
        bytes: u64,
    ) -> Self {
        OpCall {
            kind,
            dtype,
            shape: format!("n={n}"),
            flops: (n as u64).saturating_mul(flops_per_element),
            bytes,
            matmul: false,
        }
    }
}

/// GEMM: `2 · batch · m · n · k` FLOPs (one multiply and one add per term,
/// [`GemmSpec::flops`]); bytes `batch · (m·k·|A| + k·n·|B| + m·n·|C|)`, plus `m·n·|C|` more
/// per matrix when `beta ≠ 0` (C is read to be accumulated into). A shared operand
/// (stride 0) is read once.
pub fn gemm(spec: &GemmSpec, ab: DType, c: DType) -> OpCall {
    let flops = spec.flops().unwrap_or(u64::MAX);
    let per = |stride: usize, rows: usize, cols: usize, dtype: DType| {
        let matrices = if stride == 0 { 1 } else { spec.batch };
        bytes_of(dtype, rows.saturating_mul(cols)).saturating_mul(matrices as u64)
    };
    let c_passes = if spec.beta != 0.0 { 2 } else { 1 };
    let bytes = per(spec.stride_a, spec.m, spec.k, ab)
        .saturating_add(per(spec.stride_b, spec.k, spec.n, ab))
        .saturating_add(per(spec.stride_c, spec.m, spec.n, c).saturating_mul(c_passes));
    let t = |b: bool| if b { 't' } else { 'n' };
    OpCall {
        kind: "gemm",
        dtype: ab,
        shape: format!(
            "{}x{}x{}x{} {}{}",
            spec.batch,
            spec.m,
            spec.n,
            spec.k,
            t(spec.trans_a),
            t(spec.trans_b)
        ),
        flops,
        bytes,
        matmul: true,
    }
}

/// Elements a strided view reads: its shape's element count, but a broadcast (stride-0)
/// dimension re-reads the same elements, so the minimum is the number of *distinct*
/// elements: the product of the dimensions whose stride is not 0.
pub fn distinct_elements(layout: &Layout) -> usize {
    layout
        .shape
        .dims()
        .iter()
        .zip(&layout.strides)
        .filter(|(_, s)| **s != 0)
        .fold(1usize, |acc, (d, _)| acc.saturating_mul(*d))
}

/// Softmax forward, `rows × cols`: 5 FLOPs per element (max, subtract, exp, sum, divide:
/// `brrr_perf::roofline::OpCost::softmax`'s count); reads x, writes y.
pub fn softmax(kind: &'static str, rows: usize, cols: usize, x: DType, y: DType) -> OpCall {
    let e = rows.saturating_mul(cols);
    OpCall {
        kind,
        dtype: x,
        shape: format!("rows={rows} cols={cols}"),
        flops: (e as u64).saturating_mul(5),
        bytes: bytes_of(x, e).saturating_add(bytes_of(y, e)),
        matmul: false,
    }
}

/// Softmax backward `dx = scale · y ⊙ (dy − Σ dy·y)`: 5 FLOPs per element (the product and
/// sum of the dot, the subtraction, two products); reads y and dy, writes dx.
pub fn softmax_backward(rows: usize, cols: usize, dtype: DType) -> OpCall {
    let e = rows.saturating_mul(cols);
    OpCall {
        kind: "softmax_backward",
        dtype,
        shape: format!("rows={rows} cols={cols}"),
        flops: (e as u64).saturating_mul(5),
        bytes: bytes_of(dtype, e).saturating_mul(3),
        matmul: false,
    }
}

/// LayerNorm forward, `rows × cols`: 8 FLOPs per element (mean 1, variance 3, normalise 2,
/// scale and shift 2: `OpCost::layernorm`'s count); reads x, γ, β, writes y and the f32
/// `mean` and `rstd` per row.
pub fn layernorm(rows: usize, cols: usize, dtype: DType, param: DType) -> OpCall {
    let e = rows.saturating_mul(cols);
    OpCall {
        kind: "layernorm",
        dtype,
        shape: format!("rows={rows} cols={cols}"),
        flops: (e as u64).saturating_mul(8),
        bytes: bytes_of(dtype, e)
            .saturating_mul(2)
            .saturating_add(bytes_of(param, cols).saturating_mul(2))
            .saturating_add(bytes_of(DType::F32, rows).saturating_mul(2)),
        matmul: false,
    }
}

/// LayerNorm backward: 12 FLOPs per element (recompute the normalised x: 2; `γ·dy`: 1; the
/// two row sums: 2; `dγ += x̂·dy`: 2, `dβ += dy`: 1; `dx = (γdy − mean₁ − x̂·mean₂)·rstd`: 4,
/// as llm.c's `layernorm_backward` does them). Reads dy, x, γ, mean, rstd; writes dx;
/// reads and writes dγ and dβ.
pub fn layernorm_backward(rows: usize, cols: usize, dtype: DType, param: DType) -> OpCall {
    let e = rows.saturating_mul(cols);
    OpCall {
        kind: "layernorm_backward",
        dtype,
        shape: format!("rows={rows} cols={cols}"),
        flops: (e as u64).saturating_mul(12),
        bytes: bytes_of(dtype, e)
            .saturating_mul(3)
            .saturating_add(bytes_of(param, cols).saturating_mul(5))
            .saturating_add(bytes_of(DType::F32, rows).saturating_mul(2)),
        matmul: false,
    }
}

/// Cross-entropy forward over `rows × vocab` logits: 4 FLOPs per logit (max, subtract,
/// exp, sum of the log-sum-exp); reads the logits and the targets, writes one loss per row.
pub fn cross_entropy(rows: usize, vocab: usize, logits: DType, losses: DType) -> OpCall {
    let e = rows.saturating_mul(vocab);
    OpCall {
        kind: "cross_entropy",
        dtype: logits,
        shape: format!("rows={rows} vocab={vocab}"),
        flops: (e as u64).saturating_mul(4),
        bytes: bytes_of(logits, e)
            .saturating_add(bytes_of(DType::I32, rows))
            .saturating_add(bytes_of(losses, rows)),
        matmul: false,
    }
}

/// Cross-entropy backward: the softmax again (5 FLOPs per logit) and the scaling by the
/// row's loss gradient (1); reads logits, targets and dlosses, writes dlogits.
pub fn cross_entropy_backward(rows: usize, vocab: usize, logits: DType, dl: DType) -> OpCall {
    let e = rows.saturating_mul(vocab);
    OpCall {
        kind: "cross_entropy_backward",
        dtype: logits,
        shape: format!("rows={rows} vocab={vocab}"),
        flops: (e as u64).saturating_mul(6),
        bytes: bytes_of(logits, e)
            .saturating_mul(2)
            .saturating_add(bytes_of(DType::I32, rows))
            .saturating_add(bytes_of(dl, rows)),
        matmul: false,
    }
}

/// FLOPs per element of GELU's tanh form `0.5x(1 + tanh(√(2/π)(x + 0.044715x³)))`: x³ (2),
/// the product by 0.044715 (1), the sum (1), the product by √(2/π) (1), tanh (1), the
/// `1 +` (1), and the two products by 0.5 and x (2).
pub const GELU_FLOPS: u64 = 9;

/// FLOPs per element of GELU's derivative times dy: the forward's inner terms again (6),
/// `sech² = 1 − tanh²` (2), the inner derivative `√(2/π)(1 + 3·0.044715x²)` (4), and the
/// products and sums that assemble `0.5(1 + tanh) + 0.5x·sech²·inner'` and multiply by dy (6).
pub const GELU_BACKWARD_FLOPS: u64 = 18;

/// FLOPs per element of one AdamW update, counted from `AdamWParams`' formula: `g·scale`
/// (1), the two moments (3 + 4), the bias corrections (2), `√v̂ + ε` (2), the division (1),
/// the decay term and the sum (2), `p − lr·(…)` (2). The powers `β^step` are once per call.
pub const ADAMW_FLOPS: u64 = 17;

/// Fused causal attention ([`brrr_backend::Backend::attention`]), counting only the
/// visible (causal) half: per head, `T(T+1)/2` scores, each a `D`-long dot product for
/// `q·kᵀ` and again for `p·v` (4·D FLOPs), plus the softmax's 5 per score. Reads `qkv`,
/// writes `y` and the f32 `lse`. `backward` counts the recomputed scores, `dv`, `dp`,
/// `dq` and `dk` (10·D per score) and the 5 of `ds = p ⊙ (dp − Σ dy·y)`; it reads `qkv`,
/// `y`, `lse` and `dy`, and writes `dqkv`.
pub fn attention(spec: &AttentionSpec, dtype: DType, backward: bool) -> OpCall {
    let (b, h, t, d) = (spec.batch, spec.heads, spec.seq, spec.head_dim);
    let scores = (b as u64)
        .saturating_mul(h as u64)
        .saturating_mul((t as u64).saturating_mul(t as u64 + 1) / 2);
    let per_score = if backward {
        10 * d as u64 + 5
    } else {
        4 * d as u64 + 5
    };
    let y = b.saturating_mul(t).saturating_mul(h).saturating_mul(d);
    let lse = bytes_of(DType::F32, b.saturating_mul(t).saturating_mul(h));
    let bytes = if backward {
        // qkv, y, dy, lse in; dqkv out.
        bytes_of(dtype, y).saturating_mul(8).saturating_add(lse)
    } else {
        // qkv in; y and lse out.
        bytes_of(dtype, y).saturating_mul(4).saturating_add(lse)
    };
    OpCall {
        kind: if backward {
            "attention_backward"
        } else {
            "attention"
        },
        dtype,
        shape: format!("b={b} h={h} t={t} d={d}"),
        flops: scores.saturating_mul(per_score),
        bytes,
        matmul: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_counts_2mnk_and_each_operand_once() {
        let c = gemm(&GemmSpec::new(4, 5, 6), DType::F32, DType::F32);
        assert_eq!(c.flops, 2 * 4 * 5 * 6);
        assert_eq!(c.bytes, 4 * (4 * 6 + 6 * 5 + 4 * 5));
        // Accumulating reads C too; a shared B is read once for the whole batch.
        let acc = GemmSpec {
            stride_b: 0,
            ..GemmSpec::batched(3, 4, 5, 6).beta(1.0)
        };
        let c = gemm(&acc, DType::BF16, DType::F32);
        assert_eq!(c.flops, 2 * 3 * 4 * 5 * 6);
        assert_eq!(c.bytes, 2 * (3 * 24 + 30) + 4 * 3 * 20 * 2);
        assert_eq!(c.shape, "3x4x5x6 nn");
    }

    #[test]
    fn row_kernels_count_per_element_and_per_row() {
        let s = softmax("softmax", 3, 10, DType::F32, DType::F32);
        assert_eq!((s.flops, s.bytes), (5 * 30, 2 * 4 * 30));
        // bf16 activations, f32 γ/β: x and y in 2 bytes, γ and β in 4, mean and rstd f32.
        let l = layernorm(3, 10, DType::BF16, DType::F32);
        assert_eq!(l.flops, 8 * 30);
        assert_eq!(l.bytes, 2 * 2 * 30 + 2 * 4 * 10 + 2 * 4 * 3);
        let ce = cross_entropy(4, 256, DType::F32, DType::F32);
        assert_eq!(ce.flops, 4 * 4 * 256);
        assert_eq!(ce.bytes, 4 * 4 * 256 + 4 * 4 + 4 * 4);
        assert_eq!(ce.shape, "rows=4 vocab=256");
    }

    #[test]
    fn broadcast_dimensions_are_read_once() {
        let full = Layout::contiguous(vec![4, 8]);
        assert_eq!(distinct_elements(&full), 32);
        let row = Layout {
            shape: brrr_backend::Shape::new(vec![4, 8]),
            strides: vec![0, 1],
            offset: 0,
        };
        assert_eq!(distinct_elements(&row), 8);
    }
}
