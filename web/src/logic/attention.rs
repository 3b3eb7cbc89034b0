//! The kernels page's attention comparison: the composite causal attention, written with
//! the same `Tensor` ops as brrr-nn's `CausalSelfAttention` (head split, `q·kᵀ`, causal
//! softmax, `P·v`, head merge), against the backend's fused kernel
//! (`Tensor::attention`, `Backend::attention`) on one `[B, T, 3·H·D]` input; what each
//! keeps for its backward; and the sizes the page runs.
//!
//! Only brrr-cpu has the fused kernel (`Backend::has_fused_attention`), so the page runs
//! this on a `brrr_cpu::CpuBackend` whatever its other kernels run on.

use brrr_backend::{Backend, DType, Error, Result};
use brrr_nn::{attention_probs, merge_heads, split_qkv};
use brrr_tensor::{AttentionOut, Tensor};
use rand::SeedableRng;

/// Batch of the page's runs: one sequence, so the time grows with `T` alone.
pub const BATCH: usize = 1;
/// Heads of the page's runs (a small GPT's).
pub const HEADS: usize = 4;
/// Width of one head (GPT-2 small's is 64; 32 keeps a wasm run under a second).
pub const HEAD_DIM: usize = 32;
/// Largest difference between the two outputs that the page shows as agreement: both
/// compute in f32 and differ only in summation order, far below this.
pub const TOLERANCE: f64 = 1e-4;

/// Context lengths the page compares at. The composite path's probabilities grow as
/// `T²`, so the full run stops at 512 (4 MiB of probabilities at the page's sizes).
pub fn seq_lens(quick: bool) -> Vec<usize> {
    if quick {
        vec![64, 128]
    } else {
        vec![64, 128, 256, 512]
    }
}

/// The sizes of one comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionSize {
    /// `B`.
    pub batch: usize,
    /// `H`.
    pub heads: usize,
    /// `T`, queries = keys.
    pub seq: usize,
    /// `D`.
    pub head_dim: usize,
}

impl AttentionSize {
    /// The page's sizes ([`BATCH`], [`HEADS`], [`HEAD_DIM`]) at context `seq`.
    pub fn page(seq: usize) -> Self {
        AttentionSize {
            batch: BATCH,
            heads: HEADS,
            seq,
            head_dim: HEAD_DIM,
        }
    }

    /// `1/√D`, the factor GPT-2 puts on `q·kᵀ` (and `CausalSelfAttention` uses).
    pub fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// `c_attn`'s output shape `[B, T, 3·H·D]`, the input of both paths.
    pub fn qkv_dims(&self) -> [usize; 3] {
        [self.batch, self.seq, 3 * self.heads * self.head_dim]
    }
}

/// One tensor a forward keeps for its backward.
#[derive(Clone, Debug, PartialEq)]
pub struct Saved {
    /// What it is.
    pub name: &'static str,
    /// Its shape.
    pub dims: Vec<usize>,
    /// f32 bytes.
    pub bytes: u64,
}

/// `Saved` of an f32 tensor, counted with checks: sizes come from the reader's page, and
/// a product past `u64` must be an error, not a wrapped number.
fn saved_f32(name: &'static str, dims: Vec<usize>) -> Result<Saved> {
    let bytes = dims
        .iter()
        .try_fold(4u64, |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| {
            Error::invalid(
                "attention memory",
                format!("{name} {dims:?} has more bytes than u64 can count"),
            )
        })?;
    Ok(Saved { name, dims, bytes })
}

/// `a·b`, or an error naming the sizes (a shape's dimension is itself a product of the
/// page's sizes).
fn product(a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| {
        Error::invalid(
            "attention memory",
            format!("{a} × {b} does not fit a usize"),
        )
    })
}

/// What the composite path keeps for its backward (`CompositeSaved` in brrr-nn): dense
/// copies of q, k and v (`[B·H, T, D]` each) and the softmax probabilities
/// `[B·H, T, T]`, the only term quadratic in `T`.
pub fn composite_saved(s: AttentionSize) -> Result<Vec<Saved>> {
    let (bh, t, d) = (product(s.batch, s.heads)?, s.seq, s.head_dim);
    Ok(vec![
        saved_f32("q", vec![bh, t, d])?,
        saved_f32("k", vec![bh, t, d])?,
        saved_f32("v", vec![bh, t, d])?,
        saved_f32("probabilities", vec![bh, t, t])?,
    ])
}

/// What the fused path keeps (`AttentionSaved::Fused` in brrr-nn): `c_attn`'s output
/// as it is (q, k, v read in place), the output `y` and the f32 log-sum-exp of every
/// row, `[B, T, H]`, from which the backward recomputes the probabilities block by block.
pub fn fused_saved(s: AttentionSize) -> Result<Vec<Saved>> {
    let (b, t, hd) = (s.batch, s.seq, product(s.heads, s.head_dim)?);
    Ok(vec![
        saved_f32("qkv", vec![b, t, product(3, hd)?])?,
        saved_f32("y", vec![b, t, hd])?,
        saved_f32("log-sum-exp", vec![b, t, s.heads])?,
    ])
}

/// Total bytes of `saved`.
pub fn total_bytes(saved: &[Saved]) -> u64 {
    saved.iter().map(|s| s.bytes).sum()
}

/// `c_attn`'s output `[B, T, 3·H·D]` of N(0, 1) values drawn on the host from `seed`, so
/// both paths (and every backend) see the same numbers.
pub fn random_qkv<B: Backend>(backend: &B, s: AttentionSize, seed: u64) -> Result<Tensor<B>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    Tensor::randn(backend, s.qkv_dims(), DType::F32, 0.0, 1.0, &mut rng)
}

/// The composite forward's output and what it keeps.
pub struct CompositeOut<B: Backend> {
    /// `[B, T, H·D]`.
    pub y: Tensor<B>,
    /// `[B·H, T, D]` each.
    pub q: Tensor<B>,
    /// See `q`.
    pub k: Tensor<B>,
    /// See `q`.
    pub v: Tensor<B>,
    /// `[B·H, T, T]`.
    pub probs: Tensor<B>,
}

/// The composite forward, with the pieces `CausalSelfAttention::forward` uses without
/// `fused` (brrr-nn's `split_qkv`, `attention_probs`, `merge_heads`), so the page times
/// what training runs.
pub fn composite_forward<B: Backend>(qkv: &Tensor<B>, s: AttentionSize) -> Result<CompositeOut<B>> {
    let (q, k, v) = split_qkv(qkv, s.heads)?;
    let probs = attention_probs(&q, &k, s.scale(), None, s.heads)?;
    let y = merge_heads(&probs.matmul(&v)?, s.batch, s.heads)?;
    Ok(CompositeOut { y, q, k, v, probs })
}

/// The fused forward (`Tensor::attention`); an error that says so on a backend without
/// the kernel.
pub fn fused_forward<B: Backend>(qkv: &Tensor<B>, s: AttentionSize) -> Result<AttentionOut<B>> {
    if !qkv.backend().has_fused_attention() {
        return Err(Error::invalid(
            "fused attention",
            format!(
                "the {} backend has no fused attention kernel",
                qkv.backend().info().name
            ),
        ));
    }
    qkv.attention(s.heads, s.scale())
}

/// One run of both paths on the same input, as the page shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Agreement {
    /// Largest `|y_composite − y_fused|`.
    pub max_diff: f64,
    /// Bytes of the tensors the composite forward returned for its backward.
    pub composite_bytes: u64,
    /// Bytes of the fused forward's `qkv`, `y` and log-sum-exp.
    pub fused_bytes: u64,
}

/// Runs both forwards once on `qkv` and compares their outputs. The byte counts are the
/// sizes of the tensors the two runs produced, so a test can hold them against
/// [`composite_saved`] and [`fused_saved`].
pub async fn agreement<B: Backend>(qkv: &Tensor<B>, s: AttentionSize) -> Result<Agreement> {
    let c = composite_forward(qkv, s)?;
    let f = fused_forward(qkv, s)?;
    if c.y.dims() != f.y.dims() {
        return Err(Error::shape(
            "attention agreement",
            format!("composite {} against fused {}", c.y.shape(), f.y.shape()),
        ));
    }
    let a = c.y.to_host().await?.to_f32();
    let b = f.y.to_host().await?.to_f32();
    let max_diff = a
        .iter()
        .zip(&b)
        .map(|(p, q)| f64::from((p - q).abs()))
        .fold(0.0, f64::max);
    let bytes = |ts: &[&Tensor<B>]| ts.iter().map(|t| t.size_in_bytes() as u64).sum();
    Ok(Agreement {
        max_diff,
        composite_bytes: bytes(&[&c.q, &c.k, &c.v, &c.probs]),
        fused_bytes: bytes(&[qkv, &f.y, &f.lse]),
    })
}

/// One row of the page's table.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionRow {
    /// `T`.
    pub seq: usize,
    /// Seconds per composite forward.
    pub composite_s: f64,
    /// Seconds per fused forward.
    pub fused_s: f64,
    /// Both outputs and the bytes each kept.
    pub agreement: Agreement,
}

impl AttentionRow {
    /// How many times faster the fused forward is.
    pub fn speedup(&self) -> f64 {
        self.composite_s / self.fused_s
    }

    /// Whether the outputs agree within [`TOLERANCE`] (a NaN does not).
    pub fn agrees(&self) -> bool {
        self.agreement.max_diff <= TOLERANCE
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use brrr_backend::block_on;
    use brrr_cpu::CpuBackend;

    #[test]
    fn composite_and_fused_agree_on_the_cpu() {
        let cpu = CpuBackend::new();
        assert!(cpu.has_fused_attention());
        // One whole block of the fused kernel's query rows and a partial one.
        let s = AttentionSize::page(brrr_cpu::ATTENTION_QUERY_ROWS + 16);
        let qkv = random_qkv(&cpu, s, 7).unwrap();
        let a = block_on(agreement(&qkv, s)).unwrap();
        assert!(a.max_diff < TOLERANCE, "max |difference| {}", a.max_diff);
        // What the runs produced is what the formulas count.
        assert_eq!(a.composite_bytes, total_bytes(&composite_saved(s).unwrap()));
        assert_eq!(a.fused_bytes, total_bytes(&fused_saved(s).unwrap()));
        // Both are attention, not merely equal to each other: each within f32 rounding
        // of an f64 evaluation of the definition (`AttentionSpec`'s docs).
        let want = reference(&qkv.to_vec_f32().unwrap(), s);
        let composite = composite_forward(&qkv, s).unwrap().y.to_vec_f32().unwrap();
        let fused = fused_forward(&qkv, s).unwrap().y.to_vec_f32().unwrap();
        for got in [composite, fused] {
            let err = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (f64::from(*g) - w).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-5, "{err}");
        }
    }

    /// `y[b, i, h, :] = Σ_{j ≤ i} softmax_j(scale · q_i·k_j) · v_j` in f64, straight from
    /// the `[B, T, 3, H, D]` layout.
    fn reference(qkv: &[f32], s: AttentionSize) -> Vec<f64> {
        let (t, h, d) = (s.seq, s.heads, s.head_dim);
        let at = |b: usize, i: usize, part: usize, head: usize, x: usize| {
            f64::from(qkv[(((b * t + i) * 3 + part) * h + head) * d + x])
        };
        let mut y = vec![0.0; s.batch * t * h * d];
        for b in 0..s.batch {
            for head in 0..h {
                for i in 0..t {
                    let scores: Vec<f64> = (0..=i)
                        .map(|j| {
                            let dot: f64 = (0..d)
                                .map(|x| at(b, i, 0, head, x) * at(b, j, 1, head, x))
                                .sum();
                            dot * f64::from(s.scale())
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let total: f64 = scores.iter().map(|x| (x - max).exp()).sum();
                    for (j, sc) in scores.iter().enumerate() {
                        let p = (sc - max).exp() / total;
                        for x in 0..d {
                            y[((b * t + i) * h + head) * d + x] += p * at(b, j, 2, head, x);
                        }
                    }
                }
            }
        }
        y
    }

    #[test]
    fn the_composite_keeps_t_squared_probabilities() {
        let s = AttentionSize {
            batch: 2,
            heads: 3,
            seq: 100,
            head_dim: 8,
        };
        let c = composite_saved(s).unwrap();
        let probs = c.iter().find(|x| x.name == "probabilities").unwrap();
        assert_eq!(probs.bytes, 2 * 3 * 100 * 100 * 4);
        assert_eq!(
            total_bytes(&c),
            3 * (2 * 3 * 100 * 8 * 4) + 2 * 3 * 100 * 100 * 4
        );
        let f = fused_saved(s).unwrap();
        let lse = f.iter().find(|x| x.name == "log-sum-exp").unwrap();
        assert_eq!(lse.bytes, 2 * 100 * 3 * 4);
        assert_eq!(total_bytes(&f), 2 * 100 * 3 * 8 * 4 * 4 + 2 * 100 * 3 * 4);
        // Doubling T doubles the fused path's memory and about quadruples the composite's.
        let s2 = AttentionSize { seq: 200, ..s };
        assert_eq!(total_bytes(&fused_saved(s2).unwrap()), 2 * total_bytes(&f));
        let ratio = total_bytes(&composite_saved(s2).unwrap()) as f64 / total_bytes(&c) as f64;
        assert!(ratio > 3.5 && ratio < 4.0, "{ratio}");
    }

    #[test]
    fn sizes_past_u64_are_errors() {
        let s = AttentionSize {
            batch: usize::MAX,
            heads: 2,
            seq: usize::MAX,
            head_dim: 2,
        };
        assert!(composite_saved(s).is_err());
        assert!(fused_saved(s).is_err());
    }

    #[test]
    fn the_page_runs_growing_contexts() {
        let (quick, full) = (seq_lens(true), seq_lens(false));
        assert!(quick.len() < full.len());
        assert!(full.windows(2).all(|w| w[0] < w[1]));
        assert!(quick.iter().all(|t| full.contains(t)));
        assert_eq!(AttentionSize::page(64).qkv_dims(), [1, 64, 3 * 4 * 32]);
    }

    #[test]
    fn a_nan_difference_is_no_agreement() {
        let row = AttentionRow {
            seq: 64,
            composite_s: 2.0,
            fused_s: 0.5,
            agreement: Agreement {
                max_diff: f64::NAN,
                composite_bytes: 0,
                fused_bytes: 0,
            },
        };
        assert!(!row.agrees());
        assert_eq!(row.speedup(), 4.0);
    }
}
