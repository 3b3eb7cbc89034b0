//! What the live kernel page runs and how it counts: FLOPs from `brrr_backend::GemmSpec`,
//! minimum bytes from `brrr_perf::roofline::OpCost`, and GELU written as a chain of
//! separate `Backend` kernels to race against the fused one.

use brrr_backend::{BinaryOp, GemmSpec, UnaryOp};
use brrr_perf::roofline::OpCost;
use brrr_perf::{DType, Result};

/// One timed measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// Which kernel (a matmul version, a kernel name, a dispatch mode).
    pub kernel: String,
    /// The size: `n` of an n×n×n GEMM, or an element count.
    pub size: u64,
    /// Seconds per call.
    pub seconds: f64,
    /// FLOPs per call (0 where not counted).
    pub flops: f64,
    /// Minimum bytes per call.
    pub bytes: f64,
}

impl Measurement {
    /// `flops / seconds`.
    pub fn flops_per_s(&self) -> f64 {
        self.flops / self.seconds
    }
    /// `bytes / seconds`.
    pub fn bytes_per_s(&self) -> f64 {
        self.bytes / self.seconds
    }
}

/// FLOPs and minimum bytes of an n×n×n f32 GEMM: FLOPs from `GemmSpec::flops`
/// (`2n³`), bytes from `OpCost::gemm` (`3n²·4`).
pub fn gemm_cost(n: u64) -> Result<(f64, f64)> {
    let flops = GemmSpec::new(n as usize, n as usize, n as usize)
        .flops()
        .map_err(|e| brrr_perf::PerfError::Invalid(e.to_string()))? as f64;
    Ok((flops, OpCost::gemm(n, n, n, DType::F32)?.bytes))
}

/// The memory-bound kernels the page times, each over `n` f32 elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKernel {
    /// `y = a·x + b` (`Backend::unary` with `Affine`).
    Affine,
    /// Row softmax over rows of [`ROW_WIDTH`].
    Softmax,
    /// LayerNorm over rows of [`ROW_WIDTH`].
    LayerNorm,
}

/// Row width of the softmax and LayerNorm measurements (a GPT-2 small-ish hidden size).
pub const ROW_WIDTH: u64 = 1024;

impl RowKernel {
    /// All, in display order.
    pub const ALL: [RowKernel; 3] = [RowKernel::Affine, RowKernel::Softmax, RowKernel::LayerNorm];

    /// Name in the legend.
    pub fn name(self) -> &'static str {
        match self {
            RowKernel::Affine => "elementwise (affine)",
            RowKernel::Softmax => "softmax",
            RowKernel::LayerNorm => "layernorm",
        }
    }

    /// FLOPs and minimum bytes over `n` elements, from `brrr_perf::roofline::OpCost`.
    pub fn cost(self, n: u64) -> Result<(f64, f64)> {
        let rows = (n / ROW_WIDTH).max(1);
        let op = match self {
            RowKernel::Affine => OpCost::elementwise(n, 2.0, 1, 1, DType::F32)?,
            RowKernel::Softmax => OpCost::softmax(rows, ROW_WIDTH, DType::F32)?,
            RowKernel::LayerNorm => OpCost::layernorm(rows, ROW_WIDTH, DType::F32)?,
        };
        Ok((op.flops, op.bytes))
    }
}

/// A kernel of the unfused GELU chain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ChainKernel {
    /// `Backend::unary`.
    Unary(UnaryOp),
    /// `Backend::binary` (same shapes, no broadcast).
    Binary(BinaryOp),
}

/// One step of the chain: `buffers[output] = kernel(buffers[inputs[0]], buffers[inputs[1]])`
/// (the second input unused by unary kernels). Buffer 0 is `x`, the last is `y`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChainStep {
    /// The kernel.
    pub kernel: ChainKernel,
    /// Input buffers.
    pub inputs: [usize; 2],
    /// Output buffer (never one of the inputs: kernels do not run in place).
    pub output: usize,
}

/// Buffers the chain uses: `x`, two temporaries, `y`.
pub const CHAIN_BUFFERS: usize = 4;

/// `√(2/π)`, GELU's tanh-approximation constant (Hendrycks and Gimpel 2016).
pub const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// GELU (tanh approximation) `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, the formula of
/// `Backend::gelu`, as eight separate kernels. Each reads its inputs from memory and
/// writes its output back: eight round trips where the fused kernel makes one.
pub const GELU_UNFUSED: [ChainStep; 8] = {
    use ChainKernel::{Binary, Unary};
    const fn s(kernel: ChainKernel, a: usize, b: usize, output: usize) -> ChainStep {
        ChainStep {
            kernel,
            inputs: [a, b],
            output,
        }
    }
    [
        s(Unary(UnaryOp::Square), 0, 0, 1), // x²
        s(Binary(BinaryOp::Mul), 1, 0, 2),  // x³
        s(
            Unary(UnaryOp::Affine {
                mul: 0.044715,
                add: 0.0,
            }),
            2,
            0,
            1,
        ), // 0.044715x³
        s(Binary(BinaryOp::Add), 0, 1, 2),  // x + …
        s(
            Unary(UnaryOp::Affine {
                mul: SQRT_2_OVER_PI,
                add: 0.0,
            }),
            2,
            0,
            1,
        ), // √(2/π)(…)
        s(Unary(UnaryOp::Tanh), 1, 0, 2),   // tanh
        s(Unary(UnaryOp::Affine { mul: 0.5, add: 0.5 }), 2, 0, 1), // (1 + tanh)/2
        s(Binary(BinaryOp::Mul), 0, 1, 3),  // x · …
    ]
};

/// Minimum bytes of the unfused chain over `n` f32 elements: every step reads its inputs
/// and writes its output (`OpCost::elementwise` per step, summed).
pub fn chain_bytes(n: u64) -> Result<f64> {
    let mut total = 0.0;
    for step in GELU_UNFUSED {
        let inputs = match step.kernel {
            ChainKernel::Unary(_) => 1,
            ChainKernel::Binary(_) => 2,
        };
        total += OpCost::elementwise(n, 1.0, inputs, 1, DType::F32)?.bytes;
    }
    Ok(total)
}

/// Minimum bytes of the fused GELU over `n` f32 elements: read `x`, write `y`.
pub fn fused_gelu_bytes(n: u64) -> Result<f64> {
    Ok(OpCost::elementwise(n, 1.0, 1, 1, DType::F32)?.bytes)
}

/// The chain evaluated on one number with the backends' reference definitions
/// (`UnaryOp::apply`, `BinaryOp::apply`): what every backend's kernels must agree with.
pub fn chain_reference(x: f64) -> f64 {
    let mut regs = [x, 0.0, 0.0, 0.0];
    for step in GELU_UNFUSED {
        let [a, b] = step.inputs;
        regs[step.output] = match step.kernel {
            ChainKernel::Unary(op) => op.apply(regs[a]),
            ChainKernel::Binary(op) => op.apply(regs[a], regs[b]),
        };
    }
    regs[CHAIN_BUFFERS - 1]
}

/// Sizes of the matmul chart.
pub fn gemm_sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![32, 64, 128]
    } else {
        vec![64, 128, 256, 512, 1024]
    }
}

/// Element counts of the memory-bound and fusion charts.
pub fn row_sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![1 << 14, 1 << 16]
    } else {
        vec![1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22]
    }
}

/// Element counts of the overhead chart: from one element, where a dispatch is pure
/// overhead, to where the bytes start to cost time.
pub fn overhead_sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![1, 1 << 12, 1 << 16]
    } else {
        vec![1, 1 << 8, 1 << 12, 1 << 16, 1 << 18, 1 << 20, 1 << 22]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_is_gelu() {
        for x in [-3.0, -0.5, 0.0, 0.7, 2.5] {
            let want = 0.5
                * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh());
            assert!((chain_reference(x) - want).abs() < 1e-6, "{x}");
        }
        // Kernels do not run in place: no step writes a buffer it reads.
        assert!(GELU_UNFUSED.iter().all(|s| !s.inputs.contains(&s.output)));
    }

    #[test]
    fn the_chain_moves_9_5_times_the_bytes() {
        let n = 1 << 20;
        // 5 unary (8 B/elem) + 3 binary (12 B/elem) = 76 B/elem against 8.
        assert_eq!(chain_bytes(n).unwrap(), 76.0 * n as f64);
        assert_eq!(fused_gelu_bytes(n).unwrap(), 8.0 * n as f64);
    }

    #[test]
    fn counts_come_from_the_crates() {
        let (f, b) = gemm_cost(64).unwrap();
        assert_eq!((f, b), (2.0 * 64f64.powi(3), 3.0 * 64.0 * 64.0 * 4.0));
        let (f, b) = RowKernel::Softmax.cost(1 << 20).unwrap();
        assert_eq!((f, b), (5.0 * (1 << 20) as f64, 8.0 * (1 << 20) as f64));
        let m = Measurement {
            kernel: "x".into(),
            size: 1,
            seconds: 0.5,
            flops: 10.0,
            bytes: 4.0,
        };
        assert_eq!((m.flops_per_s(), m.bytes_per_s()), (20.0, 8.0));
    }
}
