//! Chapter "Training a GPT": the default model's shape, parameters and FLOPs.

use crate::md::{Md, page};
use brrr_nn::GptConfig;
use brrr_perf::table::{count, flops};
use brrr_train::TrainConfig;

/// One cell of the models table: a model and its sequence length to the text shown.
type Cell = fn(&GptConfig, usize) -> String;

/// `brrr train`'s default model and GPT-2 small, side by side (one column each).
fn models_table() -> String {
    let default = TrainConfig::default();
    let gpt2 = GptConfig::gpt2_124m();
    let models: [(&GptConfig, usize); 2] = [(&default.model, default.seq_len), (&gpt2, 1024)];
    let mut t = Md::new(&[
        "",
        "`brrr train` default",
        "GPT-2 small (padded vocabulary)",
    ]);
    let rows: [(&str, Cell); 7] = [
        ("layers", |c, _| c.n_layer.to_string()),
        ("heads", |c, _| c.n_head.to_string()),
        ("width", |c, _| c.n_embd.to_string()),
        ("context", |c, _| c.block_size.to_string()),
        ("vocabulary", |c, _| c.vocab_size.to_string()),
        ("parameters", |c, _| {
            format!("{} ({})", c.num_params(), count(c.num_params() as f64))
        }),
        ("training FLOPs per token", |c, seq| {
            flops(c.flops_per_token(seq))
        }),
    ];
    for (name, cell) in rows {
        let mut r = vec![name.to_string()];
        r.extend(models.iter().map(|(c, seq)| cell(c, *seq)));
        t.row(r);
    }
    let d = &default;
    page(&format!(
        "{}\nThe default run: {} steps of {} sequences × {} tokens = {} tokens per step, \
         learning rate {} (warmup {} steps, cosine to {}), AdamW weight decay {}, gradient \
         clipping at {}.\n",
        t.render(),
        d.steps,
        d.batch_size,
        d.seq_len,
        d.tokens_per_step(),
        d.lr,
        d.warmup_steps,
        d.min_lr,
        d.weight_decay,
        d.grad_clip
    ))
}

/// The default run's learning rate at a few steps (`CosineSchedule::lr`, from 0).
fn schedule_table() -> String {
    let cfg = TrainConfig::default();
    let s = cfg.schedule();
    let last = cfg.steps - 1;
    let mut t = Md::new(&["step", "learning rate"]);
    for step in [
        0,
        s.warmup_steps / 2,
        s.warmup_steps - 1,
        last / 4,
        last / 2,
        last,
    ] {
        t.row(vec![step.to_string(), format!("{:.3e}", s.lr(step))]);
    }
    page(&t.render())
}

/// Micro-batch schedules written as `brrr-train` writes them, and how many micro-batches
/// each keeps in flight.
fn micro_batch_table() -> Result<String, brrr_backend::Error> {
    use brrr_train::schedule::{Action, MicroBatchSchedule};
    let k = 4;
    let gpipe: Vec<Action> = (0..k)
        .map(Action::Forward)
        .chain((0..k).rev().map(Action::Backward))
        .collect();
    let mut t = Md::new(&["schedule", "actions", "micro-batches in flight"]).left(&[1]);
    for (name, s) in [
        (
            "gradient accumulation",
            MicroBatchSchedule::grad_accumulation(k)?,
        ),
        (
            "all forwards first (GPipe)",
            MicroBatchSchedule::new(gpipe)?,
        ),
    ] {
        t.row(vec![
            name.to_string(),
            format!("`{s}`"),
            s.max_in_flight().to_string(),
        ]);
    }
    Ok(page(&t.render()))
}

/// The chapter's files.
pub fn files() -> Result<Vec<(String, String)>, brrr_backend::Error> {
    Ok(vec![
        ("training-models.md".into(), models_table()),
        ("training-schedule.md".into(), schedule_table()),
        ("training-micro-batches.md".into(), micro_batch_table()?),
    ])
}
