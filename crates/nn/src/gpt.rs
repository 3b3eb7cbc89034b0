use crate::{Block, Embedding, LayerNorm, Module, Param, no_forward};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_tensor::Tensor;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// The shape of a GPT.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GptConfig {
    pub vocab_size: usize,
    /// Context length: the longest sequence the positional table covers.
    pub block_size: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
}

impl GptConfig {
    /// GPT-2 small (124M parameters) with the vocabulary padded from 50257 to 50304,
    /// a multiple of 64, so that the head's GEMM tiles evenly (padding rows are never
    /// targets, so they only cost memory).
    pub fn gpt2_124m() -> Self {
        GptConfig {
            vocab_size: 50304,
            block_size: 1024,
            n_layer: 12,
            n_head: 12,
            n_embd: 768,
        }
    }

    /// Checks that the shape makes sense.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::invalid("GptConfig", msg));
        if self.vocab_size == 0 || self.block_size == 0 || self.n_layer == 0 || self.n_head == 0 {
            return bad(format!("all sizes must be positive: {self:?}"));
        }
        if self.n_embd == 0 || !self.n_embd.is_multiple_of(self.n_head) {
            return bad(format!(
                "n_embd {} must be a positive multiple of n_head {}",
                self.n_embd, self.n_head
            ));
        }
        Ok(())
    }

    /// Parameter count: embeddings `(V + T)·C`, per layer `12·C² + 13·C`
    /// (attention 4C² + 4C, MLP 8C² + 5C, two LayerNorms 4C), final LayerNorm 2C.
    /// The head is tied to the token embedding and adds nothing.
    pub fn num_params(&self) -> usize {
        let c = self.n_embd;
        (self.vocab_size + self.block_size) * c + self.n_layer * (12 * c * c + 13 * c) + 2 * c
    }

    /// FLOPs of one training token, forward and backward, as PaLM's MFU counts them
    /// (Chowdhery et al. 2022, App. B): `6·N + 12·L·T·C`. `N` excludes the positional
    /// table (a lookup, no matmul) and counts the tied head once; the second term is
    /// attention's two `T × T` products (causal masking not discounted).
    pub fn flops_per_token(&self, seq_len: usize) -> f64 {
        let n_matmul = self.num_params() - self.block_size * self.n_embd;
        6.0 * n_matmul as f64 + 12.0 * (self.n_layer * seq_len * self.n_embd) as f64
    }
}

/// A GPT-2 style decoder: token + position embeddings, `n_layer` pre-norm blocks, a
/// final LayerNorm, and an output head that reuses the token embedding matrix
/// (weight tying, Press & Wolf 2017).
pub struct Gpt<B: Backend> {
    pub config: GptConfig,
    pub wte: Embedding<B>,
    pub wpe: Embedding<B>,
    pub h: Vec<Block<B>>,
    pub ln_f: LayerNorm<B>,
    saved: Option<GptSaved<B>>,
}

struct GptSaved<B: Backend> {
    /// Input of the head (after ln_f), `[B·T, C]`.
    x_final: Tensor<B>,
    logits: Option<Tensor<B>>,
    targets: Option<Tensor<B>>,
    bt: (usize, usize),
}

impl<B: Backend> Gpt<B> {
    /// A freshly initialised model, as GPT-2 does it: weights `N(0, 0.02²)`, biases 0,
    /// LayerNorm `γ = 1, β = 0`, and the two residual projections per block scaled by
    /// `1/sqrt(2·n_layer)` (Radford et al. 2019, §2.3).
    pub fn new(backend: &B, config: GptConfig, dtype: DType, rng: &mut impl Rng) -> Result<Self> {
        config.validate()?;
        let c = config.n_embd;
        let proj_std = 0.02 / ((2 * config.n_layer) as f64).sqrt();
        let wte = Embedding::new(backend, "wte", config.vocab_size, c, 0.02, dtype, rng)?;
        let wpe = Embedding::new(backend, "wpe", config.block_size, c, 0.02, dtype, rng)?;
        let h = (0..config.n_layer)
            .map(|i| {
                Block::new(
                    backend,
                    &format!("h.{i}"),
                    c,
                    config.n_head,
                    proj_std,
                    dtype,
                    rng,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let ln_f = LayerNorm::new(backend, "ln_f", c, dtype)?;
        Ok(Gpt {
            config,
            wte,
            wpe,
            h,
            ln_f,
            saved: None,
        })
    }

    pub fn dtype(&self) -> DType {
        self.wte.weight.value.dtype()
    }

    /// Token ids `[B, T]` (u32) to logits `[B, T, V]`.
    pub fn forward(&mut self, ids: &Tensor<B>) -> Result<Tensor<B>> {
        if ids.rank() != 2 {
            return Err(Error::shape(
                "Gpt::forward",
                format!("ids must be [B, T], got {}", ids.shape()),
            ));
        }
        let (b, t) = (ids.dims()[0], ids.dims()[1]);
        if t > self.config.block_size {
            return Err(Error::shape(
                "Gpt::forward",
                format!(
                    "sequence length {t} exceeds block_size {}",
                    self.config.block_size
                ),
            ));
        }
        let positions: Vec<u32> = (0..b).flat_map(|_| 0..t as u32).collect();
        let pos = Tensor::from_u32(ids.backend(), &positions, [b, t])?;
        let mut x = self.wte.forward(ids)?.add(&self.wpe.forward(&pos)?)?;
        for block in &mut self.h {
            x = block.forward(&x)?;
        }
        let c = self.config.n_embd;
        let x_final = self.ln_f.forward(&x)?.reshape([b * t, c])?;
        // Tied head: logits = x · wteᵀ.
        let logits = x_final.matmul(&self.wte.weight.value.transpose(0, 1)?)?;
        self.saved = Some(GptSaved {
            x_final,
            logits: None,
            targets: None,
            bt: (b, t),
        });
        logits.reshape([b, t, self.config.vocab_size])
    }

    /// Forward pass plus per-position cross-entropy `[B, T]` against i32 `targets`.
    /// The logits are kept for [`Gpt::backward`].
    pub fn forward_loss(&mut self, ids: &Tensor<B>, targets: &Tensor<B>) -> Result<Tensor<B>> {
        let logits = self.forward(ids)?;
        let losses = logits.cross_entropy(targets)?;
        let saved = self.saved.as_mut().expect("forward saved");
        saved.logits = Some(logits);
        saved.targets = Some(targets.clone());
        Ok(losses)
    }

    /// Backward from the loss `Σ losses · dloss`, accumulating into every parameter's
    /// gradient. For the mean over `n` positions pass `dloss = 1/n`; for gradient
    /// accumulation over `k` micro-batches pass `1/(n·k)` on each.
    pub fn backward(&mut self, dloss: f32) -> Result<()> {
        let saved = self.saved.take().ok_or_else(|| no_forward("Gpt"))?;
        let (logits, targets) = match (saved.logits, saved.targets) {
            (Some(l), Some(t)) => (l, t),
            _ => {
                return Err(Error::invalid(
                    "Gpt::backward",
                    "call forward_loss before backward",
                ));
            }
        };
        let (b, t) = saved.bt;
        let (c, v) = (self.config.n_embd, self.config.vocab_size);
        let loss_dtype = if self.dtype() == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let dlosses = Tensor::full(logits.backend(), [b, t], loss_dtype, f64::from(dloss))?;
        let dlogits = logits
            .cross_entropy_backward(&targets, &dlosses)?
            .reshape([b * t, v])?;
        drop(logits);
        // Tied head: dwte += dlogitsᵀ · x, dx = dlogits · wte.
        Tensor::matmul_into(
            &mut self.wte.weight.grad,
            &dlogits.transpose(0, 1)?,
            &saved.x_final,
            1.0,
            1.0,
        )?;
        let dx = dlogits.matmul(&self.wte.weight.value)?.reshape([b, t, c])?;
        let mut dx = self.ln_f.backward(&dx)?;
        for block in self.h.iter_mut().rev() {
            dx = block.backward(&dx)?;
        }
        self.wpe.backward(&dx)?;
        self.wte.backward(&dx)?;
        Ok(())
    }
}

impl<B: Backend> Module<B> for Gpt<B> {
    fn clear_saved(&mut self) {
        self.saved = None;
        self.wte.clear_saved();
        self.wpe.clear_saved();
        for b in &mut self.h {
            b.clear_saved();
        }
        self.ln_f.clear_saved();
    }
    fn params(&self) -> Vec<&Param<B>> {
        let mut v = self.wte.params();
        v.extend(self.wpe.params());
        for b in &self.h {
            v.extend(b.params());
        }
        v.extend(self.ln_f.params());
        v
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = self.wte.params_mut();
        v.extend(self.wpe.params_mut());
        for b in &mut self.h {
            v.extend(b.params_mut());
        }
        v.extend(self.ln_f.params_mut());
        v
    }
}
