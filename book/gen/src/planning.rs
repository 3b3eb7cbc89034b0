//! The layout chapter's tables and figure, from brrr-perf's planner: Megatron-LM's
//! published layouts against the planner's predictions, and a search worked through.

use crate::md::{Md, page};
use brrr_perf::memory::TransformerConfig;
use brrr_perf::plan::{self, Cluster, PlanInputs, published};
use brrr_perf::specs::gpu;

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// Megatron-LM's Table 1 beside the planner, calibrated on its first row.
fn megatron() -> Result<String, String> {
    let (e, rows) = published::megatron_comparison().map_err(|e| e.to_string())?;
    let mut t = Md::new(&[
        "params",
        "GPUs",
        "published layout",
        "published HFU",
        "predicted HFU",
        "brrr plan's best",
        "its MFU",
        "published layout's MFU",
    ])
    .left(&[2, 5]);
    for c in &rows {
        let r = &c.run;
        t.row(vec![
            format!("{}B", r.params_b),
            r.gpus.to_string(),
            format!("tp {} × pp {} × dp {}", r.tp, r.pp, r.gpus / (r.tp * r.pp)),
            format!("{:.0}%", r.percent_of_peak),
            pct(c.predicted_hfu),
            c.best.clone(),
            pct(c.best_mfu),
            pct(c.predicted_mfu),
        ]);
    }
    Ok(page(&format!(
        "{}\nGEMM efficiency {:.1}%, calibrated on the first row; every other number is a \
         prediction. `brrr plan --published` prints the same.\n",
        t.render(),
        100.0 * e
    )))
}

/// The worked case: a 13B-parameter GPT on 64 H100s with 4M-token batches.
pub(crate) fn worked_inputs() -> Result<PlanInputs, String> {
    let model = TransformerConfig::gpt(40, 5120, 40, 2048, 50257);
    let cluster =
        Cluster::new(gpu("h100").map_err(|e| e.to_string())?, 64).map_err(|e| e.to_string())?;
    Ok(PlanInputs::new(model, cluster, 2048))
}

/// The worked case's best layouts.
fn worked() -> Result<(String, String), String> {
    let inp = worked_inputs()?;
    let p = plan::plan(&inp).map_err(|e| e.to_string())?;
    let mut t = Md::new(&[
        "#",
        "layout",
        "GiB/GPU",
        "step",
        "MFU",
        "tp",
        "dp",
        "bubble",
        "limited by",
    ])
    .left(&[1, 8]);
    for (i, c) in p.candidates.iter().take(8).enumerate() {
        let s = &c.time;
        let share = |x: f64| pct(x / s.total_s());
        t.row(vec![
            (i + 1).to_string(),
            c.name.clone(),
            format!("{:.1}", c.memory_bytes / (1u64 << 30) as f64),
            format!("{:.2} s", s.total_s()),
            pct(c.mfu),
            share(s.tp_s),
            share(s.dp_exposed_s),
            share(s.bubble_s),
            s.limit().to_string(),
        ]);
    }
    let mut why = String::new();
    for (reason, n, example) in p.rejected.iter().take(3) {
        why.push_str(&format!("- {n} discarded: {reason} (e.g. `{example}`)\n"));
    }
    let text = page(&format!(
        "{}\n{} layouts considered, {} fit.\n\n{why}",
        t.render(),
        p.considered,
        p.candidates.len()
    ));
    let svg = p.svg(&inp, 5).map_err(|e| e.to_string())?;
    Ok((text, svg))
}

/// The chapter's generated files.
pub fn files() -> Result<Vec<(String, String)>, String> {
    let (table, svg) = worked()?;
    Ok(vec![
        ("planning-megatron.md".into(), megatron()?),
        ("planning-13b.md".into(), table),
        ("planning-13b.svg".into(), svg),
    ])
}
