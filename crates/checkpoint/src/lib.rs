//! # brrr-checkpoint
//!
//! Activation recomputation ("activation checkpointing"; not to be confused with
//! saving training state, which `brrr-train` calls a checkpoint): keep less of the
//! forward, recompute the rest during the backward, and trade compute for memory
//! exactly.
//!
//! - [`Chain`]: a model as segments with forward/backward costs and the bytes each
//!   keeps; [`GptShape::chain`] counts a GPT's from `brrr-nn`'s stashes.
//! - [`Schedule`]: the ops (`F∅`, `Fck`, `Fall`, selective forwards and backwards) and
//!   its memory curve ([`Schedule::simulate`]).
//! - [`Strategy`]: none, every k-th, √n (Chen et al. 2016), selective (Korthikanti et
//!   al. 2022), and [`optimal`] for a budget (Beaumont et al. 2019), each a pure
//!   function from a chain to a schedule. The planner has no backend dependency and
//!   compiles for wasm32 (`default-features = false`).
//! - [`Recompute`] (feature `executor`): runs a schedule on a `brrr_nn::Gpt` on any
//!   backend, dropping what it drops and recomputing what it recomputes.
//!
//! ## Randomness
//! A recomputed forward must equal the first one bit for bit. brrr's GPT has no
//! dropout (nothing random runs in a forward), so today every recomputation is exact.
//! The executor still gives each segment of each micro-batch a seed
//! ([`segment_seed`]) that depends only on the step's seed, the micro-batch and the
//! segment, never on how many times the forward ran: a layer that draws random numbers
//! must draw them from that seed so that a recomputation replays the same mask.
//!
//! ## Example
//!
//! Plan √n checkpointing for a 4-block GPT (5 segments: 4 blocks and the head), compare
//! its memory with keeping everything, then run it: the gradients are the plain step's.
//!
//! ```
//! use brrr_checkpoint::{GptShape, Recompute, Strategy};
//! use brrr_cpu::CpuBackend;
//! use brrr_nn::{DType, Gpt, GptConfig, MicroBatch, Module, Tensor};
//! use rand::SeedableRng;
//!
//! let shape = GptShape {
//!     n_layer: 4, n_head: 2, n_embd: 16, vocab_size: 16, batch: 1, seq_len: 8, dtype_bytes: 4,
//! };
//! let chain = shape.chain();
//! let sqrt = Strategy::Sqrt.plan(&chain)?;
//! assert_eq!(sqrt.to_text(), "Fck0 F∅1 Fck2 F∅3 Fall4 B4 Fall2 Fall3 B3 B2 Fall0 Fall1 B1 B0");
//! let keep_all = Strategy::None.plan(&chain)?.simulate(&chain)?;
//! let curve = sqrt.simulate(&chain)?;
//! assert!(curve.peak < keep_all.peak); // less memory (bytes) ...
//! assert!(curve.extra_cost > 0.0 && curve.extra_cost < chain.forward_cost()); // < 1 forward
//!
//! let cpu = CpuBackend::new();
//! let config = GptConfig { vocab_size: 16, block_size: 8, n_layer: 4, n_head: 2, n_embd: 16 };
//! let mut gpt = Gpt::new(&cpu, config, DType::F32, &mut rand_chacha::ChaCha8Rng::seed_from_u64(0))?;
//! let ids = Tensor::from_u32(&cpu, &[1, 2, 3, 4, 5, 6, 7, 8], [1, 8])?;
//! let targets = Tensor::from_i32(&cpu, &[2, 3, 4, 5, 6, 7, 8, 9], [1, 8])?;
//! let mut exec = Recompute::new(sqrt, &chain)?;
//! exec.forward_loss(&mut gpt, MicroBatch(0), &ids, &targets)?;
//! exec.backward(&mut gpt, MicroBatch(0), 1.0 / 8.0)?;
//! let recomputed = gpt.wte.weight.grad.to_vec_f32()?; // every block's backward reaches it
//! gpt.zero_grad()?;
//! gpt.forward_loss(&ids, &targets)?;
//! gpt.backward(1.0 / 8.0)?;
//! assert_eq!(recomputed, gpt.wte.weight.grad.to_vec_f32()?); // bit for bit
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod chain;
#[cfg(feature = "executor")]
mod executor;
mod optimal;
mod schedule;
mod strategy;

pub use chain::{Chain, GptShape, Segment};
#[cfg(feature = "executor")]
pub use executor::{Recompute, Seed, gpt_chain_measured};
pub use optimal::{min_budget, optimal};
pub use schedule::{Curve, Mode, Op, Schedule};
pub use strategy::{Strategy, group_starts, parse_bytes, sqrt_group};

use std::fmt;

/// The seed of segment `segment` of micro-batch `micro_batch` in the step seeded with
/// `step_seed`: the same for the first forward and every recomputation (SplitMix64's
/// finaliser over the three, Steele et al. 2014).
pub fn segment_seed(step_seed: u64, micro_batch: u32, segment: usize) -> u64 {
    let mut z = step_seed
        ^ (u64::from(micro_batch) << 32)
        ^ (segment as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What planning can fail on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// The chain has no segment.
    EmptyChain,
    /// No schedule fits in `budget`; `smallest` is the least budget one fits in.
    BudgetTooSmall {
        /// The budget asked for, bytes.
        budget: u64,
        /// The smallest feasible budget, bytes.
        smallest: u64,
    },
    /// A schedule breaks the rules at op `op`.
    InvalidSchedule {
        /// Index of the offending op.
        op: usize,
        /// What is wrong.
        reason: String,
    },
    /// A model shape the planner cannot count (a zero size, or bytes beyond 64 bits).
    Shape(String),
    /// A strategy string that is not `none`, `every:K`, `sqrt`, `selective`,
    /// `budget:BYTES`.
    Parse(String),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::EmptyChain => write!(f, "the chain has no segment to plan"),
            PlanError::BudgetTooSmall { budget, smallest } => write!(
                f,
                "no schedule fits in a budget of {budget} bytes; the smallest feasible \
                 budget is {smallest} bytes (budget:{smallest})"
            ),
            PlanError::InvalidSchedule { op, reason } => {
                write!(f, "invalid schedule at op {op}: {reason}")
            }
            PlanError::Shape(m) => write!(f, "{m}"),
            PlanError::Parse(s) => write!(
                f,
                "unknown checkpoint strategy {s:?}: expected none, every:K (K >= 1), \
                 sqrt, selective or budget:BYTES (e.g. budget:64M)"
            ),
        }
    }
}

impl std::error::Error for PlanError {}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
