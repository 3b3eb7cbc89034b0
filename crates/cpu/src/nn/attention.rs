//! Fused causal self-attention ([`brrr_backend::Backend::attention`]), f32.
//!
//! The composite path (batched GEMMs and a softmax kernel) first copies q, k and v out
//! of c_attn's `[B, T, 3, H, D]` output into `[B·H, T, D]` tensors, materialises every
//! head's `[T, T]` scores and probabilities, and copies the output back to `[B, T, H·D]`.
//! Here each task takes one block of [`ROWS`] query rows of one sequence and, head by
//! head, multiplies q, k and v *in place* (the `gemm` crate takes any row and column
//! stride), keeps only a `ROWS × T` block of scores in scratch, and writes y into its
//! final layout. The log-sum-exp of each row is kept so that the backward recomputes
//! the probabilities one block at a time (FlashAttention-2, Dao 2023, Algorithm 2,
//! with a whole row of keys per block, so no online rescaling is needed).
//!
//! Causality is also used for speed: rows `i0..i1` see keys `0..i1` only, so the
//! products of later key blocks are never computed.
//!
//! Determinism: a task's work runs in order on one thread, and tasks are cut by the
//! problem's sizes only, so results are the same bits on any number of threads.

use crate::check;
use crate::gemm::GemmScalar;
use crate::par;
use crate::reduce::{dot, max, sum};
use crate::scalar::exp_f32;
use brrr_backend::{AttentionSpec, HostData, Result};

/// Query rows per block. The block's scores (`ROWS × T` f32, twice in the backward)
/// are the only scratch that grows with the context: 64 KiB per 256 keys.
pub(crate) const ROWS: usize = 64;

/// A strided matrix inside a slice: element `(i, j)` is at `off + i·rs + j·cs`.
#[derive(Clone, Copy, Debug)]
struct View {
    off: usize,
    rs: usize,
    cs: usize,
}

impl View {
    fn rows(off: usize, rs: usize) -> Self {
        View { off, rs, cs: 1 }
    }
    /// The same memory read as the transpose.
    fn t(self) -> Self {
        View {
            off: self.off,
            rs: self.cs,
            cs: self.rs,
        }
    }
    /// One past the last element a `rows × cols` matrix reads (`off` if it is empty).
    fn end(self, rows: usize, cols: usize) -> usize {
        if rows == 0 || cols == 0 {
            return self.off;
        }
        self.off + (rows - 1) * self.rs + (cols - 1) * self.cs + 1
    }
}

/// `c = alpha · a · b` (or `c += ...` when `accumulate`), `a` m×k, `b` k×n, `c` m×n,
/// each a [`View`] into its slice, on this thread.
fn matmul(
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    (a, av): (&[f32], View),
    (b, bv): (&[f32], View),
    (c, cv): (&mut [f32], View),
    accumulate: bool,
) {
    // The views are computed by this module from checked sizes; one reaching past its
    // slice is a bug here, so it stops the program instead of reading out of bounds.
    assert!(av.end(m, k) <= a.len(), "attention: A view out of bounds");
    assert!(bv.end(k, n) <= b.len(), "attention: B view out of bounds");
    assert!(cv.end(m, n) <= c.len(), "attention: C view out of bounds");
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    // SAFETY: `gemm` reads A at `off + i·rs + p·cs` for i < m, p < k (B likewise for
    // p < k, j < n) and writes C at `off + i·rs + j·cs` for i < m, j < n; the asserts
    // above keep every such index inside its slice. C is a `&mut` slice, so it aliases
    // neither A nor B. In the crate's convention `dst = alpha·dst + beta·lhs·rhs`: its
    // alpha (1, read only when `accumulate`) is the factor on C, its beta ours.
    unsafe {
        <f32 as GemmScalar>::crate_gemm()(
            m,
            n,
            k,
            c.as_mut_ptr().add(cv.off),
            cv.cs as isize,
            cv.rs as isize,
            accumulate,
            a.as_ptr().add(av.off),
            av.cs as isize,
            av.rs as isize,
            b.as_ptr().add(bv.off),
            bv.cs as isize,
            bv.rs as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            gemm_common::Parallelism::None,
        );
    }
}

/// Where head `h`'s q, k and v start in sequence `b` of `qkv`, and the row stride.
struct QkvViews {
    q: View,
    k: View,
    v: View,
}

fn qkv_views(spec: &AttentionSpec, b: usize, h: usize) -> QkvViews {
    let (t, hd, d) = (spec.seq, spec.heads * spec.head_dim, spec.head_dim);
    let rs = 3 * hd;
    let base = b * t * rs + h * d;
    QkvViews {
        q: View::rows(base, rs),
        k: View::rows(base + hd, rs),
        v: View::rows(base + 2 * hd, rs),
    }
}

/// One task of the forward: rows `i0..i0 + rows` of sequence `b`, every head.
struct Block<'a> {
    b: usize,
    i0: usize,
    y: &'a mut [f32],
    lse: &'a mut [f32],
}

pub(crate) fn attention(
    spec: &AttentionSpec,
    qkv: &HostData,
    y: &mut HostData,
    lse: &mut HostData,
) -> Result<()> {
    const OP: &str = "attention";
    let (n_qkv, n_y, n_lse) = spec.lens(OP)?;
    let qkv = check::f32s(OP, qkv, n_qkv)?;
    let y = check::f32s_mut(OP, y, n_y)?;
    let lse = check::f32s_mut(OP, lse, n_lse)?;
    if n_y == 0 {
        return Ok(());
    }
    let (t, h, d) = (spec.seq, spec.heads, spec.head_dim);
    let mut blocks = Vec::new();
    let (mut y, mut lse) = (y, lse);
    for b in 0..spec.batch {
        for i0 in (0..t).step_by(ROWS) {
            let rows = ROWS.min(t - i0);
            let (yb, y_rest) = std::mem::take(&mut y).split_at_mut(rows * h * d);
            let (lb, l_rest) = std::mem::take(&mut lse).split_at_mut(rows * h);
            (y, lse) = (y_rest, l_rest);
            blocks.push(Block {
                b,
                i0,
                y: yb,
                lse: lb,
            });
        }
    }
    par::run(blocks, |_, block| forward_block(spec, qkv, block));
    Ok(())
}

fn forward_block(spec: &AttentionSpec, qkv: &[f32], blk: Block<'_>) {
    let (h, d) = (spec.heads, spec.head_dim);
    let rows = blk.y.len() / (h * d);
    let keys = blk.i0 + rows; // causal: the block's last row sees keys 0..=i0+rows-1
    let mut s = vec![0f32; rows * keys];
    let sv = View::rows(0, keys);
    for head in 0..h {
        let v = qkv_views(spec, blk.b, head);
        let q_blk = View::rows(v.q.off + blk.i0 * v.q.rs, v.q.rs);
        // s = scale · q kᵀ over the visible keys.
        let dims = (rows, keys, d);
        matmul(
            dims,
            spec.scale,
            (qkv, q_blk),
            (qkv, v.k.t()),
            (&mut s, sv),
            false,
        );
        let lse = &mut *blk.lse;
        par::simd(
            #[inline(always)]
            || {
                for (r, row) in s.chunks_mut(keys).enumerate() {
                    lse[r * h + head] = softmax_row(row, blk.i0 + r + 1);
                }
            },
        );
        // y = p v, written straight into [rows, H, D].
        let yv = View::rows(head * d, h * d);
        matmul(
            (rows, d, keys),
            1.0,
            (&s, sv),
            (qkv, v.v),
            (blk.y, yv),
            false,
        );
    }
}

/// Softmax of the first `visible` scores of `row` in place (the rest set to 0);
/// returns their log-sum-exp.
#[inline(always)]
fn softmax_row(row: &mut [f32], visible: usize) -> f32 {
    let (z, masked) = row.split_at_mut(visible);
    // Subtracting the maximum keeps exp() from overflowing (softmax is shift-invariant).
    let m = max(z);
    for x in z.iter_mut() {
        *x = exp_f32(*x - m);
    }
    let l = sum(z);
    let inv = 1.0 / l;
    for x in z.iter_mut() {
        *x *= inv;
    }
    masked.fill(0.0);
    m + l.ln()
}

/// The forward's saved tensors and the output gradient, as slices.
struct Saved<'a> {
    qkv: &'a [f32],
    y: &'a [f32],
    lse: &'a [f32],
    dy: &'a [f32],
}

pub(crate) fn attention_backward(
    spec: &AttentionSpec,
    qkv: &HostData,
    y: &HostData,
    lse: &HostData,
    dy: &HostData,
    dqkv: &mut HostData,
) -> Result<()> {
    const OP: &str = "attention_backward";
    let (n_qkv, n_y, n_lse) = spec.lens(OP)?;
    let saved = Saved {
        qkv: check::f32s(OP, qkv, n_qkv)?,
        y: check::f32s(OP, y, n_y)?,
        lse: check::f32s(OP, lse, n_lse)?,
        dy: check::f32s(OP, dy, n_y)?,
    };
    let dqkv = check::f32s_mut(OP, dqkv, n_qkv)?;
    if n_y == 0 {
        return Ok(());
    }
    // One task per sequence: k and v gradients sum over all of its query rows.
    let per_seq = n_qkv / spec.batch;
    par::run(par::chunks(dqkv, per_seq), |b, dqkv_b| {
        let mut scratch = Scratch::new(spec.seq);
        for head in 0..spec.heads {
            backward_head(spec, &saved, b, head, dqkv_b, &mut scratch);
        }
    });
    Ok(())
}

/// A task's scratch: probabilities and their gradient for one row block, and
/// `Σ_d dy·y` per row.
struct Scratch {
    p: Vec<f32>,
    dp: Vec<f32>,
    delta: Vec<f32>,
}

impl Scratch {
    fn new(t: usize) -> Self {
        let n = ROWS.min(t) * t;
        Scratch {
            p: vec![0.0; n],
            dp: vec![0.0; n],
            delta: vec![0.0; t],
        }
    }
}

/// The gradients of one head of sequence `b`, written into that sequence's `dqkv`.
///
/// With `p = softmax(s)` and `s = scale · q kᵀ` (Dao 2023, eq. in §2.2 and Algorithm 2):
/// `dv = pᵀ dy`, `dp = dy vᵀ`, `ds = p ⊙ (dp − δ)` with `δ_i = Σ_d dy_i·y_i`
/// (= `Σ_j p_ij dp_ij`), `dq = scale · ds k` and `dk = scale · dsᵀ q`.
fn backward_head(
    spec: &AttentionSpec,
    sv: &Saved<'_>,
    b: usize,
    head: usize,
    dqkv: &mut [f32],
    sc: &mut Scratch,
) {
    let (t, h, d) = (spec.seq, spec.heads, spec.head_dim);
    let hd = h * d;
    let v = qkv_views(spec, b, head);
    // The same views into this sequence's dqkv (which starts at sequence b).
    let g = qkv_views(spec, 0, head);
    let dy_v = View::rows(b * t * hd + head * d, hd);
    par::simd(
        #[inline(always)]
        || {
            for i in 0..t {
                let at = dy_v.off + i * hd;
                sc.delta[i] = dot(&sv.dy[at..at + d], &sv.y[at..at + d]);
            }
        },
    );
    // The last block first: it sees every key, so its dk and dv products overwrite
    // this head's gradients and the earlier (shorter) blocks accumulate.
    let starts: Vec<usize> = (0..t).step_by(ROWS).collect();
    for (n, &i0) in starts.iter().rev().enumerate() {
        let rows = ROWS.min(t - i0);
        let keys = i0 + rows;
        let acc = n > 0;
        let pv = View::rows(0, keys);
        let q_blk = View::rows(v.q.off + i0 * v.q.rs, v.q.rs);
        let dy_blk = View::rows(dy_v.off + i0 * hd, hd);
        let (p, dp) = (&mut sc.p[..rows * keys], &mut sc.dp[..rows * keys]);
        // p = exp(scale · q kᵀ − lse), 0 above the diagonal.
        matmul(
            (rows, keys, d),
            spec.scale,
            (sv.qkv, q_blk),
            (sv.qkv, v.k.t()),
            (p, pv),
            false,
        );
        // Row r of the block has its log-sum-exp at lse[r·H].
        let lse = &sv.lse[(b * t + i0) * h + head..];
        par::simd(
            #[inline(always)]
            || probs_from_lse(p, keys, i0, lse, h),
        );
        // dv (+)= pᵀ dy.
        let dv = View::rows(g.v.off, g.v.rs);
        matmul(
            (keys, d, rows),
            1.0,
            (p, pv.t()),
            (sv.dy, dy_blk),
            (dqkv, dv),
            acc,
        );
        // dp = dy vᵀ, then ds = p ⊙ (dp − δ) in place.
        matmul(
            (rows, keys, d),
            1.0,
            (sv.dy, dy_blk),
            (sv.qkv, v.v.t()),
            (dp, pv),
            false,
        );
        let delta = &sc.delta[i0..i0 + rows];
        par::simd(
            #[inline(always)]
            || ds_in_place(dp, p, keys, delta),
        );
        // dq = scale · ds k (each query row is in exactly one block: overwrite).
        let dq = View::rows(g.q.off + i0 * g.q.rs, g.q.rs);
        matmul(
            (rows, d, keys),
            spec.scale,
            (dp, pv),
            (sv.qkv, v.k),
            (dqkv, dq),
            false,
        );
        // dk (+)= scale · dsᵀ q.
        let dk = View::rows(g.k.off, g.k.rs);
        matmul(
            (keys, d, rows),
            spec.scale,
            (dp, pv.t()),
            (sv.qkv, q_blk),
            (dqkv, dk),
            acc,
        );
    }
}

/// Rows `i0..` of a block of scores `p` (`keys` wide) into probabilities
/// `exp(s − lse[r·stride])` in place, 0 above the diagonal.
#[inline(always)]
fn probs_from_lse(p: &mut [f32], keys: usize, i0: usize, lse: &[f32], stride: usize) {
    for (r, row) in p.chunks_mut(keys).enumerate() {
        let (z, masked) = row.split_at_mut(i0 + r + 1);
        let l = lse[r * stride];
        for x in z.iter_mut() {
            *x = exp_f32(*x - l);
        }
        masked.fill(0.0);
    }
}

/// `ds = p ⊙ (dp − δ_r)`, written over `dp` (rows `keys` wide).
#[inline(always)]
fn ds_in_place(dp: &mut [f32], p: &[f32], keys: usize, delta: &[f32]) {
    for (r, (dr, pr)) in dp.chunks_mut(keys).zip(p.chunks(keys)).enumerate() {
        for (x, &pj) in dr.iter_mut().zip(pr) {
            *x = pj * (*x - delta[r]);
        }
    }
}
