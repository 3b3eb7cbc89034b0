//! [`SpeculativeDecoder`]: a target GPT and a small draft GPT over one vocabulary, each
//! with its own KV cache, decoding a request by [`crate::speculative::verify`].
//!
//! One step: the draft proposes `k` tokens one forward at a time; the target runs one
//! forward over all of them (a `k + 1`-token chunk against its cache) and gives the
//! `k + 1` distributions `verify` needs; the accepted prefix and the one extra token are
//! appended. Rejected tokens need no undo: each cache is a contiguous run of slots
//! (slot = position), and a cache's count of computed tokens is moved back, so the
//! next forward writes over the rejected keys and values.
//!
//! One request at a time, as in the papers: the win is at small batches, where decoding
//! is bound by reading the target's weights and `k + 1` tokens cost about what one does.

use crate::engine::{attach_cache, forward_rows};
use crate::kv::{BatchSeq, KvCache};
use crate::sampling::{SamplingParams, probabilities};
use crate::speculative::{acceptance_probability, sample_from, verify};
use brrr_backend::{Backend, Error, Result};
use brrr_nn::Gpt;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

/// Counters since the decoder was built.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpeculativeStats {
    /// Target forwards (steps).
    pub target_forwards: u64,
    /// Draft forwards (one per proposal).
    pub draft_forwards: u64,
    /// Proposals verified: each step's accepted ones and the first rejected one.
    pub tested: u64,
    /// Proposals accepted.
    pub accepted: u64,
    /// Tokens emitted.
    pub generated: u64,
    /// `Σ min(p, q)` over the verified proposals' positions: the acceptance rate the
    /// two models' distributions predict, summed ([`acceptance_probability`]).
    pub alpha_sum: f64,
    /// Seconds spent in target forwards (each ends reading its logits back).
    pub target_seconds: f64,
    /// Seconds spent in draft forwards.
    pub draft_seconds: f64,
}

impl SpeculativeStats {
    /// Accepted proposals over verified ones: the measured `α`.
    pub fn acceptance_rate(&self) -> f64 {
        self.accepted as f64 / self.tested.max(1) as f64
    }

    /// The `α` the distributions predict: the mean of `Σ min(p, q)` over the verified
    /// positions (the same quantity as [`Self::acceptance_rate`], without the coin flips'
    /// noise).
    pub fn predicted_acceptance(&self) -> f64 {
        self.alpha_sum / self.tested.max(1) as f64
    }

    /// Tokens emitted per target forward (1 without speculation).
    pub fn tokens_per_step(&self) -> f64 {
        self.generated as f64 / self.target_forwards.max(1) as f64
    }
}

/// One model and its cache: `computed` tokens of the current request are in it.
struct Cached<B: Backend> {
    model: Gpt<B>,
    cache: KvCache<B>,
    computed: usize,
}

impl<B: Backend> Cached<B> {
    fn new(mut model: Gpt<B>) -> Result<Self> {
        let slots = model.config.block_size;
        let cache = attach_cache(&mut model, slots)?;
        Ok(Cached {
            model,
            cache,
            computed: 0,
        })
    }

    /// Runs `tokens[computed..]` (slot = position) and returns the logits at positions
    /// `from..tokens.len()`; afterwards all of `tokens` are computed.
    fn forward(
        &mut self,
        tokens: &[u32],
        from: usize,
        keep: Option<usize>,
    ) -> Result<Vec<Vec<f32>>> {
        let (start, end) = (self.computed, tokens.len());
        if !(start <= from && from < end) {
            return Err(Error::invalid(
                "speculative",
                format!("logits from position {from} of {end} with {start} computed"),
            ));
        }
        let pos: Vec<u32> = (start as u32..end as u32).collect();
        let rows: Vec<u32> = ((from - start) as u32..(end - start) as u32).collect();
        let seq = BatchSeq {
            offset: 0,
            new_slots: pos.clone(),
            context_slots: (0..end as u32).collect(),
        };
        let logits = forward_rows(
            &mut self.model,
            &self.cache,
            vec![seq],
            &tokens[start..],
            &pos,
            &rows,
            keep,
        )?;
        self.computed = end;
        Ok(logits.rows)
    }
}

/// Speculative decoding of one request at a time (see the module's documentation).
pub struct SpeculativeDecoder<B: Backend> {
    target: Cached<B>,
    draft: Cached<B>,
    k: usize,
    vocab_limit: Option<usize>,
    stats: SpeculativeStats,
}

fn invalid(e: impl std::fmt::Display) -> Error {
    Error::invalid("speculative", e.to_string())
}

impl<B: Backend> SpeculativeDecoder<B> {
    /// Decodes with `target`, `k` tokens at a time proposed by `draft` (`k = 0`: the
    /// target alone, one token per forward). Both must share the vocabulary; each gets a
    /// KV cache of its context length. `vocab_limit`: sample among the first logits only
    /// (as [`crate::EngineConfig::vocab_limit`]).
    pub fn new(
        target: Gpt<B>,
        draft: Gpt<B>,
        k: usize,
        vocab_limit: Option<usize>,
    ) -> Result<Self> {
        if target.config.vocab_size != draft.config.vocab_size {
            return Err(invalid(format!(
                "the draft's vocabulary ({}) is not the target's ({}): they must share a tokenizer",
                draft.config.vocab_size, target.config.vocab_size
            )));
        }
        Ok(SpeculativeDecoder {
            target: Cached::new(target)?,
            draft: Cached::new(draft)?,
            k,
            vocab_limit,
            stats: SpeculativeStats::default(),
        })
    }

    /// Counters since the decoder was built.
    pub fn stats(&self) -> SpeculativeStats {
        self.stats
    }

    /// Proposals per step.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Positions both models can attend to: the shorter context.
    pub fn context(&self) -> usize {
        let (t, d) = (&self.target.model.config, &self.draft.model.config);
        t.block_size.min(d.block_size)
    }

    /// The tokens generated after `prompt` (seeded by `params.seed`), until
    /// `params.max_tokens`, a stop token (kept) or the end of the shorter context.
    pub fn generate(&mut self, prompt: &[u32], params: &SamplingParams) -> Result<Vec<u32>> {
        params.validate().map_err(invalid)?;
        let vocab = self.target.model.config.vocab_size;
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(invalid(format!(
                "token {bad} is outside the vocabulary of {vocab}"
            )));
        }
        let ctx = self.context();
        if prompt.is_empty() || prompt.len() >= ctx {
            return Err(invalid(format!(
                "a prompt of {} tokens: it needs 1 to {} (the context is {ctx})",
                prompt.len(),
                ctx - 1
            )));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        let mut tokens = prompt.to_vec();
        (self.target.computed, self.draft.computed) = (0, 0);
        let mut out = Vec::new();
        while out.len() < params.max_tokens && tokens.len() < ctx {
            let k = self
                .k
                .min(params.max_tokens - out.len() - 1)
                .min(ctx - tokens.len() - 1);
            let emitted = self.step(&tokens, k, params, &mut rng)?;
            for t in emitted {
                tokens.push(t);
                out.push(t);
                if params.stop_tokens.contains(&t) {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }

    /// One step after `tokens`: `k` proposals, one verifying forward, the tokens kept.
    fn step(
        &mut self,
        tokens: &[u32],
        k: usize,
        params: &SamplingParams,
        rng: &mut ChaCha8Rng,
    ) -> Result<Vec<u32>> {
        let probs = |logits: &[f32]| {
            probabilities(logits, params.temperature, params.top_k, params.top_p).map_err(invalid)
        };
        let len = tokens.len();
        let mut seq = tokens.to_vec();
        let mut draft = Vec::with_capacity(k);
        let t0 = Instant::now();
        for _ in 0..k {
            let logits = self.draft.forward(&seq, seq.len() - 1, self.vocab_limit)?;
            let q = probs(&logits[0])?;
            let x = sample_from(&q, rng).ok_or_else(|| invalid("the draft has no mass"))?;
            seq.push(x as u32);
            draft.push(q);
        }
        let t1 = Instant::now();
        let target = self
            .target
            .forward(&seq, len - 1, self.vocab_limit)?
            .iter()
            .map(|l| probs(l))
            .collect::<Result<Vec<_>>>()?;
        let t2 = Instant::now();
        let verdict = verify(&target, &draft, &seq[len..], rng).map_err(invalid)?;
        let a = verdict.accepted;
        // Positions past the first rejected proposal hold tokens that are gone.
        self.target.computed = len + a;
        self.draft.computed = self.draft.computed.min(len + a);
        let tested = (a + 1).min(k);
        let s = &mut self.stats;
        s.target_forwards += 1;
        s.draft_forwards += k as u64;
        s.tested += tested as u64;
        s.accepted += a as u64;
        s.generated += a as u64 + 1;
        s.draft_seconds += (t1 - t0).as_secs_f64();
        s.target_seconds += (t2 - t1).as_secs_f64();
        s.alpha_sum += (0..tested)
            .map(|i| acceptance_probability(&target[i], &draft[i]))
            .sum::<f64>();
        let mut kept = seq[len..len + a].to_vec();
        kept.push(verdict.next);
        Ok(kept)
    }
}
