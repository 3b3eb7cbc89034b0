//! [`Scheduler`]: continuous batching with chunked prefill over a paged KV cache.
//!
//! Every step the scheduler picks which tokens the model computes: each running
//! sequence's next token (decode) first, then new requests' prompts, in chunks, while
//! a token budget lasts (Sarathi, Agrawal et al. 2024: decodes never wait behind a long
//! prompt, and a step's cost stays bounded). Requests join and leave at every step
//! (Orca, Yu et al. 2022). When the cache runs out of blocks the newest running
//! sequence is preempted: its blocks are freed and it goes back to the front of the
//! queue, to be recomputed from its tokens later (vLLM's recompute preemption). Nothing
//! here touches a device: it is bookkeeping, and compiles for wasm32.

use crate::block::{BlockAllocator, BlockTable};
use crate::sampling::SamplingParams;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};

/// A request's id, in the order requests arrived.
pub type SeqId = u64;

/// The scheduler's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Token slots per KV-cache block.
    pub block_size: usize,
    /// Blocks in the KV cache.
    pub num_blocks: usize,
    /// Tokens computed per step at most (decodes and prefill chunks together).
    pub max_batch_tokens: usize,
    /// Sequences running at once at most.
    pub max_seqs: usize,
    /// The model's context: prompt and output together at most (its position table).
    pub max_model_len: usize,
    /// Prefix caching: full computed blocks are kept under their contents, and a new
    /// prompt that starts with the same tokens reuses them instead of computing them.
    pub prefix_caching: bool,
}

/// Why a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It generated `max_tokens`.
    Length,
    /// It generated one of its stop tokens.
    Stop,
    /// It reached the model's context length.
    Context,
    /// The client cancelled it.
    Aborted,
}

/// One request: its tokens, how far the cache holds them, its blocks.
#[derive(Clone, Debug)]
pub struct Sequence {
    /// Its id.
    pub id: SeqId,
    /// Prompt, then the generated tokens.
    pub tokens: Vec<u32>,
    /// How many of `tokens` are the prompt.
    pub prompt_len: usize,
    /// Tokens whose keys and values are in the cache.
    pub computed: usize,
    /// Its KV-cache blocks.
    pub table: BlockTable,
    /// How its tokens are chosen.
    pub params: SamplingParams,
    /// Its random stream (seeded from `params.seed`, kept across preemptions, so a
    /// request's tokens do not depend on what else ran).
    pub rng: ChaCha8Rng,
    /// Set when it ended.
    pub finished: Option<FinishReason>,
    /// Prefix caching: the keys of its first full blocks, registered or reused
    /// (`keys[i]` is block `i`'s, see [`crate::block::block_hash`]).
    pub keys: Vec<u64>,
}

impl Sequence {
    /// Tokens generated so far.
    pub fn output(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }
}

/// Tokens `start..start + len` of sequence `id`, computed this step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scheduled {
    /// The sequence.
    pub id: SeqId,
    /// Position of the first token computed.
    pub start: usize,
    /// Tokens computed.
    pub len: usize,
    /// Whether this reaches the sequence's last token, so the step samples its next one
    /// (false for a prefill chunk that is not the prompt's last).
    pub samples: bool,
}

/// A request the scheduler refused at once (it could never run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Continuous batching over a [`BlockAllocator`] (see the module's documentation).
pub struct Scheduler {
    config: SchedulerConfig,
    allocator: BlockAllocator,
    waiting: VecDeque<SeqId>,
    running: Vec<SeqId>,
    seqs: BTreeMap<SeqId, Sequence>,
    next_id: SeqId,
    /// Sequences preempted so far (their blocks taken back and recomputed later).
    pub preemptions: u64,
    /// Prompt tokens whose keys and values came from the prefix cache, not the model.
    pub prefix_hit_tokens: u64,
}

impl Scheduler {
    /// An empty scheduler; a zero limit is refused.
    pub fn new(config: SchedulerConfig) -> Result<Self, Refused> {
        let c = &config;
        if c.block_size == 0
            || c.num_blocks == 0
            || c.max_batch_tokens == 0
            || c.max_seqs == 0
            || c.max_model_len == 0
        {
            return Err(Refused(format!(
                "every scheduler limit must be at least 1: {config:?}"
            )));
        }
        Ok(Scheduler {
            allocator: BlockAllocator::new(c.num_blocks, c.block_size),
            config,
            waiting: VecDeque::new(),
            running: Vec::new(),
            seqs: BTreeMap::new(),
            next_id: 0,
            preemptions: 0,
            prefix_hit_tokens: 0,
        })
    }

    /// The limits it was built with.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The KV-cache blocks (free, used, shared).
    pub fn allocator(&self) -> &BlockAllocator {
        &self.allocator
    }

    /// Queues a request; refused if it could never run (empty, longer than the
    /// context, more blocks than the whole cache, bad sampling values).
    pub fn add(&mut self, prompt: Vec<u32>, params: SamplingParams) -> Result<SeqId, Refused> {
        params.validate().map_err(Refused)?;
        if prompt.is_empty() {
            return Err(Refused("the prompt is empty".into()));
        }
        if prompt.len() >= self.config.max_model_len {
            return Err(Refused(format!(
                "the prompt's {} tokens leave no room in the model's context of {}",
                prompt.len(),
                self.config.max_model_len
            )));
        }
        let longest = (prompt.len() + params.max_tokens).min(self.config.max_model_len);
        if self.allocator.blocks_for(longest) > self.allocator.num_blocks() {
            return Err(Refused(format!(
                "{longest} tokens need {} KV-cache blocks, the cache has {}",
                self.allocator.blocks_for(longest),
                self.allocator.num_blocks()
            )));
        }
        let id = self.next_id;
        self.next_id += 1;
        let seq = Sequence {
            id,
            prompt_len: prompt.len(),
            tokens: prompt,
            computed: 0,
            table: BlockTable::default(),
            rng: ChaCha8Rng::seed_from_u64(params.seed),
            params,
            finished: None,
            keys: Vec::new(),
        };
        self.seqs.insert(id, seq);
        self.waiting.push_back(id);
        Ok(id)
    }

    /// A sequence, running, waiting or finished (until [`Scheduler::remove`]).
    pub fn get(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    /// A sequence, to sample into (the engine).
    pub fn get_mut(&mut self, id: SeqId) -> Option<&mut Sequence> {
        self.seqs.get_mut(&id)
    }

    /// Takes a finished sequence out.
    pub fn remove(&mut self, id: SeqId) -> Option<Sequence> {
        if self.seqs.get(&id)?.finished.is_some() {
            self.seqs.remove(&id)
        } else {
            None
        }
    }

    /// Requests waiting and running.
    pub fn num_unfinished(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    /// Sequences running now.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Sequences waiting for their prefill (new or preempted).
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Ends request `id` now (a client went away) and frees its blocks.
    pub fn abort(&mut self, id: SeqId) -> Result<(), Refused> {
        self.waiting.retain(|&w| w != id);
        self.running.retain(|&r| r != id);
        self.finish(id, FinishReason::Aborted)
    }

    /// The tokens to compute this step (see the module's documentation); empty when
    /// nothing is waiting or running.
    pub fn schedule(&mut self) -> Result<Vec<Scheduled>, Refused> {
        let mut budget = self.config.max_batch_tokens;
        let mut batch = Vec::new();
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let want = self.pending(id).min(budget);
            if self.reserve(id, want)? {
                batch.push(self.scheduled(id, want));
                budget -= want;
                i += 1;
            } else if self.running.len() > i + 1 {
                // Preempt the newest other sequence and try again.
                let victim = *self.running.last().unwrap_or(&id);
                self.preempt(victim)?;
            } else {
                // This one is the newest left: it yields its own blocks.
                self.preempt(id)?;
            }
        }
        while budget > 0 && self.running.len() < self.config.max_seqs {
            let Some(&id) = self.waiting.front() else {
                break;
            };
            let reused = self.reuse_prefix(id)?;
            let want = self.pending(id).min(budget);
            if !self.reserve(id, want)? {
                self.forget_computed(id)?;
                break; // no room: it waits, nobody is preempted for a newcomer
            }
            self.prefix_hit_tokens += reused as u64;
            self.waiting.pop_front();
            self.running.push(id);
            batch.push(self.scheduled(id, want));
            budget -= want;
        }
        Ok(batch)
    }

    /// After the model computed `batch`: advances each sequence, appends the tokens
    /// sampled for those that sample (`sampled[i]` for `batch[i]`, `None` otherwise),
    /// ends those that are done and frees their blocks. Returns the ids that finished.
    pub fn complete(
        &mut self,
        batch: &[Scheduled],
        sampled: &[Option<u32>],
    ) -> Result<Vec<SeqId>, Refused> {
        let mut done = Vec::new();
        for (s, tok) in batch.iter().zip(sampled) {
            let max_len = self.config.max_model_len;
            let seq = self
                .seqs
                .get_mut(&s.id)
                .ok_or_else(|| Refused(format!("sequence {} is unknown", s.id)))?;
            seq.computed = s.start + s.len;
            if self.config.prefix_caching {
                register_full_blocks(&mut self.allocator, seq);
            }
            let Some(t) = *tok else { continue };
            seq.tokens.push(t);
            let reason = if seq.params.stop_tokens.contains(&t) {
                Some(FinishReason::Stop)
            } else if seq.output().len() >= seq.params.max_tokens {
                Some(FinishReason::Length)
            } else if seq.tokens.len() >= max_len {
                Some(FinishReason::Context)
            } else {
                None
            };
            if let Some(r) = reason {
                self.running.retain(|&x| x != s.id);
                self.finish(s.id, r)?;
                done.push(s.id);
            }
        }
        Ok(done)
    }

    /// The running sequences, in the order a step serves them (oldest first).
    pub fn running(&self) -> &[SeqId] {
        &self.running
    }

    /// The queue, next first (preempted sequences go to its front).
    pub fn waiting(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.waiting.iter().copied()
    }

    /// Tokens of `id` not yet in the cache: 1 for a decoding sequence, the rest of its
    /// prompt for one in prefill, all its tokens for a preempted one.
    pub fn pending(&self, id: SeqId) -> usize {
        self.seqs
            .get(&id)
            .map_or(0, |s| s.tokens.len().saturating_sub(s.computed))
    }

    fn scheduled(&self, id: SeqId, len: usize) -> Scheduled {
        let s = &self.seqs[&id];
        Scheduled {
            id,
            start: s.computed,
            len,
            samples: s.computed + len == s.tokens.len(),
        }
    }

    /// Blocks for `want` more tokens of `id`: `false` if the cache has too few free.
    fn reserve(&mut self, id: SeqId, want: usize) -> Result<bool, Refused> {
        let seq = self
            .seqs
            .get_mut(&id)
            .ok_or_else(|| Refused(format!("sequence {id} is unknown")))?;
        Ok(self
            .allocator
            .grow(&mut seq.table, seq.computed + want)
            .is_ok())
    }

    /// Prefix caching, for a sequence about to start (nothing computed): takes the
    /// cached blocks that hold its first full blocks of tokens, as far as they match,
    /// and counts them computed. At least its last token is left to compute (its
    /// logits are what the step samples from). Returns the tokens reused.
    fn reuse_prefix(&mut self, id: SeqId) -> Result<usize, Refused> {
        let bs = self.config.block_size;
        let seq = self
            .seqs
            .get_mut(&id)
            .ok_or_else(|| Refused(format!("sequence {id} is unknown")))?;
        if !self.config.prefix_caching || seq.computed > 0 {
            return Ok(0);
        }
        let mut parent = 0;
        seq.keys.clear();
        for block in seq.tokens[..seq.tokens.len() - 1].chunks_exact(bs) {
            let Some(b) = self.allocator.lookup(parent, block) else {
                break;
            };
            seq.table.blocks.push(b);
            parent = crate::block::block_hash(parent, block);
            seq.keys.push(parent);
        }
        seq.computed = seq.table.blocks.len() * bs;
        Ok(seq.computed)
    }

    /// Frees `id`'s blocks and counts nothing of it computed: a preempted sequence, or
    /// one that goes on waiting after [`Scheduler::reuse_prefix`] (its cached blocks stay
    /// reusable, and evictable, meanwhile).
    fn forget_computed(&mut self, id: SeqId) -> Result<(), Refused> {
        let seq = self
            .seqs
            .get_mut(&id)
            .ok_or_else(|| Refused(format!("sequence {id} is unknown")))?;
        self.allocator.free_table(&mut seq.table).map_err(Refused)?;
        seq.computed = 0;
        seq.keys.clear();
        Ok(())
    }

    /// Frees `id`'s blocks and puts it at the front of the queue, to be recomputed.
    fn preempt(&mut self, id: SeqId) -> Result<(), Refused> {
        self.running.retain(|&r| r != id);
        self.forget_computed(id)?;
        self.waiting.push_front(id);
        self.preemptions += 1;
        Ok(())
    }

    fn finish(&mut self, id: SeqId, reason: FinishReason) -> Result<(), Refused> {
        let seq = self
            .seqs
            .get_mut(&id)
            .ok_or_else(|| Refused(format!("sequence {id} is unknown")))?;
        self.allocator.free_table(&mut seq.table).map_err(Refused)?;
        seq.finished = Some(reason);
        Ok(())
    }
}

/// Registers each block of `seq` that became full and computed since the last call,
/// keyed by its contents and the key before it.
fn register_full_blocks(allocator: &mut BlockAllocator, seq: &mut Sequence) {
    let bs = allocator.block_size();
    let full = (seq.computed / bs).min(seq.table.blocks.len());
    for i in seq.keys.len()..full {
        let parent = i.checked_sub(1).map_or(0, |p| seq.keys[p]);
        let tokens = &seq.tokens[i * bs..(i + 1) * bs];
        let key = allocator.register(seq.table.blocks[i], parent, tokens);
        seq.keys.push(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(num_blocks: usize, max_batch_tokens: usize) -> SchedulerConfig {
        SchedulerConfig {
            block_size: 4,
            num_blocks,
            max_batch_tokens,
            max_seqs: 8,
            max_model_len: 64,
            prefix_caching: false,
        }
    }

    /// Runs the scheduler with a fake model that always samples token 7.
    fn drain(s: &mut Scheduler) -> (usize, Vec<Vec<Scheduled>>) {
        let mut steps = Vec::new();
        while s.num_unfinished() > 0 {
            let batch = s.schedule().unwrap();
            assert!(!batch.is_empty(), "no progress with work left");
            let sampled: Vec<_> = batch.iter().map(|b| b.samples.then_some(7)).collect();
            s.complete(&batch, &sampled).unwrap();
            steps.push(batch);
        }
        (steps.len(), steps)
    }

    #[test]
    fn requests_join_a_running_batch_and_long_prompts_come_in_chunks() {
        let mut s = Scheduler::new(config(64, 8)).unwrap();
        let a = s.add(vec![1; 3], SamplingParams::greedy(4)).unwrap();
        let first = s.schedule().unwrap();
        assert_eq!(first.len(), 1);
        s.complete(&first, &[Some(7)]).unwrap();
        // A 10-token prompt arrives while `a` decodes: one step has a's decode and the
        // first 7 prompt tokens (the budget of 8), the next the remaining 3.
        let b = s.add(vec![2; 10], SamplingParams::greedy(2)).unwrap();
        let second = s.schedule().unwrap();
        assert_eq!(
            second,
            [
                Scheduled {
                    id: a,
                    start: 3,
                    len: 1,
                    samples: true
                },
                Scheduled {
                    id: b,
                    start: 0,
                    len: 7,
                    samples: false
                },
            ]
        );
        s.complete(&second, &[Some(7), None]).unwrap();
        let third = s.schedule().unwrap();
        assert_eq!(
            third[1],
            Scheduled {
                id: b,
                start: 7,
                len: 3,
                samples: true
            }
        );
        s.complete(&third, &[Some(7), Some(7)]).unwrap();
        drain(&mut s);
        assert_eq!(s.get(a).unwrap().output(), [7; 4]);
        assert_eq!(s.get(b).unwrap().finished, Some(FinishReason::Length));
        assert_eq!(s.allocator().num_used(), 0, "every block came back");
    }

    #[test]
    fn a_full_cache_preempts_and_every_request_still_finishes() {
        // 6 blocks of 4 slots; three requests that grow to 12 tokens (3 blocks) each
        // cannot all be resident: some are preempted and recomputed.
        let mut s = Scheduler::new(config(6, 32)).unwrap();
        let ids: Vec<_> = (0..3)
            .map(|i| s.add(vec![i; 4], SamplingParams::greedy(8)).unwrap())
            .collect();
        drain(&mut s);
        assert!(s.preemptions > 0);
        for id in ids {
            let seq = s.get(id).unwrap();
            assert_eq!(
                (seq.output().len(), seq.finished),
                (8, Some(FinishReason::Length))
            );
        }
        assert_eq!(s.allocator().num_used(), 0);
    }

    #[test]
    fn impossible_requests_are_refused_up_front() {
        let mut s = Scheduler::new(config(2, 8)).unwrap();
        assert!(s.add(vec![], SamplingParams::greedy(1)).is_err());
        assert!(s.add(vec![1; 64], SamplingParams::greedy(1)).is_err());
        let e = s.add(vec![1; 4], SamplingParams::greedy(20)).unwrap_err();
        assert!(e.0.contains("blocks"), "{e}");
        let id = s.add(vec![1; 2], SamplingParams::greedy(2)).unwrap();
        s.abort(id).unwrap();
        assert_eq!((s.num_unfinished(), s.allocator().num_used()), (0, 0));
    }

    /// Prefix caching: a second request with the same 8-token start reuses the two
    /// full blocks the first computed (its first step computes only the rest: every
    /// token it computes lies past the shared blocks, which are never written), and
    /// the outputs are what they are without the cache.
    #[test]
    fn a_shared_prompt_prefix_is_computed_once() {
        let run = |caching: bool| {
            let mut s = Scheduler::new(SchedulerConfig {
                prefix_caching: caching,
                ..config(16, 64)
            })
            .unwrap();
            let prompt = |tail: u32| vec![1, 2, 3, 4, 5, 6, 7, 8, tail];
            let a = s.add(prompt(9), SamplingParams::greedy(3)).unwrap();
            drain(&mut s);
            let b = s.add(prompt(10), SamplingParams::greedy(3)).unwrap();
            let first = s.schedule().unwrap();
            s.complete(&first, &[Some(7)]).unwrap();
            drain(&mut s);
            let outputs = [a, b].map(|id| s.get(id).unwrap().output().to_vec());
            assert_eq!(s.allocator().num_used(), 0, "every reference came back");
            (first[0].clone(), s.prefix_hit_tokens, outputs)
        };
        let (first, hits, outputs) = run(true);
        assert_eq!((first.start, first.len, hits), (8, 1, 8));
        let (plain, no_hits, plain_outputs) = run(false);
        assert_eq!((plain.start, plain.len, no_hits), (0, 9, 0));
        assert_eq!(outputs, plain_outputs);
        // A 4-token prompt never reuses its last token's block, even when cached.
        let mut s = Scheduler::new(SchedulerConfig {
            prefix_caching: true,
            ..config(16, 64)
        })
        .unwrap();
        s.add(vec![1, 2, 3, 4], SamplingParams::greedy(1)).unwrap();
        drain(&mut s);
        s.add(vec![1, 2, 3, 4], SamplingParams::greedy(1)).unwrap();
        assert_eq!(s.schedule().unwrap()[0].start, 0);
    }
}
