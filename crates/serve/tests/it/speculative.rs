//! Speculative decoding against the target alone: greedy tokens identical, sampled
//! tokens following the target's distribution (counted), whatever the draft.

use brrr_cpu::CpuBackend;
use brrr_nn::{DType, Gpt, GptConfig, Module, Tensor};
use brrr_serve::{EngineConfig, LlmEngine, SamplingParams, SpeculativeDecoder, probabilities};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn gpt(vocab_size: usize, n_layer: usize, n_embd: usize, seed: u64) -> Gpt<CpuBackend> {
    let config = GptConfig {
        vocab_size,
        block_size: 40,
        n_layer,
        n_head: 2,
        n_embd,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Gpt::new(&CpuBackend::new(), config, DType::F32, &mut rng).unwrap()
}

fn prompts() -> Vec<Vec<u32>> {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    [1usize, 4, 9, 17]
        .iter()
        .map(|&n| (0..n).map(|_| rng.random_range(0..64)).collect())
        .collect()
}

/// Greedy tokens of the target alone, through the serving engine.
fn target_alone(tokens: usize) -> Vec<Vec<u32>> {
    let config = EngineConfig {
        block_size: 8,
        num_blocks: 32,
        ..EngineConfig::default()
    };
    let mut engine = LlmEngine::new(gpt(64, 2, 32, 7), config).unwrap();
    engine
        .generate(&prompts(), &SamplingParams::greedy(tokens))
        .unwrap()
}

#[test]
fn greedy_speculation_gives_the_targets_tokens() {
    let want = target_alone(20);
    // A draft unlike the target (another seed, one layer): most proposals rejected.
    // The target as its own draft: every proposal accepted. k = 0: no draft at all.
    for (draft, k) in [
        (gpt(64, 1, 16, 99), 3),
        (gpt(64, 2, 32, 7), 4),
        (gpt(64, 1, 16, 99), 0),
    ] {
        let mut dec = SpeculativeDecoder::new(gpt(64, 2, 32, 7), draft, k, None).unwrap();
        for (p, want) in prompts().iter().zip(&want) {
            let got = dec.generate(p, &SamplingParams::greedy(20)).unwrap();
            // The last prompt reaches the 40-token context before 20 tokens.
            assert_eq!(&got, want, "k = {k}, prompt {p:?}");
        }
        let s = dec.stats();
        assert_eq!(
            s.generated,
            want.iter().map(|w| w.len() as u64).sum::<u64>()
        );
        assert_eq!(s.draft_forwards > 0, k > 0);
        if k == 4 {
            assert_eq!(s.acceptance_rate(), 1.0, "{s:?}");
            assert!(s.tokens_per_step() > 4.0, "{s:?}");
        }
    }
}

#[test]
fn stop_tokens_max_tokens_and_bad_requests() {
    let mut dec = SpeculativeDecoder::new(gpt(64, 2, 32, 7), gpt(64, 2, 32, 7), 4, None).unwrap();
    let all = dec
        .generate(&[1, 2, 3], &SamplingParams::greedy(10))
        .unwrap();
    assert_eq!(all.len(), 10);
    // Stopping at the third token, in the middle of a step of five.
    let stop = SamplingParams {
        stop_tokens: vec![all[2]],
        ..SamplingParams::greedy(10)
    };
    let first_stop = all.iter().position(|&t| t == all[2]).unwrap();
    assert_eq!(dec.generate(&[1, 2, 3], &stop).unwrap(), all[..=first_stop]);
    assert!(dec.generate(&[], &SamplingParams::greedy(4)).is_err());
    assert!(dec.generate(&[64], &SamplingParams::greedy(4)).is_err());
    assert!(dec.generate(&[1; 40], &SamplingParams::greedy(4)).is_err());
    let hot = SamplingParams {
        temperature: -1.0,
        ..SamplingParams::greedy(4)
    };
    assert!(dec.generate(&[1], &hot).is_err());
    assert!(SpeculativeDecoder::new(gpt(64, 1, 16, 0), gpt(32, 1, 16, 0), 2, None).is_err());
}

/// The target's distribution after `context`, at `temperature`, computed without a cache.
fn next_probs(model: &mut Gpt<CpuBackend>, context: &[u32], temperature: f32) -> Vec<f64> {
    let x = Tensor::from_u32(&CpuBackend::new(), context, [1, context.len()]).unwrap();
    let logits = model.forward(&x).unwrap().to_vec_f32().unwrap();
    model.clear_saved();
    let v = model.config.vocab_size;
    probabilities(&logits[(context.len() - 1) * v..], temperature, 0, 1.0).unwrap()
}

#[test]
fn sampled_speculation_follows_the_targets_distribution() {
    // Sharp distributions (a low temperature on small random logits) that differ between
    // the two models, so that proposals are often rejected and the residual is drawn.
    let (vocab, temperature, prompt) = (8, 0.04, [1u32, 5, 2]);
    let mut target = gpt(vocab, 2, 16, 11);
    let mut want = vec![0.0f64; vocab * vocab];
    let first = next_probs(&mut target, &prompt, temperature);
    for (a, pa) in first.iter().enumerate() {
        let ctx = [&prompt[..], &[a as u32]].concat();
        for (b, pb) in next_probs(&mut target, &ctx, temperature)
            .iter()
            .enumerate()
        {
            want[a * vocab + b] = pa * pb;
        }
    }
    let mut dec = SpeculativeDecoder::new(target, gpt(vocab, 1, 16, 12), 2, None).unwrap();
    let n = 3000;
    let mut counts = vec![0usize; vocab * vocab];
    for seed in 0..n {
        let params = SamplingParams {
            temperature,
            seed,
            ..SamplingParams::greedy(2)
        };
        let out = dec.generate(&prompt, &params).unwrap();
        counts[out[0] as usize * vocab + out[1] as usize] += 1;
    }
    let rate = dec.stats().acceptance_rate();
    assert!(
        rate > 0.1 && rate < 0.9,
        "the draft should be neither right nor wrong: {rate}"
    );
    // Pearson's chi-square over the pairs expected at least 5 times, the rest pooled.
    let (mut chi, mut cells, mut rest) = (0.0, 0, (0usize, 0.0));
    for (&c, &p) in counts.iter().zip(&want) {
        let e = p * n as f64;
        if e >= 5.0 {
            chi += (c as f64 - e).powi(2) / e;
            cells += 1;
        } else {
            rest = (rest.0 + c, rest.1 + e);
        }
    }
    if rest.1 > 0.0 {
        chi += (rest.0 as f64 - rest.1).powi(2) / rest.1;
        cells += 1;
    }
    // The 0.001 tail of chi-square with d degrees of freedom is below d + 3.1·√(2d) + 10
    // for every d ≤ 64.
    let dof = cells - 1;
    let limit = dof as f64 + 3.1 * (2.0 * dof as f64).sqrt() + 10.0;
    assert!(
        chi < limit,
        "chi² {chi:.1} over {cells} cells (limit {limit:.1})"
    );
}
