//! The engine against the plainest decoder there is: the whole context recomputed for
//! every token, one request at a time, no cache. Batched, paged, chunked and preempted
//! decoding must give the same tokens.

use brrr_cpu::CpuBackend;
use brrr_nn::{DType, Gpt, GptConfig, Module, Tensor};
use brrr_serve::{EngineConfig, LlmEngine, SamplingParams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 64,
        block_size: 48,
        n_layer: 2,
        n_head: 2,
        n_embd: 32,
    }
}

fn model() -> Gpt<CpuBackend> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    Gpt::new(&CpuBackend::new(), config(), DType::F32, &mut rng).unwrap()
}

fn prompts() -> Vec<Vec<u32>> {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    [1usize, 3, 7, 12, 20, 5]
        .iter()
        .map(|&n| (0..n).map(|_| rng.random_range(0..64)).collect())
        .collect()
}

/// Greedy decoding by recomputing the whole context for every token: each token and
/// its log-probability.
fn reference(model: &mut Gpt<CpuBackend>, prompt: &[u32], tokens: usize) -> Vec<(u32, f32)> {
    let be = CpuBackend::new();
    let mut ids = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..tokens {
        let x = Tensor::from_u32(&be, &ids, [1, ids.len()]).unwrap();
        let logits = model.forward(&x).unwrap().to_vec_f32().unwrap();
        model.clear_saved();
        let last = &logits[(ids.len() - 1) * 64..];
        let best = (0..64).fold(0, |b, i| if last[i] > last[b] { i } else { b });
        let lse = last
            .iter()
            .map(|&x| f64::from(x - last[best]).exp())
            .sum::<f64>()
            .ln();
        out.push((best as u32, -lse as f32));
        ids.push(best as u32);
    }
    out
}

/// Every prompt through `e` (greedy, `tokens` each): each request's tokens and their
/// log-probabilities, in prompt order.
fn serve(e: &mut LlmEngine<CpuBackend>, tokens: usize) -> Vec<Vec<(u32, f32)>> {
    let ids: Vec<_> = prompts()
        .into_iter()
        .map(|p| e.add_request(p, SamplingParams::greedy(tokens)).unwrap())
        .collect();
    let mut out = vec![Vec::new(); ids.len()];
    while e.scheduler().num_unfinished() > 0 {
        for o in e.step().unwrap() {
            let i = ids.iter().position(|&id| id == o.id).unwrap();
            out[i].push((o.token, o.logprob));
        }
    }
    out
}

fn engine(block_size: usize, num_blocks: usize, max_batch_tokens: usize) -> LlmEngine<CpuBackend> {
    let cfg = EngineConfig {
        block_size,
        num_blocks,
        max_batch_tokens,
        max_seqs: 8,
        vocab_limit: None,
        // A preempted request finds its own blocks cached: the configurations that
        // preempt check reuse as well.
        prefix_caching: true,
    };
    LlmEngine::new(model(), cfg).unwrap()
}

#[test]
fn batched_paged_decoding_gives_the_recomputed_tokens() {
    let mut m = model();
    let want: Vec<_> = prompts().iter().map(|p| reference(&mut m, p, 10)).collect();
    // All at once; a token budget of 5 (every prompt but the shortest prefilled in
    // chunks, decodes mixed in); 9 blocks of 4 for 6 requests that grow to 30 tokens
    // (preemption and recomputation); one-token blocks.
    for (bs, blocks, budget) in [(4, 64, 512), (4, 64, 5), (4, 9, 64), (1, 40, 7)] {
        let mut e = engine(bs, blocks, budget);
        let got = serve(&mut e, 10);
        let what = format!("block {bs}, {blocks} blocks, budget {budget}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let tokens = |v: &[(u32, f32)]| v.iter().map(|x| x.0).collect::<Vec<_>>();
            assert_eq!(tokens(g), tokens(w), "{what}: prompt {i}");
            // The log-probabilities see every attention weight: a wrong mask or a
            // misplaced cache row moves them even where the greedy token survives.
            for (k, (a, b)) in g.iter().zip(w).enumerate() {
                assert!(
                    (a.1 - b.1).abs() < 1e-4,
                    "{what}: prompt {i} token {k}: {} vs {}",
                    a.1,
                    b.1
                );
            }
        }
        assert_eq!(
            e.scheduler().allocator().num_used(),
            0,
            "{what}: blocks leaked"
        );
        if blocks == 9 {
            assert!(
                e.scheduler().preemptions > 0,
                "{what}: nothing was preempted"
            );
        }
        assert_eq!(e.stats().tokens_generated, 60, "{what}");
    }
}

#[test]
fn a_request_samples_the_same_tokens_whatever_else_runs() {
    let params = SamplingParams {
        temperature: 0.9,
        top_k: 20,
        top_p: 0.95,
        max_tokens: 12,
        seed: 11,
        ..SamplingParams::default()
    };
    let alone = engine(4, 64, 512)
        .generate(&prompts()[3..4], &params)
        .unwrap();
    // The same request (same seed) fourth in a batch that is preempted.
    let mut e = engine(4, 10, 16);
    let mut ids = Vec::new();
    for (i, p) in prompts().into_iter().enumerate() {
        let seed = if i == 3 { 11 } else { 100 + i as u64 };
        ids.push(
            e.add_request(
                p,
                SamplingParams {
                    seed,
                    ..params.clone()
                },
            )
            .unwrap(),
        );
    }
    while e.scheduler().num_unfinished() > 0 {
        e.step().unwrap();
    }
    assert_eq!(e.take_output(ids[3]).unwrap(), alone[0]);
}

#[test]
fn bad_requests_are_errors_and_the_model_comes_back_uncached() {
    let mut e = engine(4, 8, 64);
    assert!(e.add_request(vec![], SamplingParams::greedy(4)).is_err());
    assert!(
        e.add_request(vec![64], SamplingParams::greedy(4)).is_err(),
        "outside the vocabulary"
    );
    assert!(
        e.add_request(vec![1; 48], SamplingParams::greedy(4))
            .is_err(),
        "no room in the context"
    );
    let hot = SamplingParams {
        temperature: f32::NAN,
        ..SamplingParams::greedy(4)
    };
    assert!(e.add_request(vec![1], hot).is_err());
    let id = e
        .add_request(vec![1, 2], SamplingParams::greedy(20))
        .unwrap();
    e.step().unwrap();
    e.abort(id).unwrap();
    assert_eq!(e.scheduler().allocator().num_used(), 0);
    let mut m = e.into_model();
    assert!(m.h.iter().all(|b| b.attn.cache.is_none()));
    assert_eq!(
        reference(&mut m, &[1, 2], 3),
        reference(&mut model(), &[1, 2], 3)
    );
}

/// Prefix caching: requests that share a 13-token start, served after one that
/// computed it, reuse its three full 4-token blocks, so the model computes fewer
/// tokens, and every token and log-probability is still the recomputed one's.
#[test]
fn a_cached_prefix_gives_the_recomputed_tokens_and_saves_its_compute() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let shared: Vec<u32> = (0..13).map(|_| rng.random_range(0..64)).collect();
    let prompts: Vec<Vec<u32>> = [2usize, 1, 6]
        .iter()
        .map(|&n| {
            let tail = (0..n).map(|_| rng.random_range(0..64));
            shared.iter().copied().chain(tail).collect()
        })
        .collect();
    let mut m = model();
    let want: Vec<_> = prompts.iter().map(|p| reference(&mut m, p, 6)).collect();
    let run = |caching: bool| {
        let mut e = LlmEngine::new(
            model(),
            EngineConfig {
                block_size: 4,
                num_blocks: 64,
                max_batch_tokens: 512,
                max_seqs: 8,
                vocab_limit: None,
                prefix_caching: caching,
            },
        )
        .unwrap();
        // The first request alone, then the two others together.
        let mut got = Vec::new();
        for wave in [&prompts[..1], &prompts[1..]] {
            let ids: Vec<_> = wave
                .iter()
                .map(|p| e.add_request(p.clone(), SamplingParams::greedy(6)).unwrap())
                .collect();
            let mut out = vec![Vec::new(); ids.len()];
            while e.scheduler().num_unfinished() > 0 {
                for o in e.step().unwrap() {
                    let i = ids.iter().position(|&id| id == o.id).unwrap();
                    out[i].push((o.token, o.logprob));
                }
            }
            got.extend(out);
        }
        (
            got,
            e.stats().tokens_computed,
            e.scheduler().prefix_hit_tokens,
        )
    };
    let (got, computed, hits) = run(true);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        for (k, (a, b)) in g.iter().zip(w).enumerate() {
            assert_eq!(a.0, b.0, "prompt {i} token {k}");
            assert!(
                (a.1 - b.1).abs() < 1e-4,
                "prompt {i} token {k}: {} vs {}",
                a.1,
                b.1
            );
        }
        assert_eq!(g.len(), 6);
    }
    let (_, computed_without, no_hits) = run(false);
    assert_eq!((hits, no_hits), (2 * 12, 0));
    assert_eq!(computed + hits, computed_without);
}
