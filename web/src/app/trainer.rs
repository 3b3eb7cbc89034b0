//! The training demo's engine: brrr-train's `Trainer` stepping a brrr-nn GPT on the
//! shipped corpus, yielding to the browser between steps, and sampling from the model.

use crate::app::util::{fetch_text, now_s, yield_now};
use crate::logic::sampling::{TrainPreset, pick, tokens_per_s};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_nn::{Gpt, Module};
use brrr_tensor::Tensor;
use brrr_train::{Batcher, ByteTokenizer, Corpus, TrainConfig, Trainer, load_params, val_batches};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;

/// The corpus `brrr train` uses (`crates/brrr/corpus/sotu.txt`), copied beside the app by
/// `scripts/build-web.sh` and fetched on first use.
pub const CORPUS_URL: &str = "sotu.txt";

thread_local! {
    static CORPUS: RefCell<Option<Corpus>> = const { RefCell::new(None) };
}

/// The shipped corpus, fetched once per tab.
pub async fn corpus() -> Result<Corpus> {
    if let Some(c) = CORPUS.with(|c| c.borrow().clone()) {
        return Ok(c);
    }
    let text = fetch_text(CORPUS_URL)
        .await
        .map_err(|e| Error::file(CORPUS_URL, e))?;
    let c = Corpus::from_text(CORPUS_URL, text)?;
    CORPUS.with(|slot| *slot.borrow_mut() = Some(c.clone()));
    Ok(c)
}

/// The run's configuration for a preset and a step count.
pub fn config(p: &TrainPreset, steps: u64) -> TrainConfig {
    let mut cfg = TrainConfig {
        steps,
        batch_size: p.batch_size,
        seq_len: p.seq_len,
        lr: p.lr,
        min_lr: p.lr / 10.0,
        warmup_steps: (steps / 20).clamp(1, 50),
        eval_every: (steps / 6).max(1),
        eval_batches: 4,
        corpus: CORPUS_URL.into(),
        ..TrainConfig::default()
    };
    (
        cfg.model.n_layer,
        cfg.model.n_head,
        cfg.model.n_embd,
        cfg.model.block_size,
    ) = (p.n_layer, p.n_head, p.n_embd, p.seq_len);
    cfg
}

/// What the page shows while a run goes on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    /// `(step, training loss)`.
    pub losses: Vec<(u64, f32)>,
    /// `(step, validation loss)`.
    pub evals: Vec<(u64, f32)>,
    /// Steps of the run.
    pub total_steps: u64,
    /// Tokens per step.
    pub tokens_per_step: usize,
    /// Parameters of the model.
    pub params: usize,
    /// Tokens per second after the first step.
    pub tokens_per_s: Option<f64>,
    /// Unigram entropy of the corpus: what a model that ignores context scores.
    pub unigram_nats: f64,
}

/// Creates the trainer on `backend` for `cfg` over `corpus`.
pub fn make_trainer<B: Backend>(
    backend: &B,
    cfg: TrainConfig,
    corpus: &Corpus,
) -> Result<Trainer<B>> {
    let data = Batcher::for_corpus(corpus, cfg.batch_size, cfg.seq_len, cfg.seed)?;
    let val = val_batches(corpus.val(), cfg.batch_size, cfg.seq_len, cfg.eval_batches)?;
    Trainer::new(backend, cfg, Box::new(data), val)
}

/// Steps `trainer` until it finishes or `keep_going` says stop, evaluating when the config
/// says, reporting to `report` and yielding to the browser after every step.
pub async fn train<B: Backend>(
    trainer: &mut Trainer<B>,
    progress: &mut Progress,
    mut keep_going: impl FnMut() -> bool,
    mut report: impl FnMut(&Progress),
) -> Result<()> {
    // Throughput counts step time only (the read back included), not evaluations or the
    // yields, and skips each run's first step, which also compiles kernels and allocates.
    let (mut seconds, mut tokens) = (0.0, 0usize);
    let first = trainer.steps_done() + 1;
    while !trainer.is_finished() && keep_going() {
        let t0 = now_s();
        let s = trainer.step().await?;
        if s.step > first {
            seconds += now_s() - t0;
            tokens += s.tokens;
            progress.tokens_per_s = tokens_per_s(tokens, seconds);
        }
        progress.losses.push((s.step, s.loss));
        if trainer.config().evaluates_at(s.step) {
            let val = trainer.evaluate().await?;
            progress.evals.push((s.step, val));
        }
        report(progress);
        yield_now().await;
    }
    Ok(())
}

/// Text from the model as trained so far: `prompt` continued by `tokens` bytes drawn with
/// `temperature` among the 40 likeliest. Yields to the browser every few tokens.
pub async fn sample<B: Backend>(
    trainer: &Trainer<B>,
    prompt: &str,
    tokens: usize,
    temperature: f32,
    seed: u64,
) -> Result<String> {
    let backend = trainer.backend();
    let cfg = trainer.config().model.clone();
    let state = trainer.state().await?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut model = Gpt::new(backend, cfg.clone(), DType::F32, &mut rng)?;
    load_params(backend, &mut model, &state)?;
    let tok = ByteTokenizer;
    let mut ids = tok.encode(prompt);
    if ids.is_empty() {
        ids.push(u32::from(b'\n'));
    }
    let start = ids.len();
    for i in 0..tokens {
        let ctx = &ids[ids.len().saturating_sub(cfg.block_size)..];
        let x = Tensor::from_u32(backend, ctx, [1, ctx.len()])?;
        let logits = model.forward(&x)?;
        model.clear_saved();
        let all = logits.to_host().await?.to_f32();
        let v = cfg.vocab_size;
        let row = (ctx.len() - 1) * v;
        // Only the byte range is a token; padded vocabulary rows are never targets.
        let last = all
            .get(row..row + ByteTokenizer::VOCAB_SIZE)
            .ok_or_else(|| Error::invalid("sample", "logits shorter than the vocabulary"))?;
        let next = pick(last, temperature, 40, &mut rng).ok_or_else(|| {
            Error::invalid("sample", "the logits are not finite: the run diverged")
        })?;
        ids.push(next as u32);
        if i % 8 == 7 {
            yield_now().await;
        }
    }
    Ok(tok.decode(&ids[start..]))
}
