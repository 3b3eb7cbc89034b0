//! Worked problems that end the chapters: a question with numbers the reader can work by
//! hand, and its answer computed here by the crates (brrr-perf's estimators and spec
//! table, brrr-pp's closed forms and simulator), so the answers are checked like every
//! other generated number. Each answer is collapsed: the reader tries first.

use crate::md::{page, sig3};
use crate::worked_more as more;
use crate::worked_training as train;
use brrr_perf::DType;
use brrr_perf::comms::{data_parallel, dp_critical_tokens_per_gpu};
use brrr_perf::memory::{
    Optimizer, Precision, Recompute, TrainingSetup, TransformerConfig, estimate_memory,
    model_state_bytes,
};
use brrr_perf::roofline::{OpCost, Regime, Roofline};
use brrr_perf::specs::{GpuSpec, gpu};
use brrr_perf::table::{
    bandwidth, bytes, bytes_binary, count, duration, flops, flops_per_s, percent,
};
use brrr_pp::{Costs, ScheduleKind, generate, simulate, theory};

/// One problem: a title, the question, and the worked answer.
pub struct Problem {
    pub title: String,
    pub question: String,
    pub answer: String,
}

pub type Res<T> = Result<T, String>;

pub fn perf<T>(r: brrr_perf::Result<T>) -> Res<T> {
    r.map_err(|e| e.to_string())
}

/// The problems as a page: numbered headings, each answer in a collapsed block.
fn render(problems: &[Problem]) -> String {
    let mut out = String::new();
    for (i, p) in problems.iter().enumerate() {
        out += &format!(
            "### Problem {}: {}\n\n{}\n\n<details>\n<summary>Answer</summary>\n\n{}\n\n\
             </details>\n\n",
            i + 1,
            p.title,
            p.question.trim(),
            p.answer.trim()
        );
    }
    page(&out)
}

/// The smallest `x` in `range` for which `ok(x)` holds (the conditions searched here
/// are monotone in `x`), or an error naming what was searched.
pub fn smallest(
    what: &str,
    range: impl IntoIterator<Item = u64>,
    mut ok: impl FnMut(u64) -> Res<bool>,
) -> Res<u64> {
    for x in range {
        if ok(x)? {
            return Ok(x);
        }
    }
    Err(format!("{what}: no value in the range searched"))
}

fn h100() -> Res<GpuSpec> {
    perf(gpu("h100"))
}

/// The regimes chapter: when a projection turns compute-bound, what decode reaches, and
/// what a slow measurement says.
fn regimes() -> Res<Vec<Problem>> {
    let g = h100()?;
    let d = 4096u64;
    let regime_at = |t: u64| -> Res<Regime> {
        let op = perf(OpCost::gemm(t, d, d, DType::Bf16))?;
        Ok(perf(Roofline::for_op(&g, &op, DType::Bf16))?
            .predict(&op)
            .regime)
    };
    let t_star = smallest("compute-bound token count", 1..=1 << 16, |t| {
        Ok(regime_at(t)? == Regime::Compute)
    })?;
    let (peak, _) = perf(g.matmul_peak(DType::Bf16))?;
    let ridge = peak / g.memory_bandwidth;
    let before = perf(OpCost::gemm(t_star - 1, d, d, DType::Bf16))?.intensity();
    let at = perf(OpCost::gemm(t_star, d, d, DType::Bf16))?.intensity();
    let p1 = Problem {
        title: "when a projection turns compute-bound".into(),
        question: format!(
            "A projection with a `{d} × {d}` weight runs in bf16 on an {} over `T` tokens \
             (a `T × {d} · {d} × {d}` GEMM). From how many tokens on is it compute-bound?",
            g.name
        ),
        answer: format!(
            "Its intensity is `2·T·d² / (2·(2·T·d + d²))` FLOP/byte, about `T` while `T` is \
             small next to `d`. The {} bf16 tensor-core ridge is {:.1} FLOP/byte, so the answer \
             is near it: **T = {t_star}** tokens (intensity {:.1} there, {:.1} at {}). Fewer \
             tokens, as in decoding a handful of sequences, leave the tensor cores waiting \
             on the weights.",
            g.name,
            ridge,
            at,
            before,
            t_star - 1
        ),
    };
    Ok(vec![p1, decode(&g, d)?, slow_layernorm(&g)?])
}

/// One token through a `d × d` projection: the memory-bound end of the same GEMM.
fn decode(g: &GpuSpec, d: u64) -> Res<Problem> {
    let op = perf(OpCost::gemm(1, d, d, DType::Bf16))?;
    let roof = perf(Roofline::for_op(g, &op, DType::Bf16))?;
    let p = roof.predict(&op);
    Ok(Problem {
        title: "one token at a time".into(),
        question: format!(
            "Decoding one sequence, the same projection sees one token: `1 × {d} · {d} × {d}` \
             in bf16 on an {}. How long does it take at the least, and what fraction of the \
             tensor-core peak does it reach?",
            g.name
        ),
        answer: format!(
            "It reads {} of weights to do {}: intensity {} FLOP/byte against a ridge \
             of {}. Memory-bound: **{}**, at **{}** of the peak. Reading the weights costs \
             the same however few tokens use them: batching requests is what makes \
             decoding efficient.",
            bytes(p.op.bytes),
            flops(p.op.flops),
            sig3(p.intensity),
            sig3(p.ridge),
            duration(p.time_s),
            percent(p.attainable_flops / roof.peak_flops)
        ),
    })
}

/// A LayerNorm measured slower than its roofline: what the classifier makes of it.
fn slow_layernorm(g: &GpuSpec) -> Res<Problem> {
    let (rows, cols) = (8192u64, 4096u64);
    // The measurement is the problem's input, chosen a few times the roofline's time.
    let measured = 100e-6;
    let op = perf(OpCost::layernorm(rows, cols, DType::Bf16))?;
    let c = perf(perf(Roofline::for_op(g, &op, DType::Bf16))?.classify(&op, measured))?;
    Ok(Problem {
        title: "a LayerNorm slower than its roofline".into(),
        question: format!(
            "A LayerNorm over `{rows} × {cols}` bf16 activations was measured at {} on an {}. \
             Which regime was it in, and how much of the time does neither ceiling explain?",
            duration(measured),
            g.name
        ),
        answer: format!(
            "It moves at least {} and does {}, so the roofline allows {}. Measured, it \
             reached {} of the bandwidth and {} of the compute peak: **{}**, with {} of the \
             time unexplained by either ceiling. {}",
            bytes(op.bytes),
            flops(op.flops),
            duration(c.predicted.time_s),
            percent(c.memory_fraction),
            percent(c.compute_fraction),
            c.regime,
            duration(c.overhead_s),
            if c.regime == Regime::Overhead {
                "Below half of both ceilings, the kernel is not what to speed up first: look \
                 for launches, synchronisation, or a kernel that reads its input more than \
                 once."
            } else {
                "Within a factor of two of a ceiling, the kernel is doing its job."
            }
        ),
    })
}

fn preset(name: &str) -> Res<TransformerConfig> {
    perf(TransformerConfig::preset(name))
}

/// Model-state bytes per GPU of `params` under mixed-precision Adam.
fn states(params: f64, zero_stage: u8, dp: u64) -> Res<f64> {
    Ok(perf(model_state_bytes(
        params,
        Precision::Mixed,
        Optimizer::Adam,
        zero_stage,
        dp,
    ))?
    .total())
}

/// The memory chapter: model states against one GPU, the micro-batch each
/// recomputation strategy allows, and the time a model takes to train.
fn memory() -> Res<Vec<Problem>> {
    let g = h100()?;
    let cfg = preset("gpt3-6.7b")?;
    let params = cfg.params();
    let mut rows = String::new();
    for stage in 0..=3u8 {
        let b = states(params, stage, 8)?;
        let fits = if b <= g.memory_bytes {
            "fits"
        } else {
            "does not fit"
        };
        rows += &format!("- ZeRO-{stage}: {} per GPU, {fits}\n", bytes_binary(b));
    }
    let p1 = Problem {
        title: "model states of a 6.7B model".into(),
        question: format!(
            "GPT-3 6.7B ({} parameters) trains with mixed-precision Adam on 8 GPUs of an {} \
             node ({} each). How many bytes of model states does each GPU hold with plain \
             data parallelism, and with each ZeRO stage? Which fit, before any activation?",
            count(params),
            g.name,
            bytes_binary(g.memory_bytes)
        ),
        answer: format!(
            "Mixed-precision Adam keeps 16 bytes per parameter: 2 of weights, 2 of \
             gradients, 12 of fp32 master weights and moments. ZeRO shards the 12 from \
             stage 1, the gradients from stage 2, the weights at stage 3:\n\n{rows}"
        ),
    };
    Ok(vec![p1, largest_micro_batch(&g)?, train_time(&g, &cfg)?])
}

/// The largest micro-batch of GPT-2 XL that fits one GPU, per recomputation strategy.
fn largest_micro_batch(g: &GpuSpec) -> Res<Problem> {
    let cfg = preset("gpt2-xl")?;
    let mut rows = String::new();
    for (name, recompute) in [
        ("none", Recompute::None),
        ("selective", Recompute::Selective),
        ("full", Recompute::Full),
    ] {
        let total = |b: u64| -> Res<f64> {
            let setup = TrainingSetup {
                micro_batch: b,
                recompute,
                ..TrainingSetup::default()
            };
            Ok(perf(estimate_memory(&cfg, &setup))?.total())
        };
        let first_over = smallest("micro-batch over capacity", 1..=4096, |b| {
            Ok(total(b)? > g.memory_bytes)
        })?;
        let best = first_over - 1;
        rows += &format!(
            "- {name}: **{best}** sequences ({} at {best}, {} at {first_over})\n",
            bytes_binary(total(best.max(1))?),
            bytes_binary(total(first_over)?)
        );
    }
    Ok(Problem {
        title: "the micro-batch recomputation buys".into(),
        question: format!(
            "GPT-2 XL ({} layers, width {}, {} heads, sequences of {}) trains on one {} \
             with mixed-precision Adam. What is the largest micro-batch that fits with no \
             recomputation, with selective recomputation, and with full recomputation?",
            cfg.layers, cfg.hidden, cfg.heads, cfg.seq_len, g.name
        ),
        answer: format!(
            "The model states take the same in all three; what differs is the activations \
             per sequence: `sbh·(34 + 5as/h)` bytes per layer with none, `34·sbh` with \
             selective, `2·sbh` with full (plus the logits, which no strategy recomputes). \
             Searching the micro-batch with brrr-perf's estimate:\n\n{rows}\n\
             Here `5as/h` = {}, against the 34 that selective recomputation keeps: the \
             attention core was most of the memory.",
            sig3(5.0 * (cfg.heads * cfg.seq_len) as f64 / cfg.hidden as f64)
        ),
    })
}

/// Days to train from `6·N·D` at a stated utilisation.
fn train_time(g: &GpuSpec, cfg: &TransformerConfig) -> Res<Problem> {
    let (tokens, gpus, mfu) = (300e9, 64u64, 0.4);
    let (peak, _) = perf(g.matmul_peak(DType::Bf16))?;
    let total = perf(brrr_perf::flops::training_flops(cfg.params(), tokens))?;
    let seconds = perf(brrr_perf::flops::time_to_train(total, gpus, peak, mfu))?;
    Ok(Problem {
        title: "how long training takes".into(),
        question: format!(
            "How long does GPT-3 6.7B take to train on {} tokens with {gpus} {} GPUs at {} \
             MFU?",
            count(tokens),
            g.name,
            percent(mfu)
        ),
        answer: format!(
            "`6·N·D` = {}. The GPUs together do {gpus} × {} × {} = {}, so it takes \
             **{}**.",
            flops(total),
            flops_per_s(peak),
            percent(mfu),
            flops_per_s(gpus as f64 * peak * mfu),
            duration(seconds)
        ),
    })
}

/// The bubble of `kind` simulated (brrr-pp's event simulator), or `None` where the
/// generator has no schedule at these sizes.
fn simulated_bubble(kind: ScheduleKind, p: usize, m: usize, c: Costs) -> Res<Option<f64>> {
    let Ok(s) = generate(kind, p, m) else {
        return Ok(None);
    };
    let tl = simulate(&s, c.per_chunk(kind.chunks()))
        .map_err(|d| format!("{kind}: deadlock {:?}", d.stuck))?;
    Ok(Some(tl.bubble_fraction()))
}

/// The smallest micro-batch count that brings `kind`'s bubble under `limit` at `p`
/// stages.
fn micro_batches_under(kind: ScheduleKind, p: usize, c: Costs, limit: f64) -> Res<usize> {
    let m = smallest("micro-batches", 1..=4096, |m| {
        let f = theory::bubble_fraction(kind, p, m as usize, c)
            .ok_or_else(|| format!("{kind}: no closed form"))?;
        Ok(f < limit)
    })?;
    Ok(m as usize)
}

/// The pipeline chapter: micro-batches against the bubble, interleaving, and the memory
/// 1F1B saves.
fn pipeline() -> Res<Vec<Problem>> {
    let (p, limit) = (8usize, 0.1);
    // A backward of about twice the forward, fused (no separate weight-gradient pass).
    let c = Costs {
        f: 1.0,
        b: 2.0,
        w: 0.0,
        comm: 0.0,
    };
    let one = ScheduleKind::OneFOneB;
    let m = micro_batches_under(one, p, c, limit)?;
    let bubble = |kind, m| {
        theory::bubble_fraction(kind, p, m, c).ok_or_else(|| format!("{kind}: no closed form"))
    };
    let sim = simulated_bubble(one, p, m, c)?.map_or(String::new(), |b| {
        format!(
            " brrr-pp's simulator, running the generated schedule, measures {}.",
            percent(b)
        )
    });
    let p1 = Problem {
        title: "micro-batches against the bubble".into(),
        question: format!(
            "A model is cut into {p} pipeline stages and trained with 1F1B; a backward takes \
             twice a forward. How many micro-batches per step bring the bubble under {}?",
            percent(limit)
        ),
        answer: format!(
            "The bubble is `(p − 1)/(m + p − 1)` of the step whatever the forward and \
             backward times: it needs `m > (p − 1)(1 − x)/x` for a fraction `x`. **m = {m}** \
             gives {} ({} at {}).{sim}",
            percent(bubble(one, m)?),
            percent(bubble(one, m - 1)?),
            m - 1
        ),
    };
    let v = 2;
    let inter = ScheduleKind::Interleaved { v };
    let mi = micro_batches_under(inter, p, c, limit)?;
    let p2 = Problem {
        title: "interleaving instead".into(),
        question: format!(
            "The same {p} stages, each now holding {v} model chunks (interleaved 1F1B). How \
             many micro-batches bring the bubble under {}, and what does interleaving cost?",
            percent(limit)
        ),
        answer: format!(
            "Each stage's bubble shrinks by `v`: `(p − 1)/v` chunk-slots instead of `p − 1`. \
             **m = {mi}** gives {}, against {m} micro-batches without interleaving. The price \
             is `v` times as many point-to-point transfers per micro-batch, and a little \
             more activation memory on the first stage.",
            percent(bubble(inter, mi)?)
        ),
    };
    Ok(vec![p1, p2, in_flight(p, m)?])
}

/// What stage 0 holds at once under GPipe and 1F1B.
fn in_flight(p: usize, m: usize) -> Res<Problem> {
    let held = |kind| {
        theory::peak_in_flight(kind, p, m, 0).ok_or_else(|| format!("{kind}: no closed form"))
    };
    let (gpipe, one) = (held(ScheduleKind::GPipe)?, held(ScheduleKind::OneFOneB)?);
    Ok(Problem {
        title: "what 1F1B saves".into(),
        question: format!(
            "With the {m} micro-batches of problem 1 on {p} stages, how many micro-batches' \
             activations does the first stage hold at its peak under GPipe, and under 1F1B?"
        ),
        answer: format!(
            "GPipe runs every forward before any backward: **{gpipe}** micro-batches are \
             stashed at once. 1F1B starts a backward as soon as the first micro-batch \
             returns, so stage 0 holds at most `p`: **{one}**. The bubble is the same; the \
             activation memory is {} of GPipe's, and it no longer grows with `m`.",
            percent(one / gpipe)
        ),
    })
}

/// Compute and communication seconds of one block's forward on one of `t` ranks, as the
/// tensor-parallel chapter models them: the rank's shards of the four GEMMs at the bf16
/// tensor-core peak, and the ring all-reduces' bytes at `link` bytes/s.
fn tp_block_times(g: &GpuSpec, h: u64, t: u64, tokens: u64, link: f64) -> Res<(f64, f64)> {
    let gemm = |n, k| perf(OpCost::gemm(tokens, n, k, DType::Bf16)).map(|o| o.flops);
    let flops = gemm(3 * h / t, h)? + gemm(h, h / t)? + gemm(4 * h / t, h)? + gemm(h, 4 * h / t)?;
    let (peak, _) = perf(g.matmul_peak(DType::Bf16))?;
    let pass = brrr_perf::tensor_parallel::block_pass(1, tokens as usize, h as usize, false, false);
    let sent = pass.ring_elements_sent(t) as f64 * DType::Bf16.bytes();
    Ok((flops / peak, sent / link))
}

/// The smallest width (a multiple of 128) at which `t`-way tensor parallelism's matmuls
/// take at least as long as its all-reduces over `link`.
fn tp_min_width(g: &GpuSpec, t: u64, link: f64) -> Res<u64> {
    smallest("width", (1..=2048).map(|i| 128 * i), |h| {
        let (compute, comm) = tp_block_times(g, h, t, 2048, link)?;
        Ok(compute >= comm)
    })
}

/// The tensor-parallel chapter: the width at which 8-way TP pays inside a node and
/// across nodes, and what it leaves per GPU of GPT-3 175B.
fn tensor_parallel() -> Res<Vec<Problem>> {
    let g = h100()?;
    let t = 8u64;
    let nvlink = perf(g.intra_node_bandwidth())?;
    let h = tp_min_width(&g, t, nvlink)?;
    let (c_at, m_at) = tp_block_times(&g, h, t, 2048, nvlink)?;
    let (c_below, m_below) = tp_block_times(&g, h - 128, t, 2048, nvlink)?;
    let p1 = Problem {
        title: "when 8-way tensor parallelism pays".into(),
        question: format!(
            "On one {} node, {t} GPUs share a block by tensor parallelism (bf16, NVLink at \
             {} one way per GPU). What is the smallest width `h` (a multiple of 128) at \
             which a block's matmuls take at least as long as its all-reduces, so that the \
             communication could hide behind them?",
            g.name,
            bandwidth(nvlink)
        ),
        answer: format!(
            "The chapter's condition `h ≥ (t−1)·e·F / (6·β)` with `e = 2` bytes, `F` the \
             bf16 peak and `β` the link: **h = {h}**. At that width a forward takes {} of \
             matmuls and {} of all-reduces per block and rank; at {} the matmuls take {} \
             of the all-reduces' time. \
             The sequence and the batch cancel: this is a property of the model's width \
             and of the machine.",
            duration(c_at),
            duration(m_at),
            h - 128,
            percent(c_below / m_below)
        ),
    };
    let net = g
        .network_bandwidth
        .ok_or_else(|| format!("{}: no network bandwidth", g.name))?;
    let h_net = tp_min_width(&g, t, net)?;
    let p2 = Problem {
        title: "tensor parallelism across nodes".into(),
        question: format!(
            "The same {t}-way group, but its GPUs sit in different nodes and talk over the \
             network at {} per GPU. How wide must the model be now?",
            bandwidth(net)
        ),
        answer: format!(
            "The threshold scales with `1/β`: **h = {h_net}**, {}× the width inside a node. \
             Few models are that wide, which is why tensor parallelism stays inside a node \
             and pipeline parallelism crosses nodes.",
            sig3(h_net as f64 / h as f64)
        ),
    };
    Ok(vec![p1, p2, tp_175b(&g, t)?])
}

/// GPT-3 175B under 8-way tensor parallelism: the pipeline stages it still needs.
fn tp_175b(g: &GpuSpec, t: u64) -> Res<Problem> {
    let cfg = preset("gpt3-175b")?;
    let per_rank = perf(brrr_perf::tensor_parallel::params_per_rank(&cfg, t))?;
    let held = states(per_rank, 0, 1)?;
    let fits = |pp: u64| -> Res<bool> {
        if cfg.layers % pp != 0 {
            return Ok(false);
        }
        let setup = TrainingSetup {
            tp: t,
            pp,
            recompute: Recompute::Full,
            ..TrainingSetup::default()
        };
        Ok(perf(estimate_memory(&cfg, &setup))?.total() <= g.memory_bytes)
    };
    let pp = smallest("pipeline stages", 1..=cfg.layers, fits)?;
    Ok(Problem {
        title: "is 8-way tensor parallelism enough for GPT-3?".into(),
        question: format!(
            "GPT-3 175B ({} layers, width {}) trains with mixed-precision Adam and {t}-way \
             tensor parallelism on {} GPUs. How much do a rank's model states take? How many \
             pipeline stages (dividing the layers evenly) make a GPU's memory fit, with full \
             recomputation and micro-batches of one sequence?",
            cfg.layers, cfg.hidden, g.name
        ),
        answer: format!(
            "A rank holds {} parameters, {} of model states at 16 bytes each: {} times its \
             {}. brrr-perf's estimate of the first stage fits from **{pp} stages** on, so \
             the smallest layout is {t} × {pp} = {} GPUs before any data parallelism.",
            count(per_rank),
            bytes_binary(held),
            sig3(held / g.memory_bytes),
            bytes_binary(g.memory_bytes),
            t * pp
        ),
    })
}

/// The data-parallel chapter: the batch that hides the gradient all-reduce, ZeRO-3 for
/// 175B parameters, and a batch too small.
fn data_parallel_problems() -> Res<Vec<Problem>> {
    let g = h100()?;
    let (peak, _) = perf(g.matmul_peak(DType::Bf16))?;
    let nvlink = perf(g.intra_node_bandwidth())?;
    let egress = perf(g.node_egress_bandwidth())?;
    let inside = perf(dp_critical_tokens_per_gpu(peak, nvlink))?;
    let across = perf(dp_critical_tokens_per_gpu(peak, egress))?;
    let seq = 2048.0;
    let p1 = Problem {
        title: "the batch that hides the all-reduce".into(),
        question: format!(
            "Data parallelism over {} GPUs, bf16 gradients, an MLP of width `D` and hidden \
             `F`. A GPU's backward does `8·B·D·F/X` FLOPs for its `B/X` tokens, and the \
             gradients' all-reduce sends about `8·D·F` bytes per GPU. How many tokens per \
             GPU make the matmuls at least as long as the all-reduce, inside a node and \
             across nodes? In sequences of {seq}?",
            g.name
        ),
        answer: format!(
            "`D·F` cancels: the condition is `B/X ≥ C/W`, the peak over the bandwidth. \
             Inside a node (NVLink, {}): **{} tokens**, {} sequences. Across nodes \
             ({} of node egress): **{} tokens**, {} sequences.",
            bandwidth(nvlink),
            inside.ceil(),
            (inside / seq).ceil(),
            bandwidth(egress),
            across.ceil(),
            (across / seq).ceil()
        ),
    };
    Ok(vec![p1, zero3_175b(&g)?, small_batch(&g, peak, egress)?])
}

/// The data-parallel degree at which ZeRO-3 fits GPT-3 175B's model states.
fn zero3_175b(g: &GpuSpec) -> Res<Problem> {
    let params = preset("gpt3-175b")?.params();
    let budget = 0.8 * g.memory_bytes;
    let dp = smallest("data-parallel degree", 1..=1 << 16, |dp| {
        Ok(states(params, 3, dp)? <= budget)
    })?;
    // ZeRO-2 keeps every weight on every rank, however many ranks share the rest.
    let zero2_floor = perf(model_state_bytes(
        params,
        Precision::Mixed,
        Optimizer::Adam,
        2,
        1 << 16,
    ))?
    .weights;
    Ok(Problem {
        title: "ZeRO-3 for 175B parameters".into(),
        question: format!(
            "GPT-3 175B with mixed-precision Adam and ZeRO, no tensor or pipeline \
             parallelism, on {} GPUs. Leaving a fifth of the memory for activations, how \
             many data-parallel ranks does ZeRO-3 need for the model states? Could ZeRO-2 \
             do it with enough ranks?",
            g.name
        ),
        answer: format!(
            "ZeRO-3 shards all 16 bytes per parameter ({} in all): **{dp} ranks** bring a \
             rank's share to {}, within its budget of {}. ZeRO-2 never can: every rank keeps all the bf16 \
             weights, {}, however many ranks share the rest.",
            bytes_binary(states(params, 0, 1)?),
            bytes_binary(states(params, 3, dp)?),
            bytes_binary(budget),
            bytes_binary(zero2_floor)
        ),
    })
}

/// A per-GPU batch below the critical one: the all-reduce the matmuls cannot hide.
fn small_batch(g: &GpuSpec, peak: f64, egress: f64) -> Res<Problem> {
    let cfg = preset("gpt3-6.7b")?;
    let tokens = 1024.0;
    let (d, f) = (cfg.hidden as f64, cfg.ffn_hidden as f64);
    let r = perf(data_parallel(tokens, d, f, peak, egress))?;
    Ok(Problem {
        title: "a batch too small".into(),
        question: format!(
            "GPT-3 6.7B's MLP (`D = {d}`, `F = {f}`) trains data-parallel across {} nodes \
             with {tokens} tokens per GPU. How long do one layer's backward matmuls take, \
             and its gradient all-reduce? What would you change?",
            g.name
        ),
        answer: format!(
            "Matmuls {} against {} of all-reduce: {}. Even fully overlapped, the step waits \
             {} per layer on the network. Raise the tokens per GPU past {} (a larger batch, \
             or gradient accumulation), or shard the model instead.",
            duration(r.math_s),
            duration(r.comms_s),
            if r.compute_bound {
                "compute-bound"
            } else {
                "communication-bound"
            },
            duration((r.comms_s - r.math_s).max(0.0)),
            r.critical.ceil()
        ),
    })
}

/// Every chapter's worked problems, one page each.
pub fn files() -> Result<Vec<(String, String)>, String> {
    Ok(vec![
        ("worked-regimes.md".into(), render(&regimes()?)),
        ("worked-gpu.md".into(), render(&more::gpu_problems()?)),
        (
            "worked-kernels.md".into(),
            render(&more::kernels_problems()?),
        ),
        (
            "worked-collectives.md".into(),
            render(&more::collectives_problems()?),
        ),
        (
            "worked-serving.md".into(),
            render(&more::serving_problems()?),
        ),
        (
            "worked-data-loading.md".into(),
            render(&more::data_problems()?),
        ),
        (
            "worked-training.md".into(),
            render(&train::training_problems()?),
        ),
        (
            "worked-mixed-precision.md".into(),
            render(&train::amp_problems()?),
        ),
        (
            "worked-checkpointing.md".into(),
            render(&train::checkpointing_problems()?),
        ),
        ("worked-memory.md".into(), render(&memory()?)),
        (
            "worked-tensor-parallel.md".into(),
            render(&tensor_parallel()?),
        ),
        ("worked-pipeline.md".into(), render(&pipeline()?)),
        (
            "worked-planning.md".into(),
            render(&crate::worked_planning::planning_problems()?),
        ),
        (
            "worked-data-parallel.md".into(),
            render(&data_parallel_problems()?),
        ),
    ])
}
