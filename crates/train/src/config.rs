//! What a run is: the model's shape and the hyper-parameters, checked before anything
//! is allocated.

use crate::data::ByteTokenizer;
use crate::layout::Layout;
use brrr_amp::AmpConfig;
use brrr_backend::{Backend, Error, Result};
use brrr_checkpoint::{Chain, GptShape, Recompute, Strategy};
use brrr_nn::{CosineSchedule, GptConfig};
use serde::{Deserialize, Serialize};

/// A training run's configuration, as written to `config.toml` and into every
/// checkpoint's metadata.
///
/// Error messages name the `brrr train` flag of each field (`--seq-len` for
/// `seq_len`), since that is where most configurations come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// The model's shape (vocabulary, context, layers, heads, width).
    pub model: GptConfig,
    /// Total optimizer steps; the learning-rate schedule ends here.
    pub steps: u64,
    /// Sequences per micro-batch.
    pub batch_size: usize,
    /// Tokens per sequence (at most `model.block_size`).
    pub seq_len: usize,
    /// Micro-batches per optimizer step.
    pub grad_accum: usize,
    /// Seeds the weights and the batch sampler.
    pub seed: u64,
    /// Peak learning rate (after warmup).
    pub lr: f64,
    /// Final learning rate of the cosine decay.
    pub min_lr: f64,
    /// Steps of linear warmup.
    pub warmup_steps: u64,
    /// AdamW's decoupled weight decay (matrices only).
    pub weight_decay: f32,
    /// The global gradient norm is clipped to this.
    pub grad_clip: f64,
    /// Evaluate (and checkpoint) every this many steps, and at the last step.
    pub eval_every: u64,
    /// Validation batches per evaluation.
    pub eval_batches: usize,
    /// The corpus: a path, or [`crate::data::SYNTHETIC`].
    pub corpus: String,
    /// The tokenizer's name ([`ByteTokenizer::NAME`]).
    pub tokenizer: String,
    /// Activation recomputation (`--checkpoint`): what the forward keeps for the
    /// backward. Absent in configurations written before it existed: none.
    #[serde(default)]
    pub checkpoint: Strategy,
    /// Mixed precision (`--amp`): off by default, and in configurations written before
    /// it existed.
    #[serde(default)]
    pub amp: AmpConfig,
    /// A directory of token shards (`brrr data prepare`) to train on instead of
    /// `corpus`; empty for a text corpus.
    #[serde(default)]
    pub data: String,
    /// With `data`: attention stays inside each document of a window (`--doc-mask`;
    /// a [`crate::DocumentMask`] at the shards' end-of-text tokens). Off in
    /// configurations written before it existed.
    #[serde(default)]
    pub document_mask: bool,
    /// Attention's core as the backend's fused kernel where it applies
    /// ([`brrr_nn::CausalSelfAttention::fused`]: the backend has one, f32, no document
    /// mask), else the composite path; every engine (one device, data, tensor and
    /// pipeline parallel) builds its model with it. Off in configurations written
    /// before it existed.
    #[serde(default)]
    pub fused_attention: bool,
    /// How the run is spread over devices (`--dp`, `--tp`, `--sp`, `--pp`, `--zero`,
    /// `--schedule`, `--bucket-mb`): one device by default, and in configurations
    /// written before it existed.
    #[serde(default)]
    pub layout: Layout,
    /// AdamW's moments in f32, 8-bit, or GaLore's projection (`--optimizer`); plain
    /// AdamW in configurations written before it existed.
    #[serde(default)]
    pub optimizer: brrr_nn::Optimizer,
    /// A fine-tuning run (`brrr finetune`): the trained run it starts from, and LoRA.
    /// `None` (and absent in configurations written before it existed): a run from
    /// freshly initialised weights.
    #[serde(default)]
    pub finetune: Option<Finetune>,
    /// The optimizer's state and update on the host (`--offload`, ZeRO-Offload): the
    /// device keeps the weights and gradients. Off in configurations written before it
    /// existed.
    #[serde(default)]
    pub offload: bool,
}

/// Where a fine-tuning run starts, and what it trains.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finetune {
    /// The base run's directory: its one-device checkpoint's weights start this run
    /// (its optimizer state, step and data position do not).
    pub base: String,
    /// Train LoRA adapters beside the frozen weights (`--lora-rank`, `--lora-alpha`);
    /// `None`: every weight trains (full fine-tuning).
    #[serde(default)]
    pub lora: Option<brrr_nn::LoraConfig>,
}

impl Default for TrainConfig {
    /// `brrr train`'s defaults: the tiny GPT (4 layers, 4 heads, 128 wide, context 128)
    /// for 800 steps of 16 × 128 tokens on the shipped corpus.
    fn default() -> Self {
        TrainConfig {
            model: GptConfig {
                vocab_size: ByteTokenizer::VOCAB_SIZE,
                block_size: 128,
                n_layer: 4,
                n_head: 4,
                n_embd: 128,
            },
            steps: 800,
            batch_size: 16,
            seq_len: 128,
            grad_accum: 1,
            seed: 1337,
            lr: 2e-3,
            min_lr: 2e-4,
            warmup_steps: 50,
            weight_decay: 0.1,
            grad_clip: 1.0,
            eval_every: 100,
            eval_batches: 8,
            corpus: String::new(),
            tokenizer: ByteTokenizer::NAME.to_string(),
            checkpoint: Strategy::None,
            amp: AmpConfig::default(),
            data: String::new(),
            document_mask: false,
            fused_attention: false,
            layout: Layout::default(),
            optimizer: brrr_nn::Optimizer::AdamW,
            finetune: None,
            offload: false,
        }
    }
}

fn bad(msg: String) -> Result<()> {
    Err(Error::invalid("train", msg))
}

impl TrainConfig {
    /// What brrr-data's `DataSpec` opens and draws from for this run.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn data_options(&self) -> brrr_data::DataOptions {
        brrr_data::DataOptions {
            data: self.data.clone(),
            corpus: self.corpus.clone(),
            seed: self.seed,
            batch_size: self.batch_size,
            seq_len: self.seq_len,
            eval_batches: self.eval_batches,
            vocab_size: self.model.vocab_size,
            document_mask: self.document_mask,
        }
    }

    /// Checks every field; errors name the flag and the value.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        self.validate_sizes()?;
        self.validate_optimizer()?;
        if self.eval_every == 0 || self.eval_batches == 0 {
            return bad("--eval-every and --eval-batches must be at least 1".into());
        }
        self.amp.validate()?;
        self.layout.validate(self)?;
        if self.document_mask && self.data.is_empty() {
            return bad("--doc-mask needs --data: a text corpus has no document boundaries".into());
        }
        if self.document_mask && self.checkpoint != Strategy::None {
            return bad(format!(
                "--doc-mask with --checkpoint {} is not supported: use --checkpoint none",
                self.checkpoint
            ));
        }
        if self.checkpoint == Strategy::None {
            return Ok(());
        }
        // Sizes whose byte counts overflow are errors before the planner multiplies them.
        crate::memory::estimate(self)?;
        // An impossible budget is an error naming the smallest feasible one.
        self.checkpoint.plan(&self.recompute_chain()).map_err(|e| {
            Error::invalid("train", format!("--checkpoint {}: {e}", self.checkpoint))
        })?;
        Ok(())
    }

    /// The activation-recomputation executor of `--checkpoint` (`None` without it), the
    /// same plan in every layout: it is made for [`TrainConfig::recompute_chain`], the
    /// whole model's chain, so a shard recomputes exactly the blocks one device does.
    /// `T` is the head's targets as the model walked takes them.
    pub fn recompute<B: Backend, T: Clone>(&self) -> Result<Option<Recompute<B, T>>> {
        if self.checkpoint == Strategy::None {
            return Ok(None);
        }
        let chain = self.recompute_chain();
        let plan = self.checkpoint.plan(&chain).map_err(|e| {
            Error::invalid("train", format!("--checkpoint {}: {e}", self.checkpoint))
        })?;
        Recompute::new(plan, &chain).map(Some)
    }

    /// The model as the activation-recomputation planner sees it: the blocks and the
    /// head of one micro-batch, in f32, with the bytes each keeps.
    pub fn recompute_chain(&self) -> Chain {
        GptShape {
            n_layer: self.model.n_layer,
            n_head: self.model.n_head,
            n_embd: self.model.n_embd,
            vocab_size: self.model.vocab_size,
            batch: self.batch_size,
            seq_len: self.seq_len,
            dtype_bytes: 4,
        }
        .chain()
    }

    fn validate_sizes(&self) -> Result<()> {
        if self.steps == 0 {
            return bad("--steps must be at least 1".into());
        }
        if self.batch_size == 0 || self.seq_len == 0 || self.grad_accum == 0 {
            return bad("--batch-size, --seq-len and --grad-accum must be at least 1".into());
        }
        if self.seq_len > self.model.block_size {
            return bad(format!(
                "--seq-len {} exceeds the model's context of {} tokens; pass --block-size {} \
                 (or more) to train a model with a longer context",
                self.seq_len, self.model.block_size, self.seq_len
            ));
        }
        if self.model.vocab_size < ByteTokenizer::VOCAB_SIZE {
            return bad(format!(
                "vocab_size {} is smaller than the byte tokenizer's 256",
                self.model.vocab_size
            ));
        }
        Ok(())
    }

    fn validate_optimizer(&self) -> Result<()> {
        if self.lr.is_nan() || self.lr <= 0.0 || self.lr.is_infinite() {
            return bad(format!("--lr must be a positive number, got {}", self.lr));
        }
        if self.min_lr.is_nan() || self.min_lr < 0.0 || self.min_lr > self.lr {
            return bad(format!(
                "--min-lr must be between 0 and --lr {}, got {}",
                self.lr, self.min_lr
            ));
        }
        if !self.weight_decay.is_finite() || self.weight_decay < 0.0 {
            return bad(format!(
                "--weight-decay must be a finite number >= 0, got {}",
                self.weight_decay
            ));
        }
        if self.grad_clip.is_nan() || self.grad_clip <= 0.0 {
            return bad(format!(
                "--grad-clip must be positive, got {}",
                self.grad_clip
            ));
        }
        if let Some(lora) = self.lora() {
            lora.validate()?;
        }
        Ok(())
    }

    /// LoRA's options when this run trains adapters.
    pub fn lora(&self) -> Option<brrr_nn::LoraConfig> {
        self.finetune.as_ref().and_then(|f| f.lora)
    }

    /// Whether parameter `name` trains: every parameter, or with LoRA only the adapters.
    pub fn trains(&self, name: &str) -> bool {
        self.lora().is_none() || brrr_nn::lora::is_adapter(name)
    }

    /// The learning-rate schedule: warmup, then cosine decay to `min_lr` at `steps`.
    pub fn schedule(&self) -> CosineSchedule {
        CosineSchedule {
            max_lr: self.lr,
            min_lr: self.min_lr,
            warmup_steps: self.warmup_steps,
            total_steps: self.steps,
        }
    }

    /// Tokens per optimizer step: `batch_size · seq_len · grad_accum`.
    pub fn tokens_per_step(&self) -> usize {
        self.batch_size * self.seq_len * self.grad_accum
    }

    /// Whether the run evaluates (and checkpoints) after completing step `done`
    /// (counting from 1): every `eval_every` steps and at the last one. It depends only
    /// on the step, so an interrupted and resumed run evaluates where an uninterrupted
    /// one does.
    pub fn evaluates_at(&self, done: u64) -> bool {
        done.is_multiple_of(self.eval_every) || done == self.steps
    }
}
