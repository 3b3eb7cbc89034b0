//! Our own f32 GEMM for x86-64 CPUs with AVX2 and FMA, written the way BLIS and
//! OpenBLAS write theirs (Goto and van de Geijn, "Anatomy of high-performance matrix
//! multiplication", ACM TOMS 2008; Van Zee and van de Geijn, "BLIS", ACM TOMS 2015).
//!
//! # Why our own, and what it measured
//!
//! On AVX2 machines (no AVX-512) the `gemm` crate reached 113–125 GFLOP/s at n = 256 to
//! 2048 on two cores of the development machine where OpenBLAS reached 119–141, and a
//! training step spends about 80% of its time in GEMMs. This kernel is also the lesson
//! of tiling, on a CPU: a register tile, cache blocks and packing.
//!
//! Measured on one core of that machine while other builds ran (load average 3.6 on 2
//! cores; process CPU time, kernels alternating, `examples/gemm_kernels.rs`; the tile
//! alone by the ignored test `sgemm::rate::kernel_rate`):
//! - the register tile alone, for `kc` = 128 to 512, operands in L1 or A read in place
//!   from a 96-row block: 97.6–100.3 GFLOP/s, the core's FMA peak (measured 96.9 by
//!   brrr-perf's loop at another moment; the clock moves with load);
//! - whole products, square (256–2048) and at training's shapes: 57–83 GFLOP/s, which
//!   is 0.83–1.12× the `gemm` crate's speed in the same run.
//!
//! So the tile runs at the core's peak, and the rest of the time goes to moving data:
//! B's panels coming from L3 for each block of rows, a pass over C per block of `k`,
//! packing B on one thread. The `gemm` crate does no better or worse, which is why
//! [`crate::GemmKernel`] keeps it as the default.
//!
//! # The loops (outermost first)
//!
//! 1. `jc`: columns of C in blocks of [`NC`] (B's block stays in the L3 cache).
//! 2. `pc`: the shared dimension in blocks of [`KC`]. B's `KC × NC` block is *packed*:
//!    copied into panels of [`NR`] columns laid out so the kernel reads it with unit
//!    stride, whatever B's strides were (a transposed B costs nothing more).
//! 3. `ic`: rows of C in blocks of [`MC`], one task per block (the threads' split).
//!    A's `MC × KC` block is read in place (it stays in L2; see `Block::multiply`).
//! 4. `jr`, `ir`: one `MR × NR` tile of C per kernel call: 12 AVX registers hold the
//!    6 × 16 accumulators; per step of k it loads 16 values of B, broadcasts 6 of A and
//!    issues 12 FMAs, so two FMA units are busy while the loads keep up.
//!
//! # Bit-identical on every thread count
//!
//! Each element of C is computed by one kernel call per `KC` block, its products summed
//! in order of k, and the blocks added to C in order of `pc`. Which thread runs a tile
//! never changes its arithmetic, and the task split depends only on the sizes.

use crate::par;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Rows of the register tile.
const MR: usize = 6;
/// Columns of the register tile (two AVX registers of 8 floats).
const NR: usize = 16;
/// The longest shared-dimension block. Each block is one pass of reads and writes over
/// C, which for training's products (C of 2048 × 1536 floats, 12 MiB) costs more than
/// an L1 that does not quite hold B's panel: a `KC × NR` panel of B is 24 KiB, of a
/// 32 KiB L1. `k` is cut into equal blocks of at most `KC` (see [`k_block`]).
const KC: usize = 384;
/// Rows of A per block (and per task): `MC × KC` floats = 144 KiB, inside L2.
const MC: usize = 96;
/// Columns of B per block: `KC × NC` floats = 6 MiB, in the L3 cache.
const NC: usize = 4096;

/// A matrix in memory: element `(i, j)` at `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct MatRef<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

/// Whether this CPU has what the kernel needs (checked once; the standard library
/// caches the answer).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `C = alpha·A·B + beta·C` with A `m × k`, B `k × n` and C `m × n` row-major with row
/// stride `ldc`. With `beta == 0` C is not read (NaNs in it are overwritten, as BLAS
/// does). The caller has checked that the slices hold every element the strides reach,
/// and that [`available`] is true. `threaded = false` keeps it on this thread.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: MatRef,
    b: MatRef,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
    threaded: bool,
) {
    assert!(available(), "sgemm called on a CPU without AVX2 and FMA");
    assert!(m > 0 && n > 0 && k > 0 && ldc >= n && c.len() >= (m - 1) * ldc + n);
    let mut bpack = vec![0f32; KC * NC.min(n.next_multiple_of(NR))];
    let kb = k_block(k);
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(kb) {
            let kc = kb.min(k - pc);
            pack_b(b, pc, kc, jc, nc, &mut bpack);
            let block = Block {
                kc,
                jc,
                nc,
                alpha,
                // Only the first k block applies beta; later ones add to C.
                beta: if pc == 0 { Some(beta) } else { None },
                bpack: &bpack,
            };
            let rows = &mut c[..(m - 1) * ldc + n];
            let tasks = par::chunks(rows, MC * ldc);
            let run = |t: usize, ct: &mut [f32]| {
                let ic = t * MC;
                block.multiply(a, ic, MC.min(m - ic), pc, ct, ldc);
            };
            if threaded {
                par::run(tasks, run);
            } else {
                for (t, ct) in tasks.into_iter().enumerate() {
                    run(t, ct);
                }
            }
        }
    }
}

/// The block of the shared dimension for a product with `k` of it: `k` itself up to
/// [`KC`], else `k` cut into the fewest blocks of at most `KC`, of equal length (the
/// last shorter by at most one row of rounding). Depends on `k` only, so the order of
/// summation never depends on the threads.
fn k_block(k: usize) -> usize {
    k.div_ceil(k.div_ceil(KC).max(1)).max(1)
}

/// Copies `B[pc..pc+kc, jc..jc+nc]` into panels of `NR` columns: panel `j` holds, for
/// each `p`, the row `B[pc+p, jc+j·NR .. +NR]`, zero-padded past `nc`. Packing costs
/// `O(kc·nc)` against the block's `O(m·kc·nc)` flops, but with few rows it shows, so the
/// two common layouts copy whole runs of contiguous memory.
fn pack_b(b: MatRef, pc: usize, kc: usize, jc: usize, nc: usize, out: &mut [f32]) {
    for (jp, panel) in out.chunks_mut(KC * NR).take(nc.div_ceil(NR)).enumerate() {
        let j0 = jc + jp * NR;
        let width = NR.min(jc + nc - j0);
        let panel = &mut panel[..kc * NR];
        if width < NR {
            panel.fill(0.0);
        }
        if b.cs == 1 {
            // Rows of B are contiguous: one run of `width` per p.
            for (p, dst) in panel.chunks_exact_mut(NR).enumerate() {
                let start = (pc + p) * b.rs + j0;
                dst[..width].copy_from_slice(&b.data[start..start + width]);
            }
        } else if b.rs == 1 {
            // Bᵀ stored row-major (the `nt` products): columns are contiguous.
            for j in 0..width {
                let start = (j0 + j) * b.cs + pc;
                for (dst, &x) in panel.chunks_exact_mut(NR).zip(&b.data[start..start + kc]) {
                    dst[j] = x;
                }
            }
        } else {
            for (p, dst) in panel.chunks_exact_mut(NR).enumerate() {
                for (j, x) in dst[..width].iter_mut().enumerate() {
                    *x = b.data[(pc + p) * b.rs + (j0 + j) * b.cs];
                }
            }
        }
    }
}

/// One `(jc, pc)` block: B packed, and how its products go into C.
struct Block<'a> {
    kc: usize,
    jc: usize,
    nc: usize,
    alpha: f32,
    /// `Some(beta)` for the first k block (C = alpha·AB + beta·C), `None` after
    /// (C += alpha·AB).
    beta: Option<f32>,
    bpack: &'a [f32],
}

impl Block<'_> {
    /// Multiplies `A[ic..ic+mc, pc..pc+kc]` into the rows `c` (which start at C's row
    /// `ic`). A is read in place, not packed: the kernel broadcasts one element of A per
    /// row and step, so any strides do, and the block (at most `MC × KC` floats) stays
    /// in L2 while the B panels stream past. Packing A measured slower: with few
    /// columns (n = 128) there is too little work to pay for the copy.
    fn multiply(&self, a: MatRef, ic: usize, mc: usize, pc: usize, c: &mut [f32], ldc: usize) {
        let mut tile = [0f32; MR * NR];
        for jp in 0..self.nc.div_ceil(NR) {
            let bp = &self.bpack[jp * KC * NR..][..self.kc * NR];
            let j0 = self.jc + jp * NR;
            let width = NR.min(self.jc + self.nc - j0);
            for i0 in (0..mc).step_by(MR) {
                let height = MR.min(mc - i0);
                // Rows past the edge repeat the last real row; their sums are dropped.
                let rows: [usize; MR] =
                    std::array::from_fn(|i| (ic + i0 + i.min(height - 1)) * a.rs + pc * a.cs);
                kernel(self.kc, a.data, rows, a.cs, bp, &mut tile);
                for i in 0..height {
                    let row = &mut c[(i0 + i) * ldc + j0..][..width];
                    self.store(&tile[i * NR..i * NR + width], row);
                }
            }
        }
    }

    /// Writes one row of a finished tile into C.
    #[inline]
    fn store(&self, acc: &[f32], row: &mut [f32]) {
        match self.beta {
            Some(0.0) => {
                for (c, &t) in row.iter_mut().zip(acc) {
                    *c = self.alpha * t;
                }
            }
            Some(beta) => {
                for (c, &t) in row.iter_mut().zip(acc) {
                    *c = self.alpha * t + beta * *c;
                }
            }
            None => {
                for (c, &t) in row.iter_mut().zip(acc) {
                    *c += self.alpha * t;
                }
            }
        }
    }
}

/// The register tile: `tile[i][j] = Σ_p a[rows[i] + p·cs] · b[p·NR + j]` over `p < kc`.
fn kernel(
    kc: usize,
    a: &[f32],
    rows: [usize; MR],
    cs: usize,
    b: &[f32],
    tile: &mut [f32; MR * NR],
) {
    let last = rows.iter().max().copied().unwrap_or(0) + (kc - 1) * cs;
    assert!(kc > 0 && last < a.len() && b.len() >= kc * NR);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sgemm` asserts AVX2 and FMA are present before any kernel runs, and the
    // assert above guarantees every load below stays inside `a` and `b`.
    unsafe {
        kernel_avx2(kc, a.as_ptr(), rows, cs, b.as_ptr(), tile)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kc, a, rows, cs, b, tile);
        unreachable!("sgemm runs only where `available()` is true")
    }
}

/// # Safety
/// The CPU has AVX2 and FMA; `a + rows[i] + p·cs` for every `i < MR`, `p < kc` lies
/// inside A's allocation, and `b` holds `kc·NR` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_avx2(
    kc: usize,
    a: *const f32,
    rows: [usize; MR],
    cs: usize,
    b: *const f32,
    tile: &mut [f32; MR * NR],
) {
    // Twelve accumulators; LLVM keeps the fixed-size array in registers.
    let mut c = [[_mm256_setzero_ps(); 2]; MR];
    for p in 0..kc {
        // SAFETY: p < kc, so p·NR + 16 <= kc·NR; A's offsets are the caller's promise.
        let (b0, b1, ap) = unsafe {
            (
                _mm256_loadu_ps(b.add(p * NR)),
                _mm256_loadu_ps(b.add(p * NR + 8)),
                a.add(p * cs),
            )
        };
        for (ci, &r) in c.iter_mut().zip(&rows) {
            // SAFETY: as above.
            let ai = unsafe { _mm256_broadcast_ss(&*ap.add(r)) };
            ci[0] = _mm256_fmadd_ps(ai, b0, ci[0]);
            ci[1] = _mm256_fmadd_ps(ai, b1, ci[1]);
        }
    }
    for (i, ci) in c.iter().enumerate() {
        // SAFETY: row i of the tile is tile[i·NR .. i·NR + 16], inside the array.
        unsafe {
            _mm256_storeu_ps(tile.as_mut_ptr().add(i * NR), ci[0]);
            _mm256_storeu_ps(tile.as_mut_ptr().add(i * NR + 8), ci[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain triple loop in f64.
    fn reference(m: usize, n: usize, k: usize, a: MatRef, b: MatRef) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k)
                    .map(|p| {
                        f64::from(a.data[i * a.rs + p * a.cs])
                            * f64::from(b.data[p * b.rs + j * b.cs])
                    })
                    .sum();
            }
        }
        c
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn matches_a_triple_loop_on_edges_and_transposes() {
        if !available() {
            eprintln!("SKIPPED: sgemm (no AVX2+FMA on this CPU)");
            return;
        }
        for &(m, n, k) in &[
            (1, 1, 1),
            (7, 17, 3),
            (97, 33, 300),
            (13, 4100, 5),
            (200, 50, 513),
        ] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a = values(m * k, 1);
                let b = values(k * n, 2);
                let ar = if ta {
                    MatRef {
                        data: &a,
                        rs: 1,
                        cs: m,
                    }
                } else {
                    MatRef {
                        data: &a,
                        rs: k,
                        cs: 1,
                    }
                };
                let br = if tb {
                    MatRef {
                        data: &b,
                        rs: 1,
                        cs: k,
                    }
                } else {
                    MatRef {
                        data: &b,
                        rs: n,
                        cs: 1,
                    }
                };
                let want = reference(m, n, k, ar, br);
                let c0 = values(m * n, 3);
                for (alpha, beta) in [(1.0f32, 0.0f32), (0.5, 2.0)] {
                    let mut c = c0.clone();
                    sgemm(m, n, k, alpha, ar, br, beta, &mut c, n, true);
                    for i in 0..m * n {
                        let w = f64::from(alpha) * want[i] + f64::from(beta) * f64::from(c0[i]);
                        let tol = 1e-5 * (k as f64).sqrt() * (1.0 + w.abs());
                        assert!(
                            (f64::from(c[i]) - w).abs() <= tol,
                            "{m}x{n}x{k} ta={ta} tb={tb} alpha={alpha} beta={beta}: c[{i}] = {} want {w}",
                            c[i]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn beta_zero_overwrites_nan_and_threads_do_not_change_bits() {
        if !available() {
            eprintln!("SKIPPED: sgemm (no AVX2+FMA on this CPU)");
            return;
        }
        let (m, n, k) = (250, 70, 600);
        let a = values(m * k, 4);
        let b = values(k * n, 5);
        let ar = MatRef {
            data: &a,
            rs: k,
            cs: 1,
        };
        let br = MatRef {
            data: &b,
            rs: n,
            cs: 1,
        };
        let mut one = vec![f32::NAN; m * n];
        sgemm(m, n, k, 1.0, ar, br, 0.0, &mut one, n, false);
        assert!(one.iter().all(|x| x.is_finite()));
        let mut many = vec![f32::NAN; m * n];
        sgemm(m, n, k, 1.0, ar, br, 0.0, &mut many, n, true);
        assert_eq!(
            one.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            many.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
}

#[cfg(test)]
mod rate {
    use super::*;

    fn cpu_seconds() -> f64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid timespec, constant clock id.
        unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    }

    #[test]
    #[ignore = "a measurement, not a check: prints the tile's GFLOP/s; run it alone on an idle machine with `cargo test --release -p brrr-cpu kernel_rate -- --ignored --nocapture`"]
    fn kernel_rate() {
        for kc in [128, 256, 384, 512] {
            kernel_rate_at(kc);
        }
    }

    fn kernel_rate_at(kc: usize) {
        let a = vec![0.5f32; MR * kc];
        let b = vec![0.25f32; NR * kc];
        let mut tile = [0f32; MR * NR];
        let rows: [usize; MR] = std::array::from_fn(|i| i);
        let reps = 200_000;
        let t = cpu_seconds();
        for _ in 0..reps {
            kernel(kc, &a, rows, MR, &b, &mut tile);
            std::hint::black_box(&mut tile);
        }
        let s = cpu_seconds() - t;
        let flops = (2 * MR * NR * kc * reps) as f64;
        println!("kc {kc}: kernel alone (L1): {:.1} GFLOP/s", flops / s / 1e9);
        // A read in place from rows of a 96 x 256 block (row stride 384).
        let a2 = vec![0.5f32; 96 * kc];
        let t = cpu_seconds();
        for r in 0..reps {
            let i0 = (r % 16) * MR;
            let rows: [usize; MR] = std::array::from_fn(|i| (i0 + i) * kc);
            kernel(kc, &a2, rows, 1, &b, &mut tile);
            std::hint::black_box(&mut tile);
        }
        let s = cpu_seconds() - t;
        println!(
            "kc {kc}: kernel, A in place from a 96-row block: {:.1} GFLOP/s",
            flops / s / 1e9
        );
    }
}
