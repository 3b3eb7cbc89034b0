//! [`LlmEngine`]: a model, its paged KV cache and a scheduler; [`LlmEngine::step`] runs
//! one batch of prefill chunks and decodes as one forward (nano-vllm's `LLMEngine`).

use crate::kv::{BatchSeq, KvCache};
use crate::sampling::{SamplingParams, sample_token};
use crate::scheduler::{FinishReason, Refused, Scheduled, Scheduler, SchedulerConfig, SeqId};
use brrr_backend::{Backend, DType, Error, Result};
use brrr_nn::{Gpt, MicroBatch, Module};
use brrr_tensor::Tensor;

/// An engine's sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Token slots per KV-cache block.
    pub block_size: usize,
    /// Blocks in the KV cache (`block_size · num_blocks` tokens in all).
    pub num_blocks: usize,
    /// Tokens one step computes at most (decodes and prefill chunks together).
    pub max_batch_tokens: usize,
    /// Requests running at once at most.
    pub max_seqs: usize,
    /// Sample among the first `vocab_limit` logits only (a byte-level model's padded
    /// vocabulary rows are never targets); `None`: all.
    pub vocab_limit: Option<usize>,
    /// Reuse the KV blocks of prompt prefixes computed before (on by default, as in
    /// vLLM; see [`crate::block`]).
    pub prefix_caching: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            block_size: 16,
            num_blocks: 256,
            max_batch_tokens: 512,
            max_seqs: 32,
            vocab_limit: None,
            prefix_caching: true,
        }
    }
}

/// A token one step produced for one request.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutput {
    /// The request.
    pub id: SeqId,
    /// The token.
    pub token: u32,
    /// Its log-probability under the model (before temperature, top-k and top-p):
    /// `logits[token] - logsumexp(logits)`.
    pub logprob: f32,
    /// Set when this token ended the request.
    pub finished: Option<FinishReason>,
}

/// Counters since the engine was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Forwards run.
    pub steps: u64,
    /// Tokens the forwards computed (prompt tokens, recomputed ones, decodes).
    pub tokens_computed: u64,
    /// Tokens sampled.
    pub tokens_generated: u64,
}

/// A served model (see the module's documentation).
pub struct LlmEngine<B: Backend> {
    model: Gpt<B>,
    cache: KvCache<B>,
    scheduler: Scheduler,
    config: EngineConfig,
    stats: EngineStats,
}

fn refused(e: Refused) -> Error {
    Error::invalid("serve", e.0)
}

impl<B: Backend> LlmEngine<B> {
    /// Serves `model`: allocates its KV cache (`2 · n_layer · num_blocks · block_size ·
    /// n_embd` values in the model's dtype) and points every layer's attention at it.
    pub fn new(mut model: Gpt<B>, config: EngineConfig) -> Result<Self> {
        let c = model.config.clone();
        let scheduler = Scheduler::new(SchedulerConfig {
            block_size: config.block_size,
            num_blocks: config.num_blocks,
            max_batch_tokens: config.max_batch_tokens,
            max_seqs: config.max_seqs,
            max_model_len: c.block_size,
            prefix_caching: config.prefix_caching,
        })
        .map_err(refused)?;
        let slots = config
            .num_blocks
            .checked_mul(config.block_size)
            .ok_or_else(|| Error::invalid("serve", "the KV cache has more than 2^32 slots"))?;
        let cache = attach_cache(&mut model, slots)?;
        Ok(LlmEngine {
            model,
            cache,
            scheduler,
            config,
            stats: EngineStats::default(),
        })
    }

    /// The model back, its attention uncached again.
    pub fn into_model(mut self) -> Gpt<B> {
        for block in &mut self.model.h {
            block.attn.cache = None;
        }
        self.model
    }

    /// The served model's shape (its context length, `block_size`, bounds every request).
    pub fn model_config(&self) -> &brrr_nn::GptConfig {
        &self.model.config
    }

    /// The scheduler: queues, blocks, preemptions.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Counters since the engine was built.
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Queues a request; refused at once if it could never run.
    pub fn add_request(&mut self, prompt: Vec<u32>, params: SamplingParams) -> Result<SeqId> {
        if let Some(&bad) = prompt
            .iter()
            .find(|&&t| t as usize >= self.model.config.vocab_size)
        {
            return Err(Error::invalid(
                "serve",
                format!(
                    "token {bad} is outside the vocabulary of {}",
                    self.model.config.vocab_size
                ),
            ));
        }
        self.scheduler.add(prompt, params).map_err(refused)
    }

    /// Ends a request now (a client went away): its blocks are freed.
    pub fn abort(&mut self, id: SeqId) -> Result<()> {
        self.scheduler.abort(id).map_err(refused)
    }

    /// The generated tokens of a finished request, taking it out; `None` while it runs.
    pub fn take_output(&mut self, id: SeqId) -> Option<Vec<u32>> {
        self.scheduler.remove(id).map(|s| s.output().to_vec())
    }

    /// One step: schedule, one forward over every scheduled token, sample. Returns the
    /// tokens sampled (none when nothing was scheduled).
    pub fn step(&mut self) -> Result<Vec<StepOutput>> {
        let batch = self.scheduler.schedule().map_err(refused)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let logits = self.forward(&batch)?;
        let mut sampled = vec![None; batch.len()];
        let mut logprobs = vec![0.0f32; batch.len()];
        let mut rows = logits.rows.iter().zip(&logits.logsumexp);
        for ((s, out), lp) in batch.iter().zip(&mut sampled).zip(&mut logprobs) {
            if !s.samples {
                continue;
            }
            let (logits, lse) = rows
                .next()
                .ok_or_else(|| Error::invalid("serve", "a logits row is missing"))?;
            let seq = self
                .scheduler
                .get_mut(s.id)
                .ok_or_else(|| Error::invalid("serve", format!("sequence {} is unknown", s.id)))?;
            let p = &seq.params;
            let t = sample_token(logits, p.temperature, p.top_k, p.top_p, &mut seq.rng)
                .map_err(|e| Error::invalid("serve", e))?;
            *out = Some(t as u32);
            *lp = logits[t] - lse;
        }
        self.scheduler.complete(&batch, &sampled).map_err(refused)?;
        self.stats.steps += 1;
        self.stats.tokens_computed += batch.iter().map(|s| s.len as u64).sum::<u64>();
        let outputs: Vec<StepOutput> = batch
            .iter()
            .zip(&sampled)
            .zip(&logprobs)
            .filter_map(|((s, t), &logprob)| {
                Some(StepOutput {
                    id: s.id,
                    token: (*t)?,
                    logprob,
                    finished: self.scheduler.get(s.id).and_then(|q| q.finished),
                })
            })
            .collect();
        self.stats.tokens_generated += outputs.len() as u64;
        Ok(outputs)
    }

    /// Runs `prompts` to the end with `params` (each request seeded `params.seed + i`)
    /// and returns each one's generated tokens.
    pub fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        params: &SamplingParams,
    ) -> Result<Vec<Vec<u32>>> {
        let ids = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let params = SamplingParams {
                    seed: params.seed.wrapping_add(i as u64),
                    ..params.clone()
                };
                self.add_request(p.clone(), params)
            })
            .collect::<Result<Vec<_>>>()?;
        while self.scheduler.num_unfinished() > 0 {
            let before = self.stats.steps;
            self.step()?;
            if self.stats.steps == before {
                return Err(Error::invalid("serve", "no request could be scheduled"));
            }
        }
        ids.iter()
            .map(|&id| {
                self.take_output(id)
                    .ok_or_else(|| Error::invalid("serve", format!("request {id} did not finish")))
            })
            .collect()
    }

    /// The forward of one batch: its tokens flattened into one row `[1, S]` with their
    /// positions, the cache told where each sequence's tokens go, logits computed for
    /// each sampling sequence's last token only. Returns those rows on the host.
    fn forward(&mut self, batch: &[Scheduled]) -> Result<LogitRows> {
        let bs = self.config.block_size;
        let (mut ids, mut pos, mut seqs, mut last) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for s in batch {
            let seq = self
                .scheduler
                .get(s.id)
                .ok_or_else(|| Error::invalid("serve", format!("sequence {} is unknown", s.id)))?;
            let new = s.start..s.start + s.len;
            let offset = ids.len();
            ids.extend_from_slice(&seq.tokens[new.clone()]);
            pos.extend(new.clone().map(|p| p as u32));
            let slots = |r| {
                seq.table.slots(r, bs).ok_or_else(|| {
                    Error::invalid("serve", "a block table is shorter than its sequence")
                })
            };
            seqs.push(BatchSeq {
                offset,
                new_slots: slots(new.clone())?,
                context_slots: slots(0..new.end)?,
            });
            if s.samples {
                last.push((offset + s.len - 1) as u32);
            }
        }
        forward_rows(
            &mut self.model,
            &self.cache,
            seqs,
            &ids,
            &pos,
            &last,
            self.config.vocab_limit,
        )
    }
}

/// A KV cache of `slots` token slots for `model`, every layer's attention pointed at it.
pub(crate) fn attach_cache<B: Backend>(model: &mut Gpt<B>, slots: usize) -> Result<KvCache<B>> {
    if slots > u32::MAX as usize {
        return Err(Error::invalid(
            "serve",
            "the KV cache has more than 2^32 slots",
        ));
    }
    let c = model.config.clone();
    let backend = model.wte.weight.value.backend().clone();
    let cache = KvCache::new(&backend, c.n_layer, slots, c.n_embd, model.dtype())?;
    for (i, block) in model.h.iter_mut().enumerate() {
        block.attn.cache = Some(Box::new(cache.layer(i)));
    }
    Ok(cache)
}

/// The logits a forward returns to the host: one row per sampling sequence (cut to the
/// vocabulary kept) and each row's log-sum-exp, for log-probabilities.
pub(crate) struct LogitRows {
    /// One row per sequence that samples, in the batch's order.
    pub rows: Vec<Vec<f32>>,
    /// `log Σ exp(row)` of each row, computed on the device (a decode step of `b`
    /// requests would otherwise take `b` passes of `exp` over the vocabulary on the host).
    pub logsumexp: Vec<f32>,
}

/// One forward of `model` over the tokens `ids` at positions `pos`, flattened into one
/// row `[1, S]`, through `cache` as `seqs` describe it; returns the logits of the rows
/// `rows` only (each cut to its first `keep` entries) on the host.
pub(crate) fn forward_rows<B: Backend>(
    model: &mut Gpt<B>,
    cache: &KvCache<B>,
    seqs: Vec<BatchSeq>,
    ids: &[u32],
    pos: &[u32],
    rows: &[u32],
    keep: Option<usize>,
) -> Result<LogitRows> {
    cache.set_batch(seqs)?;
    let backend = model.wte.weight.value.backend().clone();
    let n = ids.len();
    let ids = Tensor::from_u32(&backend, ids, [1, n])?;
    let pos = Tensor::from_u32(&backend, pos, [1, n])?;
    let mb = MicroBatch::default();
    let v = model.config.vocab_size;
    let keep = keep.unwrap_or(v).min(v);
    let logits = (|| {
        let x = model.hidden_mb(mb, &ids, Some(&pos))?; // [1, S, C]
        if rows.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let c = x.dims()[2];
        let picked =
            Tensor::from_u32(&backend, rows, [1, rows.len()])?.embedding(&x.reshape([n, c])?)?;
        let mut l = model.logits_mb(mb, &picked)?.to_dtype(DType::F32)?; // [1, r, V]
        if keep < v {
            l = l.narrow(2, 0, keep)?.contiguous()?;
        }
        // The largest logit subtracted first, so that exp never overflows.
        let max = l.max_dim(-1, true)?;
        let lse = l.sub(&max)?.exp()?.sum_dim(-1, true)?.log()?.add(&max)?;
        Ok((l.to_vec_f32()?, lse.to_vec_f32()?))
    })();
    // Inference keeps nothing for a backward.
    model.clear_saved();
    let (logits, logsumexp) = logits?;
    Ok(LogitRows {
        rows: logits.chunks(keep).map(<[f32]>::to_vec).collect(),
        logsumexp,
    })
}
