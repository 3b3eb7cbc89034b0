//! `brrr bench speculative`: speculative decoding of a trained run with a smaller one
//! as its draft, for several `k`, in one process: tokens per target forward, the
//! acceptance rate and the speed-up over the target alone, each next to Leviathan et
//! al.'s formula with the `α` and draft cost measured in the same run.

use crate::data::{ByteTokenizer, DEFAULT_CORPUS};
use crate::sample::load_model;
use brrr_backend::{Error, Result};
use brrr_serve::speculative::{expected_speedup, expected_tokens_per_step};
use brrr_serve::{SamplingParams, SpeculativeDecoder, SpeculativeStats};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Flags of `brrr bench speculative`.
#[derive(Clone, Debug, clap::Args)]
pub struct SpecBenchArgs {
    /// The target: a run directory written by `brrr train`.
    pub target: PathBuf,
    /// The draft: a smaller run trained on the same tokenizer.
    #[arg(long)]
    pub draft: PathBuf,
    /// Proposals per step to measure (0: the target alone, the baseline).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 2, 3, 4, 6, 8])]
    pub k: Vec<usize>,
    /// Prompts, taken at even offsets of the corpus's last tenth (its validation split).
    #[arg(long, default_value_t = 8)]
    pub prompts: usize,
    /// Bytes per prompt.
    #[arg(long, default_value_t = 64)]
    pub prompt_len: usize,
    /// Tokens generated per prompt.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// Softmax temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// The text the prompts come from (default: the shipped corpus).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
}

/// One measured decoder.
#[derive(Clone, Debug)]
pub struct SpecRow {
    /// Proposals per step (0: one model alone).
    pub k: usize,
    /// Its counters.
    pub stats: SpeculativeStats,
    /// Wall time of every prompt.
    pub seconds: f64,
}

impl SpecRow {
    fn tokens_per_s(&self) -> f64 {
        self.stats.generated as f64 / self.seconds.max(1e-9)
    }
    /// Seconds per target forward (a one-token forward at k = 0, a verifying one else).
    fn seconds_per_forward(&self) -> f64 {
        self.stats.target_seconds / self.stats.target_forwards.max(1) as f64
    }
}

/// The measurements: the draft alone, the target alone, then each `k`.
pub struct SpecBench {
    /// The draft decoding alone (its time per forward sets the cost ratio `c`).
    pub draft_alone: SpecRow,
    /// The target alone (`k = 0`): the baseline.
    pub target_alone: SpecRow,
    /// One row per `k`.
    pub rows: Vec<SpecRow>,
}

fn prompts(corpus: &Path, n: usize, len: usize) -> Result<Vec<Vec<u32>>> {
    let text =
        std::fs::read(corpus).map_err(|e| Error::io(format!("reading {}", corpus.display()), e))?;
    let val = &text[text.len() * 9 / 10..];
    if n == 0 || len == 0 || val.len() < n * len {
        return Err(Error::invalid(
            "bench speculative",
            format!(
                "{n} prompts of {len} bytes need a corpus with a validation tenth of at \
                 least {} bytes (it has {})",
                n * len,
                val.len()
            ),
        ));
    }
    let stride = (val.len() - len) / n.max(1);
    Ok((0..n)
        .map(|i| {
            val[i * stride..i * stride + len]
                .iter()
                .map(|&b| u32::from(b))
                .collect()
        })
        .collect())
}

fn measure(
    target: &Path,
    draft: &Path,
    k: usize,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
) -> Result<SpecRow> {
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let (t, _) = load_model(target, &mut rng)?;
    let (d, _) = load_model(draft, &mut rng)?;
    let mut dec = SpeculativeDecoder::new(t, d, k, Some(ByteTokenizer::VOCAB_SIZE))?;
    // A warm-up prompt, not counted: the first forwards allocate.
    dec.generate(
        &prompts[0],
        &SamplingParams {
            max_tokens: 8,
            ..params.clone()
        },
    )?;
    let before = dec.stats();
    let t0 = Instant::now();
    for (i, p) in prompts.iter().enumerate() {
        let seed = params.seed.wrapping_add(i as u64);
        dec.generate(
            p,
            &SamplingParams {
                seed,
                ..params.clone()
            },
        )?;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let after = dec.stats();
    let stats = SpeculativeStats {
        target_forwards: after.target_forwards - before.target_forwards,
        draft_forwards: after.draft_forwards - before.draft_forwards,
        tested: after.tested - before.tested,
        accepted: after.accepted - before.accepted,
        generated: after.generated - before.generated,
        alpha_sum: after.alpha_sum - before.alpha_sum,
        target_seconds: after.target_seconds - before.target_seconds,
        draft_seconds: after.draft_seconds - before.draft_seconds,
    };
    Ok(SpecRow { k, stats, seconds })
}

/// Runs `brrr bench speculative`, printing a line per decoder on `progress`.
pub fn run(args: &SpecBenchArgs, progress: &mut dyn FnMut(&str)) -> Result<SpecBench> {
    let corpus = args.corpus.clone().unwrap_or_else(|| DEFAULT_CORPUS.into());
    let prompts = prompts(&corpus, args.prompts, args.prompt_len)?;
    let params = SamplingParams {
        temperature: args.temperature,
        max_tokens: args.max_tokens,
        ..SamplingParams::default()
    };
    params
        .validate()
        .map_err(|e| Error::invalid("bench speculative", e))?;
    progress("the draft alone");
    let draft_alone = measure(&args.draft, &args.draft, 0, &prompts, &params)?;
    progress("the target alone");
    let target_alone = measure(&args.target, &args.draft, 0, &prompts, &params)?;
    let mut rows = Vec::new();
    for &k in args.k.iter().filter(|&&k| k > 0) {
        progress(&format!("k = {k}"));
        rows.push(measure(&args.target, &args.draft, k, &prompts, &params)?);
    }
    Ok(SpecBench {
        draft_alone,
        target_alone,
        rows,
    })
}

/// The table: measured figures next to the formulas'. Two speed-up formulas: the
/// paper's, which assumes a verifying forward costs one decode, and the same with the
/// verifying forward's measured cost.
pub fn table(b: &SpecBench) -> String {
    let one = b.target_alone.seconds_per_forward();
    let c = b.draft_alone.seconds_per_forward() / one;
    let base = b.target_alone.tokens_per_s();
    let mut out = format!(
        "target alone: {:.0} tokens/s ({:.2} ms a forward); draft alone: {:.0} tokens/s; \
         cost ratio c = {c:.3}\n\n",
        base,
        1e3 * one,
        b.draft_alone.tokens_per_s()
    );
    out.push_str(
        "| k | α measured | α predicted | tokens / target forward | formula | verifying \
         forward / one decode | tokens/s | speed-up | formula (α, c) | formula, measured \
         costs |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in &b.rows {
        let (s, alpha) = (&r.stats, r.stats.acceptance_rate());
        let verify = r.seconds_per_forward() / one;
        let tokens = expected_tokens_per_step(alpha, r.k);
        let _ = writeln!(
            out,
            "| {} | {:.3} | {:.3} | {:.2} | {:.2} | {:.2}× | {:.0} | {:.2}× | {:.2}× | {:.2}× |",
            r.k,
            alpha,
            s.predicted_acceptance(),
            s.tokens_per_step(),
            tokens,
            verify,
            r.tokens_per_s(),
            r.tokens_per_s() / base,
            expected_speedup(alpha, r.k, c),
            tokens / (r.k as f64 * c + verify)
        );
    }
    out
}
