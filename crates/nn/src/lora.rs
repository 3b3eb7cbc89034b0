//! LoRA: low-rank adaptation (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large
//! Language Models").
//!
//! Fine-tuning every weight of a trained model needs AdamW's state for every weight.
//! LoRA freezes the weights and trains, beside each adapted linear layer `W: [out, in]`,
//! two small matrices `A: [r, in]` and `B: [out, r]` whose product is the update:
//! `y = x Wᵀ + s · (x Aᵀ) Bᵀ`, `s = α / r` (§4.1). `B` starts at zero, so the adapted
//! model starts as the base model; `A` starts random, so `B`'s first gradient is not
//! zero. Only `A` and `B` have optimizer state: `r·(in + out)` parameters per layer
//! instead of `in·out`. After training, `W + s·B A` is an ordinary weight
//! ([`merge_adapters`]), so the fine-tuned model costs nothing extra to run (§4.1,
//! "No Additional Inference Latency").
//!
//! [`LoraLinear`] wraps any [`LinearLayer`]: its backward asks the frozen layer for the
//! input gradient only ([`LinearLayer::backward_input`], the zero-bubble split) and
//! drops what the weight gradient would have needed, so the frozen weight's gradient is
//! never computed. [`add_adapters`] wraps the four linear layers of every block (the
//! fused `c_attn`, attention's `c_proj`, the MLP's `c_fc` and `c_proj`); the
//! embeddings, LayerNorms and biases stay frozen. Names follow the layer:
//! `h.0.attn.c_attn.lora_a`, `h.0.attn.c_attn.lora_b` ([`is_adapter`]).
//!
//! ```
//! use brrr_cpu::CpuBackend;
//! use brrr_nn::lora::{LoraConfig, add_adapters, is_adapter};
//! use brrr_nn::{Gpt, GptConfig, Module};
//! use brrr_backend::DType;
//! use rand::SeedableRng;
//!
//! let cpu = CpuBackend::new();
//! let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
//! let cfg = GptConfig { vocab_size: 64, block_size: 16, n_layer: 2, n_head: 2, n_embd: 32 };
//! let mut gpt = Gpt::new(&cpu, cfg.clone(), DType::F32, &mut rng)?;
//! let lora = LoraConfig { rank: 4, alpha: 8.0 };
//! add_adapters(&mut gpt, lora, &mut rng)?;
//! let trained: usize = gpt.params().iter().filter(|p| is_adapter(&p.name)).map(|p| p.numel()).sum();
//! assert_eq!(trained, lora.adapter_params(&cfg));
//! # Ok::<(), brrr_backend::Error>(())
//! ```

use crate::{Gpt, GptConfig, LinearLayer, MicroBatch, Module, Param, Stash};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_tensor::Tensor;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// LoRA's options.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// `r`: the rank of every adapter.
    pub rank: usize,
    /// `α`: the update is scaled by `α / r`, so that changing `r` does not change the
    /// update's size and the learning rate need not be re-tuned (§4.1).
    pub alpha: f32,
}

impl LoraConfig {
    /// `α / r`.
    pub fn scale(&self) -> f32 {
        self.alpha / self.rank as f32
    }

    /// Errors on a rank of 0 or a non-finite or non-positive `α`.
    pub fn validate(&self) -> Result<()> {
        if self.rank == 0 {
            return Err(Error::invalid("lora", "--lora-rank must be at least 1"));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(Error::invalid(
                "lora",
                format!(
                    "--lora-alpha must be positive and finite, got {}",
                    self.alpha
                ),
            ));
        }
        Ok(())
    }

    /// The trained parameters [`add_adapters`] adds to a GPT of shape `model`:
    /// `r·(in + out)` per adapted layer, four layers per block
    /// (`C → 3C`, `C → C`, `C → 4C`, `4C → C`).
    pub fn adapter_params(&self, model: &GptConfig) -> usize {
        let c = model.n_embd;
        let per_block = (c + 3 * c) + (c + c) + (c + 4 * c) + (4 * c + c);
        self.rank * per_block * model.n_layer
    }
}

/// Whether a parameter name is a LoRA adapter's (`….lora_a` or `….lora_b`).
pub fn is_adapter(name: &str) -> bool {
    name.ends_with(".lora_a") || name.ends_with(".lora_b")
}

/// The adapter's matrices and what its backward needs.
struct Adapter<B: Backend> {
    /// `A: [r, in]` (PyTorch's `lora_A.weight` layout).
    a: Param<B>,
    /// `B: [out, r]`, zero at the start.
    b: Param<B>,
    scale: f32,
    /// Per micro-batch: the input `[rows, in]` and `h = x Aᵀ`, `[rows, r]`.
    saved: Stash<(Tensor<B>, Tensor<B>)>,
}

impl<B: Backend> Adapter<B> {
    /// See [`LoraLinear::new`].
    fn new(base: &dyn LinearLayer<B>, config: LoraConfig, rng: &mut impl Rng) -> Result<Self> {
        config.validate()?;
        let params = base.params();
        let w = params
            .first()
            .ok_or_else(|| Error::invalid("lora", "a linear layer without a weight"))?;
        let name = w.name.strip_suffix(".weight").unwrap_or(&w.name);
        let (backend, dtype) = (w.value.backend(), w.value.dtype());
        let (i, o, r) = (base.in_features(), base.out_features(), config.rank);
        let std = 1.0 / (i.max(1) as f64).sqrt();
        let a = Tensor::randn(backend, [r, i], dtype, 0.0, std, rng)?;
        let b = Tensor::zeros(backend, [o, r], dtype)?;
        Ok(Adapter {
            a: Param::new(format!("{name}.lora_a"), a)?,
            b: Param::new(format!("{name}.lora_b"), b)?,
            scale: config.scale(),
            saved: Stash::new(),
        })
    }
}

/// A frozen [`LinearLayer`] plus a trained low-rank update (see the module docs).
/// After [`LoraLinear::merge`] it is the frozen layer with the update folded in.
pub struct LoraLinear<B: Backend> {
    base: Box<dyn LinearLayer<B>>,
    adapter: Option<Adapter<B>>,
}

impl<B: Backend> LoraLinear<B> {
    /// Wraps `base` (whose first parameter is its weight `[out, in]`, named
    /// `NAME.weight`) with a rank-`config.rank` adapter named `NAME.lora_a` and
    /// `NAME.lora_b`, in `base`'s weight dtype: `A` from `N(0, 1/in)`, so `x Aᵀ` has
    /// the size of `x`, and `B` zero.
    pub fn new(
        base: Box<dyn LinearLayer<B>>,
        config: LoraConfig,
        rng: &mut impl Rng,
    ) -> Result<Self> {
        let adapter = Adapter::new(&*base, config, rng)?;
        Ok(LoraLinear {
            base,
            adapter: Some(adapter),
        })
    }

    /// Folds the update into the frozen weight, `W += s · B A` (in the weight's f32
    /// master when it has one), and drops the adapter: the layer then computes what it
    /// computed before, as one GEMM.
    pub fn merge(&mut self) -> Result<()> {
        let Some(ad) = self.adapter.take() else {
            return Ok(());
        };
        let delta = ad.b.value.matmul(&ad.a.value)?;
        let mut params = self.base.params_mut();
        let w = params
            .first_mut()
            .ok_or_else(|| Error::invalid("LoraLinear::merge", "the layer has no weight"))?;
        match &mut w.master {
            Some(master) => {
                master.axpy_(ad.scale, &delta.to_dtype(DType::F32)?)?;
                w.value = master.to_dtype(w.value.dtype())?;
            }
            None => w.value.axpy_(ad.scale, &delta.to_dtype(w.value.dtype())?)?,
        }
        Ok(())
    }

    /// Whether the adapter is still separate (not merged).
    pub fn has_adapter(&self) -> bool {
        self.adapter.is_some()
    }
}

impl<B: Backend> LinearLayer<B> for LoraLinear<B> {
    fn in_features(&self) -> usize {
        self.base.in_features()
    }
    fn out_features(&self) -> usize {
        self.base.out_features()
    }

    /// `x Wᵀ (+ b) + s · (x Aᵀ) Bᵀ`.
    fn forward(&mut self, mb: MicroBatch, x: &Tensor<B>) -> Result<Tensor<B>> {
        let y = self.base.forward(mb, x)?;
        let Some(ad) = &mut self.adapter else {
            return Ok(y);
        };
        let n = self.base.in_features();
        let x2 = x.reshape([x.elem_count() / n.max(1), n])?;
        let h = x2.matmul(&ad.a.value.transpose(0, 1)?)?;
        let dims = y.dims().to_vec();
        // A view of `y` written in place once `y` itself is gone.
        let mut y2 = y.reshape([h.dims()[0], ad.b.value.dims()[0]])?;
        drop(y);
        Tensor::matmul_into(&mut y2, &h, &ad.b.value.transpose(0, 1)?, ad.scale, 1.0)?;
        ad.saved.put(mb, (x2, h));
        y2.reshape(dims)
    }

    /// `dB += s · dyᵀ h`, `g = s · dy B`, `dA += gᵀ x`, `dx = dy W + g A`; the frozen
    /// weight's gradient is not computed.
    fn backward(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let Some(ad) = &mut self.adapter else {
            return self.base.backward(mb, dy);
        };
        let (x2, h) = ad.saved.take(mb, "LoraLinear")?;
        // The frozen layer's input gradient alone; what its weight gradient would read
        // is dropped at once.
        let dx = self.base.backward_input(mb, dy)?;
        self.base.discard_saved(mb)?;
        let out = ad.b.value.dims()[0];
        let dy2 = dy.reshape([dy.elem_count() / out.max(1), out])?;
        Tensor::matmul_into(&mut ad.b.grad, &dy2.transpose(0, 1)?, &h, ad.scale, 1.0)?;
        let g = dy2.matmul(&ad.b.value)?;
        Tensor::matmul_into(&mut ad.a.grad, &g.transpose(0, 1)?, &x2, ad.scale, 1.0)?;
        let dims = dx.dims().to_vec();
        let mut dx2 = dx.reshape([x2.dims()[0], x2.dims()[1]])?;
        drop(dx);
        Tensor::matmul_into(&mut dx2, &g, &ad.a.value, ad.scale, 1.0)?;
        dx2.reshape(dims)
    }

    /// A LoRA layer does not split its backward: the adapters' gradients are cheap,
    /// and fine-tuning runs on one device.
    fn backward_input(&mut self, mb: MicroBatch, dy: &Tensor<B>) -> Result<Tensor<B>> {
        match self.adapter {
            None => self.base.backward_input(mb, dy),
            Some(_) => self.backward(mb, dy),
        }
    }
    fn backward_weight(&mut self, mb: MicroBatch) -> Result<()> {
        match self.adapter {
            None => self.base.backward_weight(mb),
            Some(_) => Ok(()),
        }
    }
    fn as_lora_mut(&mut self) -> Option<&mut LoraLinear<B>> {
        Some(self)
    }
}

impl<B: Backend> Module<B> for LoraLinear<B> {
    fn clear_saved(&mut self) {
        self.base.clear_saved();
        if let Some(ad) = &mut self.adapter {
            ad.saved.clear();
        }
    }
    fn discard_saved(&mut self, mb: MicroBatch) -> Result<()> {
        self.base.discard_saved(mb)?;
        if let Some(ad) = &mut self.adapter {
            ad.saved.discard(mb);
        }
        Ok(())
    }
    /// The frozen layer's parameters, then `A` and `B`.
    fn params(&self) -> Vec<&Param<B>> {
        let mut v = self.base.params();
        if let Some(ad) = &self.adapter {
            v.extend([&ad.a, &ad.b]);
        }
        v
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        let mut v = self.base.params_mut();
        if let Some(ad) = &mut self.adapter {
            v.extend([&mut ad.a, &mut ad.b]);
        }
        v
    }
}

/// Stands in a layer's slot for the moment its layer is moved into a wrapper.
struct Detached;

impl<B: Backend> Module<B> for Detached {
    fn clear_saved(&mut self) {}
    fn discard_saved(&mut self, _mb: MicroBatch) -> Result<()> {
        Ok(())
    }
    fn params(&self) -> Vec<&Param<B>> {
        Vec::new()
    }
    fn params_mut(&mut self) -> Vec<&mut Param<B>> {
        Vec::new()
    }
}

impl<B: Backend> LinearLayer<B> for Detached {
    fn in_features(&self) -> usize {
        0
    }
    fn out_features(&self) -> usize {
        0
    }
    fn forward(&mut self, _mb: MicroBatch, _x: &Tensor<B>) -> Result<Tensor<B>> {
        Err(Error::invalid("lora", "a layer slot was left detached"))
    }
    fn backward(&mut self, _mb: MicroBatch, _dy: &Tensor<B>) -> Result<Tensor<B>> {
        Err(Error::invalid("lora", "a layer slot was left detached"))
    }
}

/// Replaces the layer in `slot` by the layer with an adapter; on an error the slot
/// keeps its layer as it was.
fn wrap<B: Backend>(
    slot: &mut Box<dyn LinearLayer<B>>,
    config: LoraConfig,
    rng: &mut impl Rng,
) -> Result<()> {
    let adapter = Adapter::new(&**slot, config, rng)?;
    let base = std::mem::replace(slot, Box::new(Detached));
    *slot = Box::new(LoraLinear {
        base,
        adapter: Some(adapter),
    });
    Ok(())
}

/// Wraps the four linear layers of every block of `model` with a rank-`config.rank`
/// adapter ([`LoraLinear`]), block by block, drawing `A` from `rng`.
pub fn add_adapters<B: Backend>(
    model: &mut Gpt<B>,
    config: LoraConfig,
    rng: &mut impl Rng,
) -> Result<()> {
    config.validate()?;
    for block in &mut model.h {
        wrap(&mut block.attn.c_attn, config, rng)?;
        wrap(&mut block.attn.c_proj, config, rng)?;
        wrap(&mut block.mlp.c_fc, config, rng)?;
        wrap(&mut block.mlp.c_proj, config, rng)?;
    }
    Ok(())
}

/// Folds every adapter of `model` into its frozen weight ([`LoraLinear::merge`]): the
/// model's parameters are then the base model's names and shapes again. Layers
/// without an adapter are left as they are.
pub fn merge_adapters<B: Backend>(model: &mut Gpt<B>) -> Result<()> {
    for block in &mut model.h {
        for slot in [
            &mut block.attn.c_attn,
            &mut block.attn.c_proj,
            &mut block.mlp.c_fc,
            &mut block.mlp.c_proj,
        ] {
            if let Some(l) = slot.as_lora_mut() {
                l.merge()?;
            }
        }
    }
    Ok(())
}
