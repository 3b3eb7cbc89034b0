//! The serving page: brrr-serve's real `Scheduler` (continuous batching, chunked
//! prefill, paged KV blocks, preemption, prefix caching) run step by step on the
//! reader's requests, with a stand-in for the model that always samples the same token:
//! the scheduling does not depend on what the model says, only on how many tokens each
//! request has and wants. Also run one request at a time, for the comparison.

use brrr_serve::{SamplingParams, Scheduled, Scheduler, SchedulerConfig};

/// The largest sizes the page offers (a step stays drawable).
pub const MAX_REQUESTS: usize = 32;
/// Longest prompt.
pub const MAX_PROMPT: usize = 512;
/// Most tokens a request generates.
pub const MAX_OUTPUT: usize = 256;
/// Most KV-cache blocks.
pub const MAX_BLOCKS: usize = 4096;
/// Steps simulated at most (a run that needs more is reported as cut short).
pub const MAX_STEPS: usize = 5000;

/// What the reader picked.
#[derive(Clone, Debug, PartialEq)]
pub struct ServingInput {
    /// Requests, one arriving every `arrival_gap` steps.
    pub requests: usize,
    /// Steps between arrivals (0: all at once).
    pub arrival_gap: usize,
    /// Prompt tokens per request.
    pub prompt: usize,
    /// Of those, how many every request shares at its start (a system prompt).
    pub shared_prefix: usize,
    /// Tokens each request generates.
    pub output: usize,
    /// Token slots per KV block.
    pub block_size: usize,
    /// KV blocks in the cache.
    pub num_blocks: usize,
    /// Tokens one step computes at most.
    pub max_batch_tokens: usize,
    /// Requests running at once at most.
    pub max_seqs: usize,
    /// Reuse cached prompt blocks.
    pub prefix_caching: bool,
}

impl Default for ServingInput {
    fn default() -> Self {
        ServingInput {
            requests: 12,
            arrival_gap: 2,
            prompt: 96,
            shared_prefix: 64,
            output: 24,
            block_size: 16,
            num_blocks: 64,
            max_batch_tokens: 128,
            max_seqs: 8,
            prefix_caching: true,
        }
    }
}

/// One step: what each request computed, and the cache after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// `(request, tokens computed, whether it was a decode)`.
    pub work: Vec<(usize, usize, bool)>,
    /// KV blocks referenced after the step.
    pub blocks_used: usize,
    /// Blocks kept for prefix caching (referenced or not).
    pub blocks_cached: usize,
    /// Requests running after the step.
    pub running: usize,
    /// Requests waiting after the step.
    pub waiting: usize,
}

/// Totals of one simulation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    /// Steps (model forwards) until every request finished.
    pub steps: usize,
    /// Tokens the model computed (prompts, recomputations, decodes).
    pub computed: u64,
    /// Prompt tokens taken from the prefix cache.
    pub prefix_hits: u64,
    /// Requests preempted (their blocks taken back, recomputed later).
    pub preemptions: u64,
    /// Most blocks in use at once.
    pub peak_blocks: usize,
    /// Each request's steps from arrival to its last token.
    pub latency: Vec<usize>,
    /// The run needed more than [`MAX_STEPS`] steps and was cut.
    pub cut: bool,
}

/// Everything the page shows.
#[derive(Clone, Debug)]
pub struct ServingView {
    /// The steps of the continuous-batching run.
    pub steps: Vec<Step>,
    /// Its totals.
    pub batched: Totals,
    /// The same requests with one running at a time (`max_seqs = 1`).
    pub one_at_a_time: Totals,
}

fn check(input: &ServingInput) -> Result<(), String> {
    let bounded = [
        ("requests", input.requests, MAX_REQUESTS),
        ("prompt tokens", input.prompt, MAX_PROMPT),
        ("output tokens", input.output, MAX_OUTPUT),
        ("KV blocks", input.num_blocks, MAX_BLOCKS),
    ];
    for (what, v, max) in bounded {
        if v == 0 || v > max {
            return Err(format!("{what}: {v} is outside 1..={max}"));
        }
    }
    if input.shared_prefix > input.prompt {
        return Err(format!(
            "the shared prefix ({}) is longer than the prompt ({})",
            input.shared_prefix, input.prompt
        ));
    }
    Ok(())
}

/// Request `i`'s prompt: the shared prefix, then tokens of its own.
fn prompt(input: &ServingInput, i: usize) -> Vec<u32> {
    (0..input.prompt)
        .map(|k| match k < input.shared_prefix {
            true => 1 + k as u32,
            false => 10_000 + (i * MAX_PROMPT + k) as u32,
        })
        .collect()
}

/// Runs the scheduler on `input`'s requests with `max_seqs` running at once.
pub fn simulate(input: &ServingInput, max_seqs: usize) -> Result<(Vec<Step>, Totals), String> {
    check(input)?;
    let mut s = Scheduler::new(SchedulerConfig {
        block_size: input.block_size,
        num_blocks: input.num_blocks,
        max_batch_tokens: input.max_batch_tokens,
        max_seqs,
        max_model_len: input.prompt + input.output + 1,
        prefix_caching: input.prefix_caching,
    })
    .map_err(|e| e.0)?;
    let (mut steps, mut totals) = (Vec::new(), Totals::default());
    let (mut ids, mut arrived) = (Vec::new(), Vec::new());
    let mut done = vec![None; input.requests];
    for t in 0..MAX_STEPS {
        while ids.len() < input.requests && ids.len() * input.arrival_gap <= t {
            let id = s
                .add(
                    prompt(input, ids.len()),
                    SamplingParams::greedy(input.output),
                )
                .map_err(|e| e.0)?;
            ids.push(id);
            arrived.push(t);
        }
        if ids.len() == input.requests && s.num_unfinished() == 0 {
            break;
        }
        let batch = s.schedule().map_err(|e| e.0)?;
        let step = record(&s, &ids, &batch);
        // The stand-in for the model: every sampling request gets token 0.
        let sampled: Vec<Option<u32>> = batch.iter().map(|b| b.samples.then_some(0)).collect();
        for id in s.complete(&batch, &sampled).map_err(|e| e.0)? {
            if let Some(i) = ids.iter().position(|&x| x == id) {
                done[i] = Some(t + 1 - arrived[i]);
            }
        }
        totals.computed += batch.iter().map(|b| b.len as u64).sum::<u64>();
        totals.peak_blocks = totals.peak_blocks.max(step.blocks_used);
        steps.push(Step {
            blocks_used: s.allocator().num_used(),
            blocks_cached: s.allocator().num_cached(),
            running: s.num_running(),
            waiting: s.num_waiting(),
            ..step
        });
    }
    totals.steps = steps.len();
    totals.prefix_hits = s.prefix_hit_tokens;
    totals.preemptions = s.preemptions;
    totals.cut = done.iter().any(Option::is_none);
    totals.latency = done.into_iter().flatten().collect();
    Ok((steps, totals))
}

/// A step's work by request index, before the scheduler completes it.
fn record(s: &Scheduler, ids: &[u64], batch: &[Scheduled]) -> Step {
    let work = batch
        .iter()
        .map(|b| {
            let i = ids.iter().position(|&x| x == b.id).unwrap_or(0);
            let decode = s.get(b.id).is_some_and(|q| b.start >= q.prompt_len);
            (i, b.len, decode)
        })
        .collect();
    Step {
        work,
        blocks_used: s.allocator().num_used(),
        blocks_cached: 0,
        running: 0,
        waiting: 0,
    }
}

/// The page: the continuous-batching run and the one-at-a-time run of the same requests.
pub fn view(input: &ServingInput) -> Result<ServingView, String> {
    let (steps, batched) = simulate(input, input.max_seqs)?;
    let (_, one_at_a_time) = simulate(input, 1)?;
    Ok(ServingView {
        steps,
        batched,
        one_at_a_time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batching_takes_fewer_steps_than_one_at_a_time() {
        let v = view(&ServingInput::default()).unwrap();
        let (b, one) = (&v.batched, &v.one_at_a_time);
        assert!(!b.cut && !one.cut);
        assert_eq!(b.latency.len(), 12);
        assert!(b.steps * 2 < one.steps, "{} vs {}", b.steps, one.steps);
        // Every step stays within the token budget.
        for s in &v.steps {
            assert!(s.work.iter().map(|w| w.1).sum::<usize>() <= 128);
        }
    }

    #[test]
    fn the_shared_prefix_is_computed_once_with_caching() {
        let on = ServingInput::default();
        let off = ServingInput {
            prefix_caching: false,
            ..on.clone()
        };
        let (a, b) = (view(&on).unwrap().batched, view(&off).unwrap().batched);
        assert!(a.prefix_hits > 0 && b.prefix_hits == 0);
        assert_eq!(a.computed + a.prefix_hits, b.computed);
    }

    #[test]
    fn a_small_cache_preempts_and_still_finishes() {
        let tight = ServingInput {
            num_blocks: 16,
            arrival_gap: 0,
            ..ServingInput::default()
        };
        let v = view(&tight).unwrap();
        assert!(v.batched.preemptions > 0 && !v.batched.cut);
        assert!(v.batched.peak_blocks <= 16);
        let bad = ServingInput {
            shared_prefix: 200,
            ..ServingInput::default()
        };
        assert!(view(&bad).unwrap_err().contains("shared prefix"));
    }

    /// One request alone: its prompt (within the budget) in one step that samples the
    /// first token, then one step per further token (the e2e test checks the page).
    #[test]
    fn one_request_takes_one_step_per_token() {
        let one = ServingInput {
            requests: 1,
            ..ServingInput::default()
        };
        let b = view(&one).unwrap().batched;
        assert_eq!((b.steps, b.computed), (24, 96 + 23));
        assert_eq!(b.latency, vec![24]);
    }
}
