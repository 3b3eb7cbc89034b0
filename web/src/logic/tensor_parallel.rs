//! What the tensor-parallelism page shows: how one transformer block's matrices are
//! split over `t` ranks (Megatron-LM), what each rank holds, and what it sends per block
//! and pass, with and without sequence parallelism. Every count comes from
//! `brrr_perf::tensor_parallel`, the formulas `brrr-tp`'s tests hold a real run to.

use brrr_perf::memory::TransformerConfig;
use brrr_perf::tensor_parallel::{PassComm, activation_elements_per_layer, block_pass};

/// The page's inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct TpInput {
    /// Width `C`.
    pub hidden: u64,
    /// Attention heads `H`.
    pub heads: u64,
    /// Sequence length `T`.
    pub seq: u64,
    /// Sequences per micro-batch `B`.
    pub micro_batch: u64,
    /// Vocabulary `V`.
    pub vocab: u64,
    /// Tensor-parallel ranks `t`.
    pub tp: u64,
    /// Sequence parallelism.
    pub sp: bool,
}

impl Default for TpInput {
    /// `brrr train`'s default model split over two ranks.
    fn default() -> Self {
        TpInput {
            hidden: 128,
            heads: 4,
            seq: 128,
            micro_batch: 16,
            vocab: 256,
            tp: 2,
            sp: false,
        }
    }
}

/// One matrix of the block (or the embedding) and rank `r`'s piece of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    /// The parameter, as brrr names it.
    pub name: &'static str,
    /// `[out, in]` (or `[rows]`).
    pub full: Vec<u64>,
    /// What one rank holds.
    pub shard: Vec<u64>,
    /// How it is split.
    pub split: &'static str,
    /// Which slice a rank holds.
    pub kind: Kind,
}

/// How a parameter is divided, for [`Piece::rank_holds`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Vocabulary rows of the embedding.
    Vocab,
    /// A full copy on every rank.
    Replicated,
    /// q, k, v rows of some heads.
    Heads,
    /// Input columns of attention's output projection.
    AttnProj,
    /// Output rows of the MLP's first projection.
    Fc,
    /// Input columns of the MLP's second projection.
    MlpProj,
}

impl Piece {
    /// What rank `r` holds of it, in words.
    pub fn rank_holds(&self, input: &TpInput, r: u64) -> String {
        match self.kind {
            Kind::Vocab => vocab_of(input, r),
            Kind::Replicated => "all of it (replicated)".into(),
            Kind::Heads => heads_of(input, r),
            Kind::AttnProj => attn_proj_of(input, r),
            Kind::Fc => fc_of(input, r),
            Kind::MlpProj => mlp_proj_of(input, r),
        }
    }
}

/// Everything the page draws.
#[derive(Clone, Debug, PartialEq)]
pub struct TpView {
    /// The block's matrices and the token embedding.
    pub pieces: Vec<Piece>,
    /// Parameters of one block, whole and on one rank.
    pub block_params: (f64, f64),
    /// Activation elements one block keeps for its backward, on one device and on one rank.
    pub block_activations: (f64, f64),
    /// Collectives of one block in the forward and in the backward.
    pub forward: PassComm,
    /// See [`TpView::forward`].
    pub backward: PassComm,
    /// f32 elements one rank sends per block, forward and backward (ring algorithms).
    pub sent: (u64, u64),
}

fn heads_of(i: &TpInput, r: u64) -> String {
    let per = i.heads / i.tp;
    format!(
        "heads {}..{}: their q, k and v rows",
        r * per,
        (r + 1) * per
    )
}

fn attn_proj_of(i: &TpInput, r: u64) -> String {
    let w = i.hidden / i.tp;
    format!(
        "input columns {}..{} (its heads' outputs)",
        r * w,
        (r + 1) * w
    )
}

fn fc_of(i: &TpInput, r: u64) -> String {
    let w = 4 * i.hidden / i.tp;
    format!("output rows {}..{}", r * w, (r + 1) * w)
}

fn mlp_proj_of(i: &TpInput, r: u64) -> String {
    let w = 4 * i.hidden / i.tp;
    format!("input columns {}..{}", r * w, (r + 1) * w)
}

fn vocab_of(i: &TpInput, r: u64) -> String {
    let w = i.vocab / i.tp;
    format!("tokens {}..{}", r * w, (r + 1) * w)
}

/// The view of `input`, or what does not divide.
pub fn view(input: &TpInput) -> Result<TpView, String> {
    let i = input;
    for (what, v) in [
        ("heads", i.heads),
        ("width", i.hidden),
        ("vocabulary", i.vocab),
    ] {
        if i.tp == 0 || !v.is_multiple_of(i.tp) {
            return Err(format!(
                "the {what} ({v}) does not divide by {} ranks",
                i.tp
            ));
        }
    }
    if !i.hidden.is_multiple_of(i.heads) {
        return Err(format!(
            "width {} does not divide by {} heads",
            i.hidden, i.heads
        ));
    }
    if i.sp && !i.seq.is_multiple_of(i.tp) {
        return Err(format!(
            "sequence parallelism: the sequence ({}) does not divide by {} ranks",
            i.seq, i.tp
        ));
    }
    let (c, t) = (i.hidden, i.tp);
    let pieces = vec![
        Piece {
            name: "wte (embedding and tied head)",
            full: vec![i.vocab, c],
            shard: vec![i.vocab / t, c],
            split: "vocabulary rows",
            kind: Kind::Vocab,
        },
        Piece {
            name: "ln_1, ln_2",
            full: vec![c],
            shard: vec![c],
            split: "replicated",
            kind: Kind::Replicated,
        },
        Piece {
            name: "attn.c_attn (q, k, v)",
            full: vec![3 * c, c],
            shard: vec![3 * c / t, c],
            split: "column-parallel, by heads",
            kind: Kind::Heads,
        },
        Piece {
            name: "attn.c_proj",
            full: vec![c, c],
            shard: vec![c, c / t],
            split: "row-parallel",
            kind: Kind::AttnProj,
        },
        Piece {
            name: "mlp.c_fc",
            full: vec![4 * c, c],
            shard: vec![4 * c / t, c],
            split: "column-parallel",
            kind: Kind::Fc,
        },
        Piece {
            name: "mlp.c_proj",
            full: vec![c, 4 * c],
            shard: vec![c, 4 * c / t],
            split: "row-parallel",
            kind: Kind::MlpProj,
        },
    ];
    let cfg = TransformerConfig::gpt(1, c, i.heads, i.seq, i.vocab);
    let act = |tp: u64, sp: bool| {
        activation_elements_per_layer(&cfg, i.micro_batch, tp, sp).map_err(|e| e.to_string())
    };
    let (b, s) = (i.micro_batch as usize, i.seq as usize);
    let forward = block_pass(b, s, c as usize, i.sp, false);
    let backward = block_pass(b, s, c as usize, i.sp, true);
    Ok(TpView {
        pieces,
        block_params: (cfg.layer_params(1), cfg.layer_params(t)),
        block_activations: (act(1, false)?, act(t, i.sp)?),
        forward,
        backward,
        sent: (
            forward.ring_elements_sent(t),
            backward.ring_elements_sent(t),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_ranks_hold_half_the_matrices_and_send_two_all_reduces() {
        let v = view(&TpInput::default()).unwrap();
        let (whole, mine) = v.block_params;
        // 12C² + 13C whole; per rank 6C² of matrices plus replicated biases and norms.
        assert_eq!(whole, 12.0 * 128.0 * 128.0 + 13.0 * 128.0);
        assert!(mine < whole / 2.0 + 8.0 * 128.0 && mine > whole / 2.0);
        assert_eq!(v.forward.all_reduce.calls, 2);
        assert_eq!(v.forward.all_reduce.elements, 2 * 16 * 128 * 128);
        assert_eq!(v.sent.0, 2 * 16 * 128 * 128);
        let heads = v.pieces[2].rank_holds(&TpInput::default(), 1);
        assert_eq!(heads, "heads 2..4: their q, k and v rows");
    }

    #[test]
    fn sequence_parallel_trades_all_reduces_for_pairs_and_divides_the_activations() {
        let sp = TpInput {
            sp: true,
            tp: 4,
            ..TpInput::default()
        };
        let v = view(&sp).unwrap();
        assert_eq!(v.forward.all_reduce.calls, 0);
        assert_eq!(
            (v.forward.reduce_scatter.calls, v.forward.all_gather.calls),
            (2, 2)
        );
        assert_eq!(v.backward.all_gather.calls, 4);
        assert_eq!(v.block_activations.1, v.block_activations.0 / 4.0);
    }

    #[test]
    fn what_does_not_divide_is_named() {
        let e = view(&TpInput {
            tp: 3,
            ..TpInput::default()
        })
        .unwrap_err();
        assert!(e.contains("heads (4) does not divide by 3"), "{e}");
        let e = view(&TpInput {
            seq: 129,
            sp: true,
            ..TpInput::default()
        })
        .unwrap_err();
        assert!(e.contains("sequence"), "{e}");
    }
}
