//! The planner against published layouts: Megatron-LM's weak-scaling runs (Narayanan et
//! al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
//! Megatron-LM", SC 2021, Table 1: GPT models of 1.7B to 1T parameters on 32 to 3,072
//! A100 80 GB GPUs, `s = 2048`, `V = 51,200`, mixed precision, full recomputation).
//!
//! The table reports achieved FLOP/s counted by the paper's eq. 3, which includes the
//! recomputed forward: a hardware FLOPs utilisation, compared here with the planner's
//! [`Candidate::hfu`](super::Candidate::hfu). The planner's one free parameter, the GEMM
//! efficiency, is calibrated on the first row (pure data parallelism, where the other
//! terms are small) and the other nine rows are predicted with it.

use super::{Candidate, Cluster, PlanInputs, evaluate, plan};
use crate::memory::{PipelineSchedule, Recompute, TrainingSetup, TransformerConfig};
use crate::report::Report;
use crate::specs::gpu;
use crate::table::{self, Table};
use crate::{PerfError, Result};
use serde::Serialize;

/// One row of Megatron-LM's Table 1.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PublishedRun {
    /// Parameters, billions (the paper's count).
    pub params_b: f64,
    /// Attention heads.
    pub heads: u64,
    /// Hidden size.
    pub hidden: u64,
    /// Layers.
    pub layers: u64,
    /// Tensor-parallel size.
    pub tp: u64,
    /// Pipeline-parallel size.
    pub pp: u64,
    /// GPUs.
    pub gpus: u64,
    /// Global batch, sequences.
    pub batch: u64,
    /// Achieved percentage of the A100's 312 TFLOP/s, recomputation counted.
    pub percent_of_peak: f64,
}

/// Narayanan et al. 2021, Table 1.
pub const MEGATRON_TABLE1: [PublishedRun; 10] = [
    run(1.7, 24, 2304, 24, 1, 1, 32, 512, 44.0),
    run(3.6, 32, 3072, 30, 2, 1, 64, 512, 44.0),
    run(7.5, 32, 4096, 36, 4, 1, 128, 512, 46.0),
    run(18.4, 48, 6144, 40, 8, 1, 256, 1024, 43.0),
    run(39.1, 64, 8192, 48, 8, 2, 512, 1536, 44.0),
    run(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 45.0),
    run(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 47.0),
    run(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 50.0),
    run(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 52.0),
    run(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 52.0),
];

#[allow(clippy::too_many_arguments)]
const fn run(
    params_b: f64,
    heads: u64,
    hidden: u64,
    layers: u64,
    tp: u64,
    pp: u64,
    gpus: u64,
    batch: u64,
    percent_of_peak: f64,
) -> PublishedRun {
    PublishedRun {
        params_b,
        heads,
        hidden,
        layers,
        tp,
        pp,
        gpus,
        batch,
        percent_of_peak,
    }
}

impl PublishedRun {
    /// The planner's inputs for this run (A100 80 GB, 8 per node).
    pub fn inputs(&self, efficiency: f64) -> Result<PlanInputs> {
        let model = TransformerConfig::gpt(self.layers, self.hidden, self.heads, 2048, 51200);
        let mut inp = PlanInputs::new(model, Cluster::new(gpu("a100")?, self.gpus)?, self.batch);
        inp.efficiency = efficiency;
        Ok(inp)
    }

    /// The published layout: micro-batch 1, full recomputation, 1F1B, no ZeRO (the
    /// paper's interleaved schedule is not modelled for stages of an odd layer count).
    pub fn setup(&self) -> TrainingSetup {
        let dp = self.gpus / (self.tp * self.pp);
        TrainingSetup {
            dp,
            tp: self.tp,
            pp: self.pp,
            micro_batch: 1,
            grad_accum: self.batch / dp,
            recompute: Recompute::Full,
            schedule: PipelineSchedule::OneFOneB,
            ..TrainingSetup::default()
        }
    }

    /// The planner's prediction for the published layout.
    pub fn predicted(&self, efficiency: f64) -> Result<Candidate> {
        match evaluate(&self.inputs(efficiency)?, &self.setup())? {
            Ok(c) => Ok(c),
            Err(why) => Err(PerfError::Invalid(format!(
                "the published {}B layout: {why}",
                self.params_b
            ))),
        }
    }
}

/// The GEMM efficiency at which the planner predicts `run`'s published utilisation
/// (bisection: the prediction grows with the efficiency).
pub fn calibrate(run: &PublishedRun) -> Result<f64> {
    let target = run.percent_of_peak / 100.0;
    let (mut lo, mut hi) = (0.01, 1.0);
    if run.predicted(hi)?.hfu < target {
        return Ok(hi);
    }
    for _ in 0..50 {
        let mid = 0.5 * (lo + hi);
        match run.predicted(mid)?.hfu < target {
            true => lo = mid,
            false => hi = mid,
        }
    }
    Ok(0.5 * (lo + hi))
}

/// One row of the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The published run.
    pub run: PublishedRun,
    /// The planner's HFU for the published layout.
    pub predicted_hfu: f64,
    /// The planner's MFU for the published layout.
    pub predicted_mfu: f64,
    /// The planner's best layout for the same model, GPUs and batch.
    pub best: String,
    /// Its predicted HFU.
    pub best_hfu: f64,
    /// Its predicted MFU.
    pub best_mfu: f64,
}

/// Every row of Table 1 against the planner, calibrated on the first row.
pub fn megatron_comparison() -> Result<(f64, Vec<Comparison>)> {
    let efficiency = calibrate(&MEGATRON_TABLE1[0])?;
    let rows = MEGATRON_TABLE1
        .iter()
        .map(|r| {
            let p = plan(&r.inputs(efficiency)?)?;
            let best = p.candidates.first().ok_or_else(|| {
                PerfError::Invalid(format!("no layout fits the {}B model", r.params_b))
            })?;
            let theirs = r.predicted(efficiency)?;
            Ok(Comparison {
                run: *r,
                predicted_hfu: theirs.hfu,
                predicted_mfu: theirs.mfu,
                best: best.name.clone(),
                best_hfu: best.hfu,
                best_mfu: best.mfu,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((efficiency, rows))
}

/// The comparison as a report: each published run, the planner's prediction for its
/// layout, and the planner's best layout.
pub fn comparison_report(efficiency: f64, rows: &[Comparison]) -> Report {
    let mut r = Report::new(
        "Megatron-LM's published layouts (Narayanan et al. 2021, Table 1) against brrr plan",
        serde_json::json!({ "efficiency": efficiency, "rows": rows }),
    );
    let mut t = Table::new([
        "params",
        "GPUs",
        "published layout",
        "published",
        "predicted",
        "brrr's best layout",
        "its HFU",
        "its MFU",
    ]);
    for c in rows {
        let r = &c.run;
        t.row([
            format!("{}B", r.params_b),
            r.gpus.to_string(),
            format!("tp {} × pp {} × dp {}", r.tp, r.pp, r.gpus / (r.tp * r.pp)),
            format!("{:.0}%", r.percent_of_peak),
            table::percent(c.predicted_hfu),
            c.best.clone(),
            table::percent(c.best_hfu),
            table::percent(c.best_mfu),
        ]);
    }
    r.table(
        "Hardware FLOPs utilisation (recomputation counted, as the paper counts)",
        t,
    );
    r.note(format!(
        "GEMM efficiency {:.1}%, calibrated on the first row; the other rows are predictions. \
         The published layouts are modelled with micro-batch 1, full recomputation and \
         1F1B. MFU counts only the model's FLOPs (6N plus attention), so a layout that \
         recomputes less can win with a lower HFU.",
        efficiency * 100.0
    ));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_reproduces_its_own_row() {
        let r = &MEGATRON_TABLE1[0];
        let e = calibrate(r).unwrap();
        assert!(e > 0.3 && e < 1.0, "{e}");
        assert!((r.predicted(e).unwrap().hfu - 0.44).abs() < 1e-3);
    }

    #[test]
    fn the_published_layouts_fit_and_are_predicted_within_a_third() {
        let (_, rows) = megatron_comparison().unwrap();
        for c in &rows {
            let published = c.run.percent_of_peak / 100.0;
            let ratio = c.predicted_hfu / published;
            assert!((0.67..1.5).contains(&ratio), "{}B: {ratio}", c.run.params_b);
            // The search includes the published layout, so its best is no slower.
            assert!(c.best_mfu >= c.predicted_mfu * 0.999, "{}B", c.run.params_b);
        }
    }
}
