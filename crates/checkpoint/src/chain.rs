//! A model seen as a chain of segments: what each costs to run and what it keeps.

use serde::{Deserialize, Serialize};

/// One link of the chain: segment `i` maps its input `x_i` to `x_{i+1}`.
///
/// Sizes are bytes, costs are any unit of time (FLOPs for a GPT), as long as a chain uses
/// one unit throughout. The memory model follows Beaumont et al. 2019 ("Optimal
/// checkpointing for heterogeneous chains"): a forward either keeps nothing, keeps its
/// input, or keeps everything its backward needs (its *stash*).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// A name for tables and figures (`h.3`, `head`).
    pub name: String,
    /// Cost of one forward.
    pub forward: f64,
    /// Cost of one backward.
    pub backward: f64,
    /// Bytes of the input `x_i` (and of its gradient `δ_i`, which has the same shape).
    pub input: u64,
    /// Bytes a stashing forward keeps for the backward *beyond its input*: the input is
    /// kept by reference (LayerNorm saves `x_i` itself), so it is counted once, under
    /// `input`.
    pub stash: u64,
    /// Bytes kept under selective recomputation (Korthikanti et al. 2022): the stash
    /// without attention's `[T, T]` scores, which the backward recomputes from q and k.
    /// `None` where the segment has nothing to recompute selectively.
    pub selective_stash: Option<u64>,
    /// Cost of recomputing what selective recomputation dropped (attention's `q·kᵀ` and
    /// softmax), paid during the backward.
    pub selective_cost: f64,
    /// Bytes alive during a forward beyond input, stash and output (temporaries).
    pub forward_extra: u64,
    /// Bytes alive during a backward beyond what the model counts (temporaries).
    pub backward_extra: u64,
}

/// A model as a sequence of segments; `x_0` (the first segment's input) is produced
/// outside the chain and held until the first segment's backward.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chain {
    /// The segments in forward order.
    pub segments: Vec<Segment>,
    /// Bytes of the last segment's output (a GPT's per-position losses). Its gradient
    /// is a scalar the last backward builds itself, counted as 0 bytes.
    pub output: u64,
}

impl Chain {
    /// Number of segments.
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    /// Whether the chain has no segment.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Bytes of `x_i` for `i` in `0..=n` (`x_n` is [`Chain::output`]).
    pub fn x_bytes(&self, i: usize) -> u64 {
        self.segments.get(i).map_or(self.output, |s| s.input)
    }

    /// Bytes of the gradient `δ_i`: the input's size, and 0 for the loss (`i = n`).
    pub fn delta_bytes(&self, i: usize) -> u64 {
        self.segments.get(i).map_or(0, |s| s.input)
    }

    /// Cost of one forward of the whole chain.
    pub fn forward_cost(&self) -> f64 {
        self.segments.iter().map(|s| s.forward).sum()
    }
}

/// The shape of a GPT as the planner sees it (no dependency on `brrr-nn`, so the
/// browser can plan without a model).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GptShape {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Attention heads per block.
    pub n_head: usize,
    /// Width `C`.
    pub n_embd: usize,
    /// Vocabulary `V` (the tied head's output width).
    pub vocab_size: usize,
    /// Sequences per micro-batch `B`.
    pub batch: usize,
    /// Tokens per sequence `T`.
    pub seq_len: usize,
    /// Bytes per activation element (4 for f32).
    pub dtype_bytes: u64,
}

impl GptShape {
    /// Errors when a size is zero or the byte counts of [`GptShape::chain`] (and their
    /// sums over the chain) do not fit in 64 bits.
    pub fn check(&self) -> Result<(), crate::PlanError> {
        let sizes = [
            self.n_layer,
            self.n_head,
            self.n_embd,
            self.vocab_size,
            self.batch,
            self.seq_len,
        ];
        if sizes.contains(&0) || self.dtype_bytes == 0 {
            return Err(crate::PlanError::Shape(format!(
                "every size must be positive: {self:?}"
            )));
        }
        let u = |x: usize| x as u128;
        let per_position =
            u(self.n_embd) * 24 + u(self.vocab_size) + u(self.n_head) * u(self.seq_len) * 2 + 16;
        let total = [
            u(self.batch),
            u(self.seq_len),
            per_position,
            u128::from(self.dtype_bytes),
            u(self.n_layer) + 2,
        ]
        .iter()
        .try_fold(1u128, |acc, &x| acc.checked_mul(x));
        match total {
            Some(t) if t < u128::from(u64::MAX / 4) => Ok(()),
            _ => Err(crate::PlanError::Shape(format!(
                "the activations of {self:?} do not fit in 64-bit byte counts"
            ))),
        }
    }

    /// The GPT as `n_layer` block segments and the head (final LayerNorm, tied
    /// projection, cross-entropy) as the last segment.
    ///
    /// What each keeps is counted from `brrr-nn`'s stashes, with `N = B·T` positions
    /// (elements; times `dtype_bytes`):
    /// - block, beyond its input `N·C`: ln_1's output (saved by `c_attn`) `N·C`, q, k, v
    ///   `3·N·C`, the softmax `B·H·T²`, attention's output (saved by `c_proj`) `N·C`, the
    ///   residual `x1` (saved by ln_2) `N·C`, ln_2's output `N·C`, GELU's input and output
    ///   `8·N·C`, and two LayerNorms' mean and 1/std `4·N`: `15·N·C + 4·N + B·H·T²`;
    /// - head, beyond its input: ln_f's output `N·C`, its statistics `2·N`, the logits
    ///   `N·V`, and the targets `N` (i32).
    ///
    /// Costs are forward FLOPs (`2·` multiply-adds of the GEMMs; backward twice that),
    /// which is what the recomputation adds. The tests in `tests/it/executor.rs` check the
    /// byte counts against `Backend::memory_stats`. Call [`GptShape::check`] first on
    /// sizes from a user: byte counts that overflow would wrap.
    pub fn chain(&self) -> Chain {
        let (b, t, c, h) = (
            self.batch as u64,
            self.seq_len as u64,
            self.n_embd as u64,
            self.n_head as u64,
        );
        let (n, v, e) = (b * t, self.vocab_size as u64, self.dtype_bytes);
        let scores = b * h * t * t;
        // GEMM FLOPs per token of a block: qkv 6C², proj 2C², MLP 16C², attention 4TC.
        let block_fwd = (n * 24 * c * c + b * 4 * t * t * c) as f64;
        let block = |i: usize| Segment {
            name: format!("h.{i}"),
            forward: block_fwd,
            backward: 2.0 * block_fwd,
            input: n * c * e,
            stash: (15 * n * c + 4 * n + scores) * e,
            selective_stash: Some((15 * n * c + 4 * n) * e),
            selective_cost: (b * 2 * t * t * c) as f64,
            // Temporaries at the forward's peak: the fused q/k/v projection while q, k, v
            // are copied out of it (its 3·N·C, less the N·C of ln_1's output already
            // counted). In the backward, the largest of three moments: the scores'
            // gradient beside one `N·C` gradient; the scores' gradient and the
            // softmax's once three `N·C` stashed tensors and LayerNorm's statistics are
            // freed; or the fused q/k/v gradient `3·N·C` going into the projection's
            // backward, which is the peak when the scores are small (heads × sequence ≤
            // width). All three fitted to and checked (to `2·N` elements) against the
            // device (`gpt_chain_measured`, seven shapes, in `tests/it/executor.rs`).
            forward_extra: 2 * n * c * e,
            backward_extra: (scores + n * c)
                .max((2 * scores).saturating_sub(3 * n * c + 2 * n))
                .max(3 * n * c)
                * e,
        };
        let mut segments: Vec<Segment> = (0..self.n_layer).map(block).collect();
        let head_fwd = (2 * n * c * v) as f64;
        segments.push(Segment {
            name: "head".into(),
            forward: head_fwd,
            backward: 2.0 * head_fwd,
            input: n * c * e,
            stash: (n * c + 2 * n + n * v) * e + n * 4,
            selective_stash: None,
            selective_cost: 0.0,
            forward_extra: 0,
            // The logits' gradient beside the logits (whose `N·C`-sized input gradient
            // is already counted as δ), and the per-position loss gradient; or, when the
            // vocabulary is no wider than the model, one more `N·C` gradient (ln_f's,
            // beside δ). Fitted to and checked against the device like the blocks'.
            backward_extra: ((n * v).saturating_sub(n * c) * e + n * 4).max(n * c * e),
        });
        Chain {
            segments,
            output: n * 4,
        }
    }
}
