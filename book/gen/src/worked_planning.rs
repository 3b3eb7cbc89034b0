//! The layout chapter's worked problems, answered by brrr-perf's planner: three layouts
//! ranked by hand, the fewest GPUs a model fits on, how flat the top of a search is,
//! and the efficiency a published run implies.

use crate::planning::worked_inputs;
use crate::worked::{Problem, Res, perf, smallest};
use brrr_perf::memory::{PipelineSchedule, TrainingSetup, TransformerConfig};
use brrr_perf::plan::{Candidate, Cluster, PlanInputs, StepTime, evaluate, plan, published};
use brrr_perf::specs::gpu;
use brrr_perf::table::{bytes_binary, duration, percent};

/// The chapter's problems.
pub fn planning_problems() -> Res<Vec<Problem>> {
    Ok(vec![
        by_hand()?,
        fewest_gpus()?,
        within(0.05)?,
        megatron_efficiency()?,
    ])
}

/// Model chunks per stage: 1 unless interleaved.
fn chunks(c: &Candidate) -> u64 {
    match c.setup.schedule {
        PipelineSchedule::Interleaved { chunks } => chunks,
        _ => 1,
    }
}

/// The fastest layout of the worked case that `pick` accepts.
fn best_where<'a>(
    cands: &'a [Candidate],
    what: &str,
    pick: impl Fn(&Candidate) -> bool,
) -> Res<&'a Candidate> {
    cands
        .iter()
        .find(|c| pick(c))
        .ok_or_else(|| format!("no {what} layout fits the worked case"))
}

/// One row of the parts the reader is given.
fn given(c: &Candidate) -> String {
    let t: &StepTime = &c.time;
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
        c.name,
        duration(t.compute_s),
        duration(t.tp_s),
        duration(t.dp_exposed_s),
        duration(t.pp_s),
        c.setup.pp,
        chunks(c),
        c.setup.grad_accum
    )
}

/// Three layouts of the chapter's 13B case, their parts given, the bubble and the
/// order to work out.
fn by_hand() -> Res<Problem> {
    let inp = worked_inputs()?;
    let p = perf(plan(&inp))?;
    let c = &p.candidates;
    let three = [
        best_where(c, "tensor-parallel", |c| c.setup.tp > 1)?,
        best_where(c, "pipelined", |c| c.setup.pp > 1 && chunks(c) == 1)?,
        best_where(c, "interleaved", |c| chunks(c) > 1)?,
    ];
    let mut table = "| layout | compute | tensor parallel | exposed data parallel | \
                     pipeline sends | p | v | m |\n|:--|--:|--:|--:|--:|--:|--:|--:|\n"
        .to_string();
    let mut answer = String::new();
    for c in &three {
        table += &given(c);
        answer += &format!(
            "- `{}`: bubble {}, step **{}**\n",
            c.name,
            duration(c.time.bubble_s),
            duration(c.time.total_s())
        );
    }
    let why = interleaving_note(&inp, three[1], three[2])?;
    let mut order: Vec<&Candidate> = three.to_vec();
    order.sort_by(|a, b| a.time.total_s().total_cmp(&b.time.total_s()));
    let names: Vec<String> = order.iter().map(|c| format!("`{}`", c.name)).collect();
    Ok(Problem {
        title: "three layouts by hand".into(),
        question: format!(
            "The chapter's 13B model on {} {}s, {} sequences per step. The planner predicts \
             these parts of three layouts' steps (`p` stages, `v` chunks per stage, `m` \
             micro-batches):\n\n{table}\nWhat is each one's bubble, and which is fastest?",
            inp.cluster.gpus, inp.cluster.gpu.name, inp.global_batch
        ),
        answer: format!(
            "The bubble is `(p − 1)/(v·m)` of the compute and tensor-parallel time:\n\n\
             {answer}\nFastest first: {}, {} apart from the first to the last.{why}",
            names.join(", "),
            percent(order[2].time.total_s() / order[0].time.total_s() - 1.0)
        ),
    })
}

/// Why the interleaved layout loses to the 1F1B one, where it does: the same layout
/// interleaved does not fit, so the planner's best interleaved one recomputes.
fn interleaving_note(inp: &PlanInputs, one: &Candidate, inter: &Candidate) -> Res<String> {
    let same = TrainingSetup {
        schedule: inter.setup.schedule,
        ..one.setup.clone()
    };
    let slower = inter.time.total_s() > one.time.total_s();
    match perf(evaluate(inp, &same))? {
        Err(reason) if slower && inter.time.compute_s > one.time.compute_s => Ok(format!(
            " Interleaving saves {} of bubble, but `{}` interleaved {reason}: it holds \
             more micro-batches' activations in flight. The interleaved layout that fits \
             recomputes instead, which costs {} more compute.",
            duration(one.time.bubble_s - inter.time.bubble_s),
            one.name,
            duration(inter.time.compute_s - one.time.compute_s)
        )),
        _ => Ok(String::new()),
    }
}

/// GPT-3 175B's fewest H100s: the model states' floor, then the planner's answer.
fn fewest_gpus() -> Res<Problem> {
    let model = perf(TransformerConfig::preset("gpt3-175b"))?;
    let g = perf(gpu("h100"))?;
    let batch = 1536;
    let inputs = |n: u64| -> Res<PlanInputs> {
        Ok(PlanInputs::new(
            model.clone(),
            perf(Cluster::new(g.clone(), n))?,
            batch,
        ))
    };
    let budget = inputs(1)?.headroom * g.memory_bytes;
    let states = perf(brrr_perf::memory::model_state_bytes(
        model.params(),
        brrr_perf::memory::Precision::Mixed,
        brrr_perf::memory::Optimizer::Adam,
        0,
        1,
    ))?
    .total();
    let floor = (states / budget).ceil() as u64;
    let n = smallest("GPUs for GPT-3 175B", floor..=4096, |n| {
        Ok(!perf(plan(&inputs(n)?))?.candidates.is_empty())
    })?;
    let p = perf(plan(&inputs(n)?))?;
    let best = p.candidates.first().ok_or("no layout")?;
    Ok(Problem {
        title: "the fewest GPUs for 175B parameters".into(),
        question: format!(
            "GPT-3 175B ({} layers, width {}, sequences of {} tokens), mixed-precision Adam, \
             {batch} sequences per step, on {}s. Counting only the model states, how many \
             GPUs does it need at the least? On how many does the planner find a layout that \
             fits, with all its options (ZeRO, recomputation, micro-batches, tensor parallelism \
             within a node, pipeline stages)?",
            model.layers, model.hidden, model.seq_len, g.name
        ),
        answer: format!(
            "The states are {} in all, and a GPU may hold {} ({} of its memory): at least \
             **{floor} GPUs**, if nothing else took memory and the layout divided evenly. The \
             planner needs **{n}**: the first count from {floor} on with a grid that divides \
             the model and the batch and leaves room for the activations. Its {} layouts that \
             fit there start with `{}` at {} per GPU ({} a step, MFU {}).",
            bytes_binary(states),
            bytes_binary(budget),
            percent(inputs(1)?.headroom),
            p.candidates.len(),
            best.name,
            bytes_binary(best.memory_bytes),
            duration(best.time.total_s()),
            percent(best.mfu)
        ),
    })
}

/// How many layouts of the chapter's 13B case come within `margin` of the best.
fn within(margin: f64) -> Res<Problem> {
    let inp = worked_inputs()?;
    let p = perf(plan(&inp))?;
    let best = p
        .candidates
        .first()
        .ok_or("no layout fits the worked case")?;
    let limit = best.time.total_s() * (1.0 + margin);
    let near: Vec<&Candidate> = p
        .candidates
        .iter()
        .filter(|c| c.time.total_s() <= limit)
        .collect();
    let mut grids: Vec<(u64, u64, u64)> = near
        .iter()
        .map(|c| (c.setup.dp, c.setup.tp, c.setup.pp))
        .collect();
    grids.sort_unstable();
    grids.dedup();
    let grid_names: Vec<String> = grids
        .iter()
        .map(|(d, t, p)| format!("dp {d} × tp {t} × pp {p}"))
        .collect();
    let lightest = near
        .iter()
        .min_by(|a, b| a.memory_bytes.total_cmp(&b.memory_bytes))
        .ok_or("no layout")?;
    Ok(Problem {
        title: "how flat the top is".into(),
        question: format!(
            "For the chapter's 13B model on {} {}s ({} sequences per step), how many of the \
             layouts that fit are predicted within {} of the fastest? Which of those leaves \
             the most memory free?",
            inp.cluster.gpus,
            inp.cluster.gpu.name,
            inp.global_batch,
            percent(margin)
        ),
        answer: format!(
            "**{}** of the {} that fit, on {} {}: {}. The fastest, `{}`, takes {} per \
             step at {} per GPU; the lightest of the {}, `{}`, takes {} at **{}** per GPU. \
             When the top is this flat, the memory left for longer sequences or a larger \
             micro-batch is worth more than the difference in speed.",
            near.len(),
            p.candidates.len(),
            grids.len(),
            if grids.len() == 1 { "grid" } else { "grids" },
            grid_names.join(", "),
            best.name,
            duration(best.time.total_s()),
            bytes_binary(best.memory_bytes),
            near.len(),
            lightest.name,
            duration(lightest.time.total_s()),
            bytes_binary(lightest.memory_bytes)
        ),
    })
}

/// The parts of a predicted step as shares of it.
fn shares(t: &StepTime) -> String {
    let share = |x: f64| percent(x / t.total_s());
    format!(
        "compute {}, tensor parallelism {}, exposed data-parallel collectives {}, pipeline \
         sends {}, bubble {}",
        share(t.compute_s),
        share(t.tp_s),
        share(t.dp_exposed_s),
        share(t.pp_s),
        share(t.bubble_s)
    )
}

/// `tp 8 × pp 1 × dp 32`.
fn grid(r: &published::PublishedRun) -> String {
    format!("tp {} × pp {} × dp {}", r.tp, r.pp, r.gpus / (r.tp * r.pp))
}

/// The GEMM efficiency that reproduces Megatron-LM's 1.7B row, and what it predicts for
/// its first tensor-parallel row that needs no pipeline beyond one node's group.
fn megatron_efficiency() -> Res<Problem> {
    let run = published::MEGATRON_TABLE1[0];
    let e = perf(published::calibrate(&run))?;
    let c = perf(run.predicted(e))?;
    // The answer's reasoning holds where the GEMMs run at the full efficiency.
    if (e * c.time.compute_s / c.time.total_s() - c.hfu).abs() > 1e-9 {
        return Err("the 1.7B run's GEMMs are below the roofline's cap".into());
    }
    let wide = published::MEGATRON_TABLE1
        .iter()
        .find(|r| r.tp == 8 && r.pp == 1)
        .ok_or("no 8-way tensor-parallel row")?;
    let w = perf(wide.predicted(e))?;
    Ok(Problem {
        title: "the efficiency behind a published run".into(),
        question: format!(
            "Megatron-LM trained a {}B GPT ({} layers, width {}) on {} A100s as {}, {} \
             sequences per step, micro-batch 1 and full recomputation, and reached {:.0}% of \
             the peak counting the recomputed forward (HFU). At what GEMM efficiency does the \
             planner predict the same? With that efficiency, what does it predict for the \
             {}B run ({} layers, width {}) on {} A100s as {}, published at {:.0}%?",
            run.params_b,
            run.layers,
            run.hidden,
            run.gpus,
            grid(&run),
            run.batch,
            run.percent_of_peak,
            wide.params_b,
            wide.layers,
            wide.hidden,
            wide.gpus,
            grid(wide),
            wide.percent_of_peak
        ),
        answer: format!(
            "**{}**. The predicted HFU is the efficiency times the compute's share of the \
             step, and the {}B step is {}: {}. For the {}B run the planner predicts an HFU \
             of **{}** (MFU {}), its step {}: {}. What the step spends outside the GEMMs \
             comes straight off the utilisation. {}",
            percent(e),
            run.params_b,
            duration(c.time.total_s()),
            shares(&c.time),
            wide.params_b,
            percent(w.hfu),
            percent(w.mfu),
            duration(w.time.total_s()),
            shares(&w.time),
            match w.hfu < wide.percent_of_peak / 100.0 {
                true => {
                    "The rest of the gap to the published figure is the wider model's GEMMs \
                     running nearer the peak than the narrow one's, which one efficiency for \
                     every GEMM cannot say."
                }
                false => "The one efficiency carries over to the wider model.",
            }
        ),
    })
}
