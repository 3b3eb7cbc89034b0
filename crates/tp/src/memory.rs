//! Per-rank memory of a tensor-parallel GPT, measured (`Backend::memory_stats` of each
//! rank's own device) beside `brrr-perf`'s estimate
//! ([`brrr_perf::tensor_parallel`]): parameters (weights and gradients, f32) and the
//! activations one micro-batch's forward keeps for the backward.

use crate::model::TpGpt;
use brrr_backend::{Backend, DType, Error, Result};
use brrr_collectives::Communicator;
use brrr_nn::{Gpt, GptConfig, MicroBatch};
use brrr_perf::memory::TransformerConfig;
use brrr_perf::tensor_parallel::{
    activation_elements_per_layer, head_activation_elements, params_per_rank,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// One rank's measured and estimated bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankMemory {
    /// Weights and gradients of this rank's shard, measured after building it.
    pub param_bytes: u64,
    /// `8 ×` [`params_per_rank`]: f32 weight and gradient.
    pub param_bytes_estimate: f64,
    /// Bytes still in use after one forward (the loss dropped) minus before it: what the
    /// forward kept for the backward.
    pub activation_bytes: u64,
    /// `4 ×` (layers × [`activation_elements_per_layer`] + [`head_activation_elements`]).
    pub activation_bytes_estimate: f64,
    /// The device's peak above the parameters during forward and backward: the saved
    /// activations plus the passes' temporaries (logits, gradients in flight).
    pub step_peak_bytes: u64,
}

/// brrr-perf's description of `model` at sequence length `seq`.
pub fn perf_config(model: &GptConfig, seq: usize) -> TransformerConfig {
    let mut cfg = TransformerConfig::gpt(
        model.n_layer as u64,
        model.n_embd as u64,
        model.n_head as u64,
        seq as u64,
        model.vocab_size as u64,
    );
    // The positional table covers the context, not the training sequence.
    cfg.learned_positions = true;
    cfg
}

/// Measures this rank's memory for a `[batch, seq]` micro-batch of `model`, built from
/// `seed`, on `backend` (which must count only this rank's buffers: one backend per
/// rank). Collective over the tensor-parallel group `comm`.
pub fn measure_rank<B: Backend>(
    backend: &B,
    comm: Arc<Communicator>,
    model: &GptConfig,
    batch: usize,
    seq: usize,
    sp: bool,
) -> Result<RankMemory> {
    let tp = comm.world_size();
    let perf = perf_config(model, model.block_size);
    let act_cfg = perf_config(model, seq);
    let e = |r: brrr_perf::Result<f64>| r.map_err(|e| Error::invalid("tp memory", e.to_string()));
    let param_est = 8.0 * e(params_per_rank(&perf, tp as u64))?;
    let layer = e(activation_elements_per_layer(
        &act_cfg,
        batch as u64,
        tp as u64,
        sp,
    ))?;
    let head = e(head_activation_elements(
        &act_cfg,
        batch as u64,
        tp as u64,
        sp,
    ))?;
    let act_est = 4.0 * (model.n_layer as f64 * layer + head);

    let base = backend.memory_stats().bytes_in_use;
    let gpt = Gpt::new(
        backend,
        model.clone(),
        DType::F32,
        &mut ChaCha8Rng::seed_from_u64(1),
    )?;
    let mut tp_model = TpGpt::from_gpt(&gpt, comm, sp)?;
    drop(gpt);
    let params = backend.memory_stats().bytes_in_use - base;
    let n = batch * seq;
    let ids: Vec<u32> = (0..n).map(|i| (i * 7 % model.vocab_size) as u32).collect();
    let targets: Vec<u32> = (0..n).map(|i| (i * 11 % model.vocab_size) as u32).collect();
    let before = backend.memory_stats().bytes_in_use;
    backend.reset_peak_memory();
    let losses = tp_model.forward_loss_mb(MicroBatch(0), &ids, &targets, (batch, seq))?;
    drop(losses);
    let kept = backend.memory_stats().bytes_in_use - before;
    tp_model.backward_mb(MicroBatch(0), 1.0 / n as f32)?;
    let peak = backend.memory_stats().peak_bytes - before;
    Ok(RankMemory {
        param_bytes: params,
        param_bytes_estimate: param_est,
        activation_bytes: kept,
        activation_bytes_estimate: act_est,
        step_peak_bytes: peak,
    })
}
