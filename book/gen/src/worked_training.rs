//! Worked problems of the training, mixed-precision and recomputation chapters, in the
//! shape of [`crate::worked`]: answers computed here, from brrr-perf, brrr-amp and
//! brrr-checkpoint.

use crate::md::sig3;
use crate::worked::{Problem, Res, perf};
use brrr_amp::numerics::{BF16, F16, Fate, Format};
use brrr_perf::flops::{hardware_flops_per_token, model_flops_per_token, training_flops};
use brrr_perf::memory::{
    Optimizer, Precision, Recompute, TransformerConfig, activation_bytes_per_layer,
    model_state_bytes,
};
use brrr_perf::table::{bytes_binary, count, flops, percent};

fn preset(name: &str) -> Res<TransformerConfig> {
    perf(TransformerConfig::preset(name))
}

/// The training chapter: FLOPs per token, the attention term, a step's FLOPs.
pub fn training_problems() -> Res<Vec<Problem>> {
    let cfg = preset("gpt2")?;
    let per_token = perf(model_flops_per_token(&cfg))?;
    let six_n = 6.0 * (cfg.non_embedding_params() + (cfg.vocab * cfg.hidden) as f64);
    let p1 = Problem {
        title: "FLOPs per token".into(),
        question: format!(
            "GPT-2 124M ({} layers, width {}, context {}, vocabulary {}). How many FLOPs \
             does training do per token, forward and backward, and how much of it is \
             attention's scores?",
            cfg.layers, cfg.hidden, cfg.seq_len, cfg.vocab
        ),
        answer: format!(
            "Every weight used in a matmul costs 2 FLOPs per token forward and 4 backward: \
             `6·N` = {} with `N` the layers' weights and the tied output projection. \
             Attention's scores and weighted sum add `12·l·s·h` = {}: **{} per token**, \
             the scores {} of it. Position embeddings are a lookup and cost no FLOPs.",
            flops(six_n),
            flops(per_token - six_n),
            flops(per_token),
            percent((per_token - six_n) / per_token)
        ),
    };
    Ok(vec![p1, context_share()?, step_flops(&cfg, per_token)?])
}

/// How the attention term's share grows with the context.
fn context_share() -> Res<Problem> {
    let base = preset("gpt2")?;
    let mut rows = String::new();
    for s in [1024u64, 4096, 16384, 65536] {
        let cfg = TransformerConfig {
            seq_len: s,
            ..base.clone()
        };
        let total = perf(model_flops_per_token(&cfg))?;
        let six_n = 6.0 * (cfg.non_embedding_params() + (cfg.vocab * cfg.hidden) as f64);
        rows += &format!(
            "- context {s}: {} per token, attention {}\n",
            flops(total),
            percent((total - six_n) / total)
        );
    }
    Ok(Problem {
        title: "longer contexts".into(),
        question: "The same model with contexts of 1024, 4096, 16384 and 65536 tokens: what \
                   share of the FLOPs per token goes to attention's scores?"
            .into(),
        answer: format!(
            "`6·N` stays; `12·l·s·h` grows with the context:\n\n{rows}\nAt long contexts \
             attention, not the weights, sets the cost of a token."
        ),
    })
}

/// The FLOPs of one optimizer step of `brrr train`-sized batches, from `6·N·D`.
fn step_flops(cfg: &TransformerConfig, per_token: f64) -> Res<Problem> {
    let (batch, seq) = (8.0, cfg.seq_len as f64);
    let tokens = batch * seq;
    let rough = perf(training_flops(cfg.params(), tokens))?;
    Ok(Problem {
        title: "one step".into(),
        question: format!(
            "One step of GPT-2 124M on {batch} sequences of {seq} tokens. How many FLOPs, \
             and how far off is the rule of thumb `6·N·D` with `N` all {} parameters?",
            count(cfg.params())
        ),
        answer: format!(
            "{} tokens × {} = **{}**. `6·N·D` gives {}: it counts the position embedding, \
             which costs nothing, and leaves out attention's scores: it is {} off.",
            count(tokens),
            flops(per_token),
            flops(per_token * tokens),
            flops(rough),
            percent((rough - per_token * tokens).abs() / (per_token * tokens))
        ),
    })
}

fn format_line(f: &Format) -> String {
    format!(
        "- {}: largest {}, smallest normal {}, epsilon {} ({} decimal digits)\n",
        f.name,
        sig3(f.max_finite()),
        sig3(f.min_normal()),
        sig3(f.epsilon()),
        sig3(f.decimal_digits())
    )
}

/// The mixed-precision chapter: the two 16-bit formats, a small gradient, the memory.
pub fn amp_problems() -> Res<Vec<Problem>> {
    let p1 = Problem {
        title: "two 16-bit formats".into(),
        question: "f16 and bf16 both take 16 bits. What is the largest finite value, the \
                   smallest normal value and the spacing just above 1 of each? Which needs \
                   loss scaling?"
            .into(),
        answer: format!(
            "{}{}\nbf16 keeps f32's exponent, so gradients neither overflow nor underflow \
             any sooner than in f32; f16 trades range for precision, and small gradients \
             fall below its normals: f16 needs the loss scaled up before the backward.",
            format_line(&F16),
            format_line(&BF16)
        ),
    };
    Ok(vec![p1, small_gradient(), amp_memory()?])
}

/// What storing a small gradient in each format does, with and without a loss scale.
fn small_gradient() -> Problem {
    let (g, scale) = (1.0e-8, 65536.0);
    let fate = |f: &Format, x: f64| format!("{:?} ({})", f.fate(x), sig3(f.round(x)));
    let rescued = F16.fate(g * scale) == Fate::Normal;
    Problem {
        title: "a small gradient".into(),
        question: format!(
            "A gradient element of {g:e} is stored in f16 and in bf16. What is left of it? \
             And with the loss scaled by {scale} (2¹⁶) first?"
        ),
        answer: format!(
            "Unscaled: f16 gives {}, bf16 {}. Scaled: f16 gives {}, bf16 {}. {}",
            fate(&F16, g),
            fate(&BF16, g),
            fate(&F16, g * scale),
            fate(&BF16, g * scale),
            if rescued {
                "The scale lifts the value into f16's normal range, where it keeps f16's \
                 full precision; bf16 did not need it."
            } else {
                "Even scaled, it stays below f16's normal range: a larger scale is needed."
            }
        ),
    }
}

/// Model states of GPT-2 XL in f32 and under mixed precision.
fn amp_memory() -> Res<Problem> {
    let cfg = preset("gpt2-xl")?;
    let n = cfg.params();
    let states =
        |p| -> Res<f64> { Ok(perf(model_state_bytes(n, p, Optimizer::Adam, 0, 1))?.total()) };
    let (full, mixed) = (states(Precision::Fp32)?, states(Precision::Mixed)?);
    let act = |p| {
        perf(activation_bytes_per_layer(
            &cfg,
            1,
            1,
            false,
            Recompute::None,
            p,
        ))
    };
    let (af, am) = (act(Precision::Fp32)?, act(Precision::Mixed)?);
    Ok(Problem {
        title: "what mixed precision saves".into(),
        question: format!(
            "GPT-2 XL ({} parameters) with Adam. How many bytes of model states in f32, and \
             under mixed precision? And of activations per layer and sequence?",
            count(n)
        ),
        answer: format!(
            "Model states: **{}** in f32 (weights, gradients, two moments at 4 bytes), \
             **{}** mixed (16-bit weights and gradients, plus an f32 master copy): {} \
             on the states. Activations: {} per layer and sequence in f32, {} mixed. The \
             saving is in the activations and in the tensor cores' speed.",
            bytes_binary(full),
            bytes_binary(mixed),
            if mixed >= full {
                "nothing saved".to_string()
            } else {
                format!("{} saved", bytes_binary(full - mixed))
            },
            bytes_binary(af),
            bytes_binary(am)
        ),
    })
}

/// The recomputation chapter: √n groups, and what full and selective recomputation cost
/// and save.
pub fn checkpointing_problems() -> Res<Vec<Problem>> {
    let n = 48usize;
    let k = brrr_checkpoint::sqrt_group(n);
    let starts = brrr_checkpoint::group_starts(n, k);
    let p1 = Problem {
        title: "√n groups of 48 layers".into(),
        question: format!(
            "A chain of {n} layers, each with a stash of the same size, is cut into groups \
             of `k` whose inputs are kept. Which `k` does Chen's rule choose, and how many \
             layers' worth of activations are held at the peak, against {n} without \
             recomputation?"
        ),
        answer: format!(
            "`k = round(√{n})` = **{k}**: {} group inputs kept, plus one group's {k} \
             stashes during its backward: about **{}** layers' worth instead of {n}, for \
             one extra forward.",
            starts.len(),
            starts.len() + k
        ),
    };
    Ok(vec![
        p1,
        recompute_cost("gpt3-6.7b")?,
        recompute_cost("gpt2-xl")?,
    ])
}

/// Memory per layer and FLOPs per token of the three strategies on one model.
fn recompute_cost(name: &str) -> Res<Problem> {
    let cfg = preset(name)?;
    let model = perf(model_flops_per_token(&cfg))?;
    let mut rows = String::new();
    let mut extra = Vec::new();
    for (label, r) in [
        ("none", Recompute::None),
        ("selective", Recompute::Selective),
        ("full", Recompute::Full),
    ] {
        let mem = perf(activation_bytes_per_layer(
            &cfg,
            1,
            1,
            false,
            r,
            Precision::Mixed,
        ))?;
        let hw = perf(hardware_flops_per_token(&cfg, r))?;
        extra.push(percent(hw / model - 1.0));
        rows += &format!(
            "- {label}: {} per layer, {} more FLOPs\n",
            bytes_binary(mem),
            percent(hw / model - 1.0)
        );
    }
    Ok(Problem {
        title: format!("the price of recomputation, {name}"),
        question: format!(
            "{name} ({} layers, width {}, {} heads, context {}), one sequence per \
             micro-batch, 16-bit activations. What does each strategy keep per layer, and \
             how many more FLOPs does the step do?",
            cfg.layers, cfg.hidden, cfg.heads, cfg.seq_len
        ),
        answer: format!(
            "{rows}\nSelective recomputation drops the `5as/h` part, the attention core, \
             for {} more FLOPs; full recomputation keeps only the layer inputs for {} more.",
            extra[1], extra[2]
        ),
    })
}
