//! Our own f32 GEMM for x86-64 CPUs with AVX2 and FMA, written the way BLIS and
//! OpenBLAS write theirs (Goto and van de Geijn, "Anatomy of high-performance matrix
//! multiplication", ACM TOMS 2008; Van Zee and van de Geijn, "BLIS", ACM TOMS 2015).
//!
//! # Why our own, and what it measured
//!
//! On AVX2 machines (no AVX-512) the `gemm` crate reached 0.54–0.96× OpenBLAS, and a
//! training step spends about 80% of its time in GEMMs. This kernel is also the lesson
//! of tiling, on a CPU: a register tile, cache blocks and packing. It is the default
//! where AVX2 is the widest vector unit ([`crate::GemmKernel::for_this_cpu`]).
//!
//! Measured on 2 vCPUs of an AMD EPYC (Zen 3, AVX2, 32 KiB L1d and 512 KiB L2 per core,
//! shared with other tenants), f32, GFLOP/s. Square products through the backend trait
//! (`bench/cpu.sh`: `brrr bench gemm` times both kernels, the median of 5 rounds that
//! alternate with numpy's OpenBLAS 0.3.31 and torch.matmul):
//!
//! | n    | brrr sgemm | gemm crate | OpenBLAS | torch.matmul |
//! |------|-----:|-----:|-----:|-----:|
//! | 256  | 112  | 94   | 148  | 136  |
//! | 512  | 135  | 126  | 174  | 173  |
//! | 1024 | 150  | 108  | 165  | 170  |
//! | 2048 | 155  | 93   | 174  | 165  |
//!
//! and the fastest of 10 alternating rounds (`examples/gemm_kernels.rs`, with
//! numpy's OpenBLAS timed between runs: 166–185 on two threads, 90–93 on one):
//! 160–180 on two threads and 84–93 on one at 512–2048 and at every product of a
//! training step (1.0–1.5× the `gemm` crate). The tile alone runs at 86–96 GFLOP/s of
//! the core's 102 (the ignored test `sgemm::rate::kernel_rate`). Medians sit below the
//! fastest rounds by more than OpenBLAS's do: the shared machine slows some rounds by
//! up to 2×, and OpenBLAS's threads spin between calls where rayon's sleep.
//!
//! # The loops (outermost first)
//!
//! 1. `jc`: columns of C in blocks of [`NC`]. B's `k × NC` block is *packed* by all the
//!    threads first: for each block of [`KC`] rows, panels of [`NR`] columns laid out so
//!    the kernel reads them with unit stride, whatever B's strides were (a transposed B
//!    costs nothing more).
//! 2. `ic`: rows of C in blocks of about [`MC`], one task per block, as equal in tiles as
//!    can be ([`row_blocks`]). The threads meet again only at the end of the column block.
//! 3. `pc`: the shared dimension in blocks of at most [`KC`]. A's `MC × KC` block is
//!    packed into panels of [`MR`] rows (it stays in L2).
//! 4. `jr`, `ir`: one `MR × NR` tile of C per kernel call, B's panel outside A's: the
//!    `KC × NR` panel of B stays in L1 while A's panels stream from L2. 12 AVX registers
//!    hold the 6 × 16 accumulators; per step of k it loads 16 values of B, broadcasts 6
//!    of A and issues 12 FMAs, so two FMA units are busy while the loads keep up.
//!
//! # Bit-identical on every thread count
//!
//! Each element of C is computed by one kernel call per `KC` block, its products summed
//! in order of k, and the blocks added to C in order of `pc`. Which thread runs a tile
//! never changes its arithmetic, and the task split depends only on the sizes.

// Elsewhere than x86-64, `available()` is false and nothing below it is reached.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use crate::par;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Rows of the register tile.
const MR: usize = 6;
/// Columns of the register tile (two AVX registers of 8 floats).
const NR: usize = 16;
/// The longest shared-dimension block: a `KC × NR` panel of B is 16 KiB, half of a
/// 32 KiB L1, so it stays there while the kernel streams A's panels past it (BLIS's
/// Haswell and Zen configurations use the same). `k` is cut into equal blocks of at
/// most `KC` (see [`k_block`]).
const KC: usize = 256;
/// The longest block of rows of A: `MC × KC` packed floats = 144 KiB, inside a 512 KiB
/// L2 with room for B's panel and C's rows.
const MC: usize = 144;
/// Columns of B per block: `k × NC` packed floats, 8 MiB at k = 2048, in the L3 cache.
/// A wider block (4080, BLIS's) measured slower at n = 2048: every task then walks
/// 16 MiB of packed B.
const NC: usize = 1024;
/// Row blocks come in multiples of this, so that 1, 2 and 4 threads get equal shares
/// (the split depends on the sizes only, never on the thread count).
const ROW_BLOCK_MULTIPLE: usize = 4;
/// Panels of B packed per task when packing is spread over threads.
const PACK_PANELS_PER_TASK: usize = 4;

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
    let kb = k_block(k);
    // B's packed column block lives on the calling thread and is reused from product to
    // product: a fresh allocation of this size is a fresh mapping from the OS, whose
    // page faults cost 5-10% of a 256³ product.
    let mut bpack_vec = BPACK.take();
    let ncp = NC.min(n.next_multiple_of(NR));
    let bpack = cache_aligned(&mut bpack_vec, k * ncp);
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        // Every k block of B's column block is packed first, by every thread, so that
        // the threads then meet only once: each multiplies its rows through all the k
        // blocks on its own. (Packing one k block at a time puts a join of all threads
        // after each, and any thread slowed by another process stalls the rest.)
        pack_b(b, k, kb, Cols { jc, nc, ncp }, bpack, threaded);
        let tasks = row_blocks(&mut c[..(m - 1) * ldc + n], m, ldc);
        let run = |_: usize, (ic, rows, ct): (usize, usize, &mut [f32])| {
            APACK.with_borrow_mut(|apack| {
                for pc in (0..k).step_by(kb) {
                    let kc = kb.min(k - pc);
                    pack_a(a, ic, rows, pc, kc, apack);
                    let block = Block {
                        kc,
                        jc,
                        nc,
                        alpha,
                        // Only the first k block applies beta; later ones add to C.
                        beta: if pc == 0 { Some(beta) } else { None },
                        bpack: &bpack[pc * ncp..],
                    };
                    block.multiply(apack, rows, ct, ldc);
                }
            });
        };
        if threaded {
            par::run(tasks, run);
        } else {
            for (t, ct) in tasks.into_iter().enumerate() {
                run(t, ct);
            }
        }
    }
    BPACK.set(bpack_vec);
}

/// `len` floats of `v` starting on a 64-byte boundary (`v` grows as needed). Each row of
/// a packed B panel is 16 floats, one cache line when aligned; the allocator's 16-byte
/// alignment would put every other 8-float load across two lines, which costs a load
/// of each line.
fn cache_aligned(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    const LINE_FLOATS: usize = 64 / std::mem::size_of::<f32>();
    v.resize(len + LINE_FLOATS, 0.0);
    let off = v.as_ptr().align_offset(64).min(LINE_FLOATS);
    &mut v[off..off + len]
}

thread_local! {
    /// Each thread's packed block of A, reused from product to product.
    static APACK: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The calling thread's packed block of B, likewise.
    static BPACK: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The block of the shared dimension for a product with `k` of it: `k` itself up to
/// [`KC`], else `k` cut into the fewest blocks of at most `KC`, of equal length (the
/// last shorter by at most one row of rounding). Depends on `k` only, so the order of
/// summation never depends on the threads.
fn k_block(k: usize) -> usize {
    k.div_ceil(k.div_ceil(KC).max(1)).max(1)
}

/// C's rows cut into blocks, one per task: `(first row, rows, the rows of c)`. The
/// blocks are a multiple of [`ROW_BLOCK_MULTIPLE`] in number, each at most about [`MC`]
/// rows, and hold whole tiles, as equal in number as they can be: 1024 rows (171 tiles)
/// in 8 blocks are 21 or 22 tiles each, so two threads get 85 and 86 tiles, where blocks
/// of 132 rows would leave a last block of 100 and a 528 / 496 split. The cut depends
/// on `m` only, never on the thread count.
fn row_blocks(c: &mut [f32], m: usize, ldc: usize) -> Vec<(usize, usize, &mut [f32])> {
    let tiles = m.div_ceil(MR);
    let blocks = m
        .div_ceil(MC)
        .next_multiple_of(ROW_BLOCK_MULTIPLE)
        .min(tiles);
    let mut out = Vec::with_capacity(blocks);
    let mut rest = c;
    let mut start = 0;
    for b in 1..=blocks {
        let end = (b * tiles / blocks * MR).min(m);
        // The last block's slice ends at C's last element, not a whole row stride on.
        let len = if end == m {
            rest.len()
        } else {
            (end - start) * ldc
        };
        let (block, tail) = rest.split_at_mut(len);
        out.push((start, end - start, block));
        rest = tail;
        start = end;
    }
    out
}

/// Copies `B[.., jc..jc+nc]` into `out`, one block per `kb` rows of B, block `pc` at
/// `out[pc · ncp..]`. Each block is panels of `NR`
/// columns: panel `j` holds, for each `p`, the row `B[pc+p, jc+j·NR .. +NR]`,
/// zero-padded past `nc`. Packing costs `O(k·nc)` against the product's `O(m·k·nc)`
/// flops, but with few rows it shows, so the two common layouts copy whole runs of
/// contiguous memory, and the panels are shared out among the threads.
fn pack_b(b: MatRef, k: usize, kb: usize, cols: Cols, out: &mut [f32], threaded: bool) {
    let Cols { jc, nc, ncp } = cols;
    let panels_per_block = nc.div_ceil(NR);
    let mut tasks: Vec<Vec<PanelJob>> = Vec::new();
    let mut rest = out;
    for pc in (0..k).step_by(kb) {
        let kc = kb.min(k - pc);
        let (block, tail) = rest.split_at_mut(kc * ncp);
        rest = tail;
        for (jp, panel) in block.chunks_mut(kc * NR).take(panels_per_block).enumerate() {
            match tasks.last_mut() {
                Some(t) if t.len() < PACK_PANELS_PER_TASK => {}
                _ => tasks.push(Vec::new()),
            }
            if let Some(t) = tasks.last_mut() {
                t.push(PanelJob {
                    pc,
                    kc,
                    j0: jc + jp * NR,
                    panel,
                });
            }
        }
    }
    let run = |_: usize, jobs: Vec<PanelJob>| {
        for j in jobs {
            pack_b_panel(b, j.pc, j.kc, j.j0, NR.min(jc + nc - j.j0), j.panel);
        }
    };
    if threaded {
        par::run(tasks, run);
    } else {
        for (t, jobs) in tasks.into_iter().enumerate() {
            run(t, jobs);
        }
    }
}

/// A block of B's columns: `jc .. jc + nc`, packed `ncp` wide (the widest block, in
/// whole panels).
#[derive(Clone, Copy)]
struct Cols {
    jc: usize,
    nc: usize,
    ncp: usize,
}

/// One panel for [`pack_b`] to fill: rows `pc .. pc + kc`, columns from `j0`.
struct PanelJob<'a> {
    pc: usize,
    kc: usize,
    j0: usize,
    panel: &'a mut [f32],
}

/// One panel of [`pack_b`]: columns `j0 .. j0 + width` of rows `pc .. pc + kc`.
fn pack_b_panel(b: MatRef, pc: usize, kc: usize, j0: usize, width: usize, panel: &mut [f32]) {
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

/// Copies `A[ic..ic+mc, pc..pc+kc]` into panels of `MR` rows: panel `t` holds, for each
/// `p`, the column `A[ic+t·MR .. +MR, pc+p]`, zero-padded past `mc`. The kernel then reads
/// A as one contiguous stream: read in place, six rows of a row-major A a power of two
/// apart fall into the same L1 set and evict each other (and the B panel).
fn pack_a(a: MatRef, ic: usize, mc: usize, pc: usize, kc: usize, out: &mut Vec<f32>) {
    let tiles = mc.div_ceil(MR);
    out.resize(tiles * MR * kc, 0.0);
    for (t, panel) in out.chunks_exact_mut(MR * kc).enumerate() {
        let i0 = ic + t * MR;
        let height = MR.min(ic + mc - i0);
        if height < MR {
            panel.fill(0.0);
        }
        if a.rs == 1 {
            // Aᵀ stored row-major (the `tn` products): a column of the tile is contiguous.
            for (p, dst) in panel.chunks_exact_mut(MR).enumerate() {
                let start = (pc + p) * a.cs + i0;
                if height == MR {
                    // A copy of constant length: six moves, not a call to memcpy.
                    for (d, &x) in dst.iter_mut().zip(&a.data[start..start + MR]) {
                        *d = x;
                    }
                } else {
                    dst[..height].copy_from_slice(&a.data[start..start + height]);
                }
            }
        } else if a.cs == 1 && height == MR {
            // Row-major A: six rows read side by side, the panel written in order.
            let rows: [&[f32]; MR] = std::array::from_fn(|i| &a.data[(i0 + i) * a.rs + pc..][..kc]);
            for (p, dst) in panel.chunks_exact_mut(MR).enumerate() {
                for (d, row) in dst.iter_mut().zip(&rows) {
                    *d = row[p];
                }
            }
        } else {
            for i in 0..height {
                let row = (i0 + i) * a.rs + pc * a.cs;
                for (p, dst) in panel.chunks_exact_mut(MR).enumerate() {
                    dst[i] = a.data[row + p * a.cs];
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
    /// Multiplies the packed rows `apack` (`mc` of them) into the rows `c`. The loop over
    /// B's panels is outside the loop over A's, so one `KC × NR` panel of B stays in L1
    /// while A's panels stream from L2 (BLIS's order).
    fn multiply(&self, apack: &[f32], mc: usize, c: &mut [f32], ldc: usize) {
        let mut tile = [0f32; MR * NR];
        for jp in 0..self.nc.div_ceil(NR) {
            let bp = &self.bpack[jp * self.kc * NR..][..self.kc * NR];
            let j0 = self.jc + jp * NR;
            let width = NR.min(self.jc + self.nc - j0);
            for (t, ap) in apack.chunks_exact(MR * self.kc).enumerate() {
                let i0 = t * MR;
                let height = MR.min(mc - i0);
                if height == MR && width == NR {
                    let out = &mut c[i0 * ldc + j0..][..(MR - 1) * ldc + NR];
                    kernel(
                        self.kc,
                        ap,
                        bp,
                        Store::Into(out, ldc, self.alpha, self.beta),
                    );
                    continue;
                }
                // An edge tile: computed whole, its real part copied into C.
                kernel(self.kc, ap, bp, Store::Tile(&mut tile));
                for i in 0..height {
                    let row = &mut c[(i0 + i) * ldc + j0..][..width];
                    self.store(&tile[i * NR..i * NR + width], row);
                }
            }
        }
    }

    /// Writes one row of a finished edge tile into C, with the arithmetic of the
    /// kernel's own store (`alpha·t + beta·c`, each product rounded, no FMA).
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

/// Where the kernel puts its tile.
enum Store<'a> {
    /// Into a local `MR × NR` tile, as is (edge tiles).
    Tile(&'a mut [f32; MR * NR]),
    /// Into C's rows (`MR` rows of stride `ldc`, each `NR` long): `c = alpha·t + beta·c`,
    /// `c = alpha·t` for `Some(0)` (C not read), `c += alpha·t` for `None`.
    Into(&'a mut [f32], usize, f32, Option<f32>),
}

/// The register tile: `t[i][j] = Σ_p a[p·MR + i] · b[p·NR + j]` over `p < kc`, both
/// operands packed, stored as `store` says.
fn kernel(kc: usize, a: &[f32], b: &[f32], store: Store) {
    assert!(kc > 0 && a.len() >= kc * MR && b.len() >= kc * NR);
    if let Store::Into(c, ldc, _, _) = &store {
        assert!(c.len() > (MR - 1) * ldc + NR - 1);
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sgemm` asserts AVX2 and FMA are present before any kernel runs, and the
    // asserts above guarantee every load and store below stays inside `a`, `b` and C.
    unsafe {
        kernel_avx2(kc, a.as_ptr(), b.as_ptr(), store)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kc, a, b, store);
        unreachable!("sgemm runs only where `available()` is true")
    }
}

/// Steps of the shared dimension before the end at which the kernel asks for C's rows.
const C_AHEAD: usize = 24;

/// Steps `range` of the register tile: `acc[i] += a[p·MR + i] · b[p·NR ..][..16]`.
///
/// # Safety
/// The CPU has AVX2 and FMA; `a` holds `range.end·MR` floats and `b` `range.end·NR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn steps(
    acc: &mut [[__m256; 2]; MR],
    a: *const f32,
    b: *const f32,
    range: std::ops::Range<usize>,
) {
    // Pointers stepped along, rather than `p·NR` each time: no multiplication (and no
    // overflow check in debug builds) in the loop.
    // SAFETY: range.start <= range.end, so both offsets stay inside a and b.
    let (mut ap, mut bp) = unsafe { (a.add(range.start * MR), b.add(range.start * NR)) };
    for _ in range {
        // SAFETY: this step's 16 floats of B and 6 of A lie before range.end (above).
        let (b0, b1) = unsafe { (_mm256_loadu_ps(bp), _mm256_loadu_ps(bp.add(8))) };
        for (i, ci) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let ai = unsafe { _mm256_broadcast_ss(&*ap.add(i)) };
            ci[0] = _mm256_fmadd_ps(ai, b0, ci[0]);
            ci[1] = _mm256_fmadd_ps(ai, b1, ci[1]);
        }
        // SAFETY: at most one past the end of the step range, as `add` allows.
        unsafe {
            ap = ap.add(MR);
            bp = bp.add(NR);
        }
    }
}

/// # Safety
/// The CPU has AVX2 and FMA; `a` holds `kc·MR` floats, `b` holds `kc·NR`, and a
/// `Store::Into` slice holds `(MR-1)·ldc + NR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_avx2(kc: usize, a: *const f32, b: *const f32, store: Store) {
    // Twelve accumulators; LLVM keeps the fixed-size array in registers.
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    // C's rows are needed only at the end: they are asked for `C_AHEAD` steps before
    // it, so that their misses overlap the last steps' arithmetic. Asked for earlier,
    // the rows of a C whose stride is a multiple of 4 KiB share one L1 set with each
    // other and with B's panel, and are evicted again before they are used.
    let ahead = kc.saturating_sub(C_AHEAD);
    // SAFETY: both ranges lie inside 0..kc (the caller's promise covers them).
    unsafe { steps(&mut acc, a, b, 0..ahead) };
    if let Store::Into(c, ldc, _, _) = &store {
        for i in 0..MR {
            // SAFETY: row i of the tile lies inside `c` (the caller's promise).
            let row = unsafe { c.as_ptr().add(i * ldc) };
            _mm_prefetch::<_MM_HINT_T0>(row.cast());
            // SAFETY: as above; NR - 1 is the row's last element.
            _mm_prefetch::<_MM_HINT_T0>(unsafe { row.add(NR - 1) }.cast());
        }
    }
    // SAFETY: as above.
    unsafe { steps(&mut acc, a, b, ahead..kc) };
    match store {
        Store::Tile(tile) => {
            for (i, ci) in acc.iter().enumerate() {
                // SAFETY: row i of the tile is tile[i·NR .. i·NR + 16], inside the array.
                unsafe {
                    _mm256_storeu_ps(tile.as_mut_ptr().add(i * NR), ci[0]);
                    _mm256_storeu_ps(tile.as_mut_ptr().add(i * NR + 8), ci[1]);
                }
            }
        }
        Store::Into(c, ldc, alpha, beta) => {
            let va = _mm256_set1_ps(alpha);
            for (i, ci) in acc.iter().enumerate() {
                for (h, &t) in ci.iter().enumerate() {
                    // SAFETY: row i, half h: c[i·ldc + 8h .. + 8], inside `c`.
                    let at = unsafe { c.as_mut_ptr().add(i * ldc + 8 * h) };
                    let scaled = _mm256_mul_ps(va, t);
                    // SAFETY: `at` holds 8 floats (above).
                    let v = unsafe {
                        match beta {
                            Some(0.0) => scaled,
                            Some(beta) => _mm256_add_ps(
                                scaled,
                                _mm256_mul_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(at)),
                            ),
                            None => _mm256_add_ps(_mm256_loadu_ps(at), scaled),
                        }
                    };
                    // SAFETY: as above.
                    unsafe { _mm256_storeu_ps(at, v) };
                }
            }
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
    fn row_blocks_cover_c_in_whole_tiles_of_nearly_equal_count() {
        for (m, ldc) in [
            (1, 3),
            (7, 7),
            (256, 300),
            (1024, 1024),
            (2048, 2048),
            (1000, 999),
        ] {
            let mut c = vec![0f32; (m - 1) * ldc + ldc.min(5)];
            let len = c.len();
            let blocks = row_blocks(&mut c, m, ldc);
            assert!(
                blocks.len().is_multiple_of(ROW_BLOCK_MULTIPLE) || blocks.len() == m.div_ceil(MR)
            );
            let (mut next, mut elems) = (0, 0);
            let tiles: Vec<usize> = blocks
                .iter()
                .map(|(start, rows, slice)| {
                    assert_eq!(*start, next, "m {m}: blocks are consecutive");
                    assert!(*rows > 0 && (start + rows == m || rows % MR == 0));
                    next += rows;
                    elems += slice.len();
                    rows.div_ceil(MR)
                })
                .collect();
            assert_eq!((next, elems), (m, len), "m {m}: every row once");
            let (lo, hi) = (tiles.iter().min().unwrap(), tiles.iter().max().unwrap());
            assert!(hi - lo <= 1, "m {m}: tiles per block {tiles:?}");
            assert!(blocks.iter().all(|b| b.1 <= MC + MR), "m {m}");
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
        let reps = 200_000;
        let t = cpu_seconds();
        for _ in 0..reps {
            kernel(kc, &a, &b, Store::Tile(&mut tile));
            std::hint::black_box(&mut tile);
        }
        let s = cpu_seconds() - t;
        let flops = (2 * MR * NR * kc * reps) as f64;
        println!("kc {kc}: kernel alone (L1): {:.1} GFLOP/s", flops / s / 1e9);
        // A's panels streamed from a packed 144-row block (in L2), stored into C.
        let a2 = vec![0.5f32; 144 * kc];
        let mut c = vec![0f32; MR * 1024];
        let t = cpu_seconds();
        for r in 0..reps {
            let ap = &a2[(r % 24) * MR * kc..][..MR * kc];
            kernel(kc, ap, &b, Store::Into(&mut c, 1024, 1.0, None));
            std::hint::black_box(&mut c);
        }
        let s = cpu_seconds() - t;
        println!(
            "kc {kc}: kernel, A's panels from a 144-row block, into C: {:.1} GFLOP/s",
            flops / s / 1e9
        );
    }
}
