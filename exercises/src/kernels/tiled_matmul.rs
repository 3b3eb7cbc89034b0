//! # A tiled matmul, on the CPU
//!
//! `shaders/matmul.wgsl`'s `v2_tiled` in miniature. Compute `C = A · B` (`A` is `m×k`,
//! `B` is `k×n`, row-major, f32) in `tile × tile` output tiles. For each output tile,
//! walk `k` in steps of `tile`: copy the `tile × tile` block of `A` and of `B` into
//! local arrays (the workgroup's shared memory), then accumulate from the local copies.
//!
//! Every element you read from "global memory" goes through [`Global::a`] and
//! [`Global::b`], which count. The naive kernel reads `2·m·n·k` elements; the tiled
//! one reads each element of `A` once per column of tiles and each of `B` once per row
//! of tiles: `m·k·⌈n/tile⌉ + k·n·⌈m/tile⌉`. The check wants at most that many reads,
//! and `C` equal to brrr-cpu's GEMM on random shapes that are not multiples of `tile`.
//!
//! About 35 lines.
//!
//! ## Hint
//!
//! Three loops over tiles (rows of C, columns of C, steps of `k`), and inside the `k`
//! step two copies into local arrays followed by the multiply-accumulate from them.
//! Guard every copy at the matrix edges: a partial tile reads only the elements that
//! exist and fills the rest with zeros.

use crate::check::{Outcome, all_close, f64s, rng, with_seed};
use brrr_backend::DType;
use brrr_cpu::CpuBackend;
use brrr_tensor::Tensor;
use rand::Rng;
use std::cell::Cell;

/// The operands in global memory; every read is counted.
pub struct Global<'a> {
    a: &'a [f32],
    b: &'a [f32],
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    loads: Cell<u64>,
}

impl<'a> Global<'a> {
    /// Operands `a` (`m×k`) and `b` (`k×n`), row-major; `None` if the lengths disagree.
    pub fn new(a: &'a [f32], b: &'a [f32], m: usize, n: usize, k: usize) -> Option<Self> {
        (a.len() == m * k && b.len() == k * n).then_some(Global {
            a,
            b,
            m,
            n,
            k,
            loads: Cell::new(0),
        })
    }

    /// `A[i, q]`, one global read.
    pub fn a(&self, i: usize, q: usize) -> f32 {
        self.loads.set(self.loads.get() + 1);
        self.a[i * self.k + q]
    }

    /// `B[q, j]`, one global read.
    pub fn b(&self, q: usize, j: usize) -> f32 {
        self.loads.set(self.loads.get() + 1);
        self.b[q * self.n + j]
    }

    /// Global reads so far.
    pub fn loads(&self) -> u64 {
        self.loads.get()
    }
}

/// YOUR CODE: `C = A · B` (row-major `m × n`) in `tile × tile` tiles.
#[cfg(not(feature = "solutions"))]
pub fn matmul_tiled(g: &Global, tile: usize) -> Vec<f32> {
    let _ = tile;
    vec![0.0; g.m * g.n]
}

#[cfg(feature = "solutions")]
pub use solution::matmul_tiled;

/// The reference solution, in `exercises/src/solutions/` where it stays out of sight
/// while the stub above is being written.
#[path = "../solutions/kernels/tiled_matmul.rs"]
pub mod solution;

/// Compares [`matmul_tiled`] with brrr-cpu's GEMM and counts its global reads.
pub fn check() -> Outcome {
    let (mut rng, seed) = rng();
    with_seed(compare(&mut rng), seed)
}

fn compare(rng: &mut impl Rng) -> Outcome {
    let cpu = CpuBackend::new();
    for _ in 0..4 {
        let (m, n, k) = (
            rng.random_range(1..70usize),
            rng.random_range(1..70usize),
            rng.random_range(1..70usize),
        );
        let tile = [4usize, 8, 16][rng.random_range(0..3)];
        let a: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let err = |e: brrr_backend::Error| e.to_string();
        let want = Tensor::from_f32(&cpu, &a, [m, k], DType::F32)
            .map_err(err)?
            .matmul(&Tensor::from_f32(&cpu, &b, [k, n], DType::F32).map_err(err)?)
            .map_err(err)?
            .to_vec_f32()
            .map_err(err)?;
        let g = Global::new(&a, &b, m, n, k).ok_or("operand lengths")?;
        let got = matmul_tiled(&g, tile);
        let what = format!("C of {m}x{k} · {k}x{n} in {tile}x{tile} tiles");
        all_close(&what, &f64s(&got), &f64s(&want), 1e-4, 1e-5 * k as f64)?;
        let limit = (m * k * n.div_ceil(tile) + k * n * m.div_ceil(tile)) as u64;
        if g.loads() > limit {
            return Err(format!(
                "{what}: {} global reads; tiling needs at most {limit} (naive: {})",
                g.loads(),
                2 * m * n * k
            ));
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
