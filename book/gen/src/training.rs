//! Chapter "Training a GPT": the default model's shape, parameters and FLOPs.

use crate::md::{Md, page};
use brrr_nn::GptConfig;
use brrr_perf::table::{count, flops};
use brrr_train::TrainConfig;

/// `brrr train`'s default model and GPT-2 small, side by side.
fn models_table() -> String {
    let default = TrainConfig::default();
    let mut t = Md::new(&[
        "model",
        "layers",
        "heads",
        "width",
        "context",
        "vocabulary",
        "parameters",
        "training FLOPs per token",
    ]);
    let rows: [(&str, &GptConfig, usize); 2] = [
        ("`brrr train` default", &default.model, default.seq_len),
        (
            "GPT-2 small (padded vocabulary)",
            &GptConfig::gpt2_124m(),
            1024,
        ),
    ];
    for (name, c, seq) in rows {
        t.row(vec![
            name.to_string(),
            c.n_layer.to_string(),
            c.n_head.to_string(),
            c.n_embd.to_string(),
            c.block_size.to_string(),
            c.vocab_size.to_string(),
            format!("{} ({})", c.num_params(), count(c.num_params() as f64)),
            flops(c.flops_per_token(seq)),
        ]);
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

/// The chapter's files.
pub fn files() -> Vec<(String, String)> {
    vec![("training-models.md".into(), models_table())]
}
