//! The step-time model of [`super`]: compute at a calibrated efficiency, the
//! collectives each layout adds and what of them its schedule hides, and the bubble.

use super::{PlanInputs, StepTime, peak};
use crate::Result;
use crate::comms::{Algorithm, Collective, collective_time};
use crate::flops::hardware_flops_per_token;
use crate::memory::{PipelineSchedule, Recompute, TrainingSetup};

/// A layout's predicted step time (see the module's table).
pub fn predict(inp: &PlanInputs, s: &TrainingSetup) -> Result<StepTime> {
    let (m, c) = (&inp.model, &inp.cluster);
    let peak = peak(&c.gpu, s.precision)?;
    let act = s.precision.activation_bytes();
    let tokens_per_gpu = (inp.global_batch * m.seq_len) as f64 / c.gpus as f64;
    let flops = hardware_flops_per_token(m, s.recompute)? * tokens_per_gpu;
    let compute_s = flops / (peak * gemm_efficiency(inp, s, peak, act));

    let layers = (m.layers / s.pp) as f64;
    let mb = s.grad_accum as f64;
    let activation = (s.micro_batch * m.seq_len * m.hidden) as f64 * act;
    let per_layer = if s.recompute == Recompute::Full {
        6.0
    } else {
        4.0
    };
    let tp_link = c.link(s.tp, 1);
    let one = collective_time(
        Collective::AllReduce,
        Algorithm::Ring,
        s.tp,
        activation,
        tp_link,
    )?;
    let tp_s = layers * mb * per_layer * one;

    let dp_exposed_s = dp_exposed(inp, s, compute_s)?;
    let pp_link = c.link(s.pp, s.tp * s.dp);
    let send = match s.pp {
        1 => 0.0,
        _ => pp_link.alpha_s + activation / s.tp.max(1) as f64 * sp_share(s) / pp_link.bandwidth,
    };
    let pp_s = 2.0 * (mb + s.pp as f64 - 2.0).max(0.0) * send;
    let chunks = match s.schedule {
        PipelineSchedule::Interleaved { chunks } => chunks as f64,
        _ => 1.0,
    };
    let bubble_s = (s.pp as f64 - 1.0) / (chunks * mb) * (compute_s + tp_s);
    Ok(StepTime {
        compute_s,
        tp_s,
        dp_exposed_s,
        pp_s,
        bubble_s,
    })
}

/// With sequence parallelism a stage sends its sequence shard, `1/t` of the activations
/// (the `1/t` is applied with it); without, every tensor rank sends the whole.
fn sp_share(s: &TrainingSetup) -> f64 {
    match s.sequence_parallel {
        true => 1.0,
        false => s.tp as f64,
    }
}

/// The efficiency a layer's GEMMs reach: `efficiency` for a large GEMM, less where the
/// roofline of the widest one (`b·s × h` by `h × 4h/t`) says memory bound.
fn gemm_efficiency(inp: &PlanInputs, s: &TrainingSetup, peak: f64, bytes: f64) -> f64 {
    let (m, k) = (
        (s.micro_batch * inp.model.seq_len) as f64,
        inp.model.hidden as f64,
    );
    let n = inp.model.ffn_hidden as f64 / s.tp as f64;
    let intensity = 2.0 * m * n * k / ((m * k + k * n + m * n) * bytes);
    let roof = intensity * inp.cluster.gpu.memory_bandwidth;
    inp.efficiency * (roof / (peak * inp.efficiency)).min(1.0)
}

/// The data-parallel collectives the compute does not hide, as brrr-dp's engine
/// schedules them (see the module's table). Collectives go one unit (a layer, or the
/// embeddings and head) at a time, so each pays the ring's latency `(n − 1)·α`: at a
/// thousand ranks that, not the bandwidth, is what ZeRO-3 loses.
fn dp_exposed(inp: &PlanInputs, s: &TrainingSetup, compute_s: f64) -> Result<f64> {
    if s.dp == 1 {
        return Ok(0.0);
    }
    let (m, c) = (&inp.model, &inp.cluster);
    let units = (m.layers / s.pp) as f64 + 1.0;
    let params = (m.layers / s.pp) as f64 * m.layer_params(s.tp) + m.embedding_params(s.tp);
    let (w, g, _) = s.precision.bytes_per_param();
    let link = c.link(s.dp, s.tp);
    // One pass over every unit: `units` collectives of a unit's bytes each.
    let pass = |coll, bytes: f64| -> Result<f64> {
        Ok(units * collective_time(coll, Algorithm::Ring, s.dp, bytes / units, link)?)
    };
    let mbs = s.grad_accum as f64;
    let per_mb = compute_s / mbs;
    let (forward, backward) = (per_mb / 3.0, per_mb * 2.0 / 3.0);
    // A pass hidden under `work` except its last (or first) unit.
    let hide = |t: f64, work: f64| (t - work).max(t / units);
    let gather = pass(Collective::AllGather, params * w)?;
    Ok(match s.zero_stage {
        // Gradients reduced once, under the last micro-batch's backward.
        0 => hide(pass(Collective::AllReduce, params * g)?, backward),
        // Then the updated parameters all-gathered after the optimizer step.
        1 => hide(pass(Collective::ReduceScatter, params * g)?, backward) + gather,
        // Gradients kept sharded: reduce-scattered under every micro-batch's backward.
        2 => mbs * hide(pass(Collective::ReduceScatter, params * g)?, backward) + gather,
        // And parameters gathered for every pass: forward, backward (and the
        // recomputed forward), each under its compute.
        _ => {
            let rs = hide(pass(Collective::ReduceScatter, params * g)?, backward);
            let again = if s.recompute == Recompute::Full {
                2.0
            } else {
                1.0
            };
            mbs * (rs + hide(gather, forward) + again * hide(gather, backward / again))
        }
    })
}
