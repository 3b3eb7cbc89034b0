//! The autocast policy: which classes of ops compute in 16 bits.
//!
//! brrr's layers run every op in the dtype of their inputs and parameters, and every
//! kernel computes internally in f32 whatever the storage (`Backend`'s convention), so a
//! policy is applied by choosing dtypes, not by rewriting layers: the parameters'
//! compute copies decide the GEMMs' dtype (and so the activations'), and attention's
//! core can be cast to f32 around it. What must stay f32 is f32 by construction in the
//! backend (softmax and LayerNorm statistics, the loss, reductions, AdamW's state) and
//! cannot be switched to 16 bits: [`Policy::set`] says so.

use brrr_backend::{Backend, DType, Error, Result};
use brrr_nn::{Gpt, Module, Param};

/// The classes of ops a policy decides about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// The linear layers and the tied head: most of the FLOPs, where 16 bits pays.
    Gemm,
    /// Attention's batched `q·kᵀ` and `att·v` with the softmax between them (its
    /// probabilities are stored in this precision; its max and sum are f32 always).
    AttentionCore,
    /// GELU and the residual additions: element-wise on the activations, stored in the
    /// activations' dtype, computed in f32 inside the kernel.
    Elementwise,
    /// LayerNorm's mean and variance (f32 buffers, whatever the input's dtype).
    LayerNormStatistics,
    /// Softmax's running max and sum of exponentials (f32 registers in the kernel).
    SoftmaxStatistics,
    /// Cross-entropy: its losses and their sum are f32 buffers.
    Loss,
    /// Sums over many elements: the gradient norm, the loss over micro-batches.
    Reduction,
    /// AdamW: f32 master weights and f32 moments; the 16-bit copy is written from the
    /// master in the same kernel.
    Optimizer,
}

impl OpClass {
    /// Every class, in the order [`Policy::table`] lists them.
    pub const ALL: [OpClass; 8] = [
        OpClass::Gemm,
        OpClass::AttentionCore,
        OpClass::Elementwise,
        OpClass::LayerNormStatistics,
        OpClass::SoftmaxStatistics,
        OpClass::Loss,
        OpClass::Reduction,
        OpClass::Optimizer,
    ];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            OpClass::Gemm => "GEMMs (linear layers, head)",
            OpClass::AttentionCore => "attention core (q·kᵀ, softmax, att·v)",
            OpClass::Elementwise => "element-wise (GELU, residual adds)",
            OpClass::LayerNormStatistics => "LayerNorm statistics",
            OpClass::SoftmaxStatistics => "softmax max and sum",
            OpClass::Loss => "cross-entropy loss",
            OpClass::Reduction => "reductions (grad norm, loss sum)",
            OpClass::Optimizer => "optimizer (master weights, moments)",
        }
    }

    /// Whether brrr keeps this class in f32 whatever the policy, and why.
    pub fn always_f32(self) -> Option<&'static str> {
        match self {
            OpClass::Gemm | OpClass::AttentionCore => None,
            OpClass::Elementwise => None,
            OpClass::LayerNormStatistics => {
                Some("a variance of 16-bit values loses the small differences it measures")
            }
            OpClass::SoftmaxStatistics => Some("a sum of exponentials overflows f16 at 65504"),
            OpClass::Loss => Some("log-probabilities near 0 need f32's resolution"),
            OpClass::Reduction => Some("adding many small terms in 16 bits stalls (swamping)"),
            OpClass::Optimizer => Some("updates smaller than a 16-bit ulp would be lost"),
        }
    }
}

/// Whether a class computes in the policy's 16-bit dtype or in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// The policy's low-precision dtype (f16 or bf16).
    Low,
    /// f32.
    F32,
}

/// An autocast policy for one low-precision dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    low: DType,
    gemm: Precision,
    attention: Precision,
}

impl Policy {
    /// The default policy for `low` (f16 or bf16), as `torch.autocast` decides for these
    /// ops: GEMMs, attention's core and the element-wise ops between them in `low`;
    /// statistics, the loss, reductions and the optimizer in f32.
    pub fn new(low: DType) -> Result<Self> {
        if !matches!(low, DType::F16 | DType::BF16) {
            return Err(Error::invalid(
                "Policy::new",
                format!("the low precision must be f16 or bf16, got {low}"),
            ));
        }
        Ok(Policy {
            low,
            gemm: Precision::Low,
            attention: Precision::Low,
        })
    }

    /// The low-precision dtype.
    pub fn low(&self) -> DType {
        self.low
    }

    /// Sets one class's precision. The classes brrr keeps in f32 accept only
    /// [`Precision::F32`]; element-wise ops follow the GEMMs (they read and write the
    /// activations) and cannot be set apart from them.
    pub fn set(&mut self, class: OpClass, precision: Precision) -> Result<()> {
        match class {
            OpClass::Gemm => self.gemm = precision,
            OpClass::AttentionCore => self.attention = precision,
            OpClass::Elementwise if precision == self.gemm => {}
            OpClass::Elementwise => {
                return Err(Error::invalid(
                    "Policy::set",
                    "element-wise ops run in the activations' dtype, which the GEMMs decide",
                ));
            }
            other => {
                if precision == Precision::Low {
                    let why = other.always_f32().unwrap_or("");
                    return Err(Error::invalid(
                        "Policy::set",
                        format!("{} always runs in f32: {why}", other.name()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The precision of one class.
    pub fn precision(&self, class: OpClass) -> Precision {
        match class {
            OpClass::Gemm | OpClass::Elementwise => self.gemm,
            OpClass::AttentionCore => self.attention,
            _ => Precision::F32,
        }
    }

    /// The dtype one class computes (and stores its outputs) in.
    pub fn dtype(&self, class: OpClass) -> DType {
        match self.precision(class) {
            Precision::Low => self.low,
            Precision::F32 => DType::F32,
        }
    }

    /// The dtype of the parameters' compute copies and of the activations.
    pub fn compute_dtype(&self) -> DType {
        self.dtype(OpClass::Gemm)
    }

    /// Every class with its dtype, for tables (`brrr numerics`, the book).
    pub fn table(&self) -> Vec<(OpClass, DType)> {
        OpClass::ALL.iter().map(|&c| (c, self.dtype(c))).collect()
    }
}

/// Makes an f32 `model` follow `policy`: every parameter becomes an f32 master (the
/// model's current weights, unchanged) with a compute copy in the GEMMs' dtype and an
/// f32 gradient, and attention's core is cast when the policy keeps it apart. The
/// backward then runs in the dtypes the forward ran in (it reuses the saved 16-bit
/// activations and the same compute copies), and every parameter gradient is
/// accumulated in f32 ([`Param::accumulate_grad`], GEMMs with an f32 output).
pub fn apply_policy<B: Backend>(policy: &Policy, model: &mut Gpt<B>) -> Result<()> {
    if model.dtype() != DType::F32 {
        return Err(Error::invalid(
            "apply_policy",
            format!(
                "the model must be f32 to get f32 masters, got {}",
                model.dtype()
            ),
        ));
    }
    apply_policy_to_params(policy, model.params_mut())?;
    let core = attention_core_dtype(policy);
    for block in &mut model.h {
        block.attn.core_dtype = core;
    }
    Ok(())
}

/// [`apply_policy`]'s part for parameters, for a model that is not a [`Gpt`] (a
/// tensor-parallel shard, a pipeline stage): each f32 parameter without a master
/// becomes an f32 master with a compute copy in the policy's dtype and an f32 gradient.
/// Parameters that already have a master are left as they are. The caller sets each
/// attention's `core_dtype` to [`attention_core_dtype`].
pub fn apply_policy_to_params<B: Backend>(
    policy: &Policy,
    params: Vec<&mut Param<B>>,
) -> Result<()> {
    let compute = policy.compute_dtype();
    for p in params {
        if p.master.is_some() {
            continue;
        }
        let name = std::mem::take(&mut p.name);
        let value = p.value.clone();
        *p = Param::with_master(name, value, compute, DType::F32)?;
    }
    Ok(())
}

/// The dtype attention's core computes in under `policy`: `None` (the activations'
/// dtype) unless the policy keeps the core apart from the other GEMMs.
pub fn attention_core_dtype(policy: &Policy) -> Option<DType> {
    let core = policy.dtype(OpClass::AttentionCore);
    (core != policy.compute_dtype()).then_some(core)
}
