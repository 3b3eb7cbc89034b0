//! Chapter "What fills GPU memory": a training step's memory measured on the CPU
//! backend against the model's own count, and brrr-perf's estimates for larger models.

use crate::md::{Md, page};
use brrr_backend::{Backend, DType, Result as BResult};
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, Gpt, GptConfig, Module, Optimizer};
use brrr_perf::flops::estimate_time;
use brrr_perf::memory::{Recompute, TrainingSetup, TransformerConfig, estimate_memory};
use brrr_perf::specs::gpu;
use brrr_perf::table::{bytes_binary, count, duration, flops};
use brrr_perf::{DType as PDType, Result, Unit};
use brrr_tensor::Tensor;
use brrr_train::TrainConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// What the CPU backend's counters show around one training step of the default model.
struct StepMemory {
    state: u64,
    after_forward: u64,
    peak: u64,
    estimate: u64,
}

/// Two steps of the default model (the first creates AdamW's moments), counters read
/// around the second. Deterministic: byte counts depend on shapes only.
fn measure_step() -> BResult<StepMemory> {
    let cfg = TrainConfig::default();
    let (b, t, v) = (cfg.batch_size, cfg.seq_len, cfg.model.vocab_size);
    let be = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut gpt = Gpt::new(&be, cfg.model.clone(), DType::F32, &mut rng)?;
    let mut opt = AdamW::new(AdamWConfig::default());
    let n = b * t;
    let ids: Vec<u32> = (0..n as u32).map(|i| (i * 37 + 5) % v as u32).collect();
    let targets: Vec<i32> = ids
        .iter()
        .map(|&i| ((i * 3 + 1) % v as u32) as i32)
        .collect();
    let ids = Tensor::from_u32(&be, &ids, [b, t])?;
    let targets = Tensor::from_i32(&be, &targets, [b, t])?;
    let mut step = |gpt: &mut Gpt<CpuBackend>| -> BResult<u64> {
        let losses = gpt.forward_loss(&ids, &targets)?;
        let after_forward = be.memory_stats().bytes_in_use;
        drop(losses);
        gpt.backward(1.0 / n as f32)?;
        opt.step(gpt.params_mut(), 1e-3, 1.0)?;
        gpt.zero_grad()?;
        Ok(after_forward)
    };
    step(&mut gpt)?;
    let state = be.memory_stats().bytes_in_use;
    be.reset_peak_memory();
    let after_forward = step(&mut gpt)?;
    let estimate = brrr_train::memory::estimate(&cfg)?.device_bytes;
    Ok(StepMemory {
        state,
        after_forward,
        peak: be.memory_stats().peak_bytes,
        estimate,
    })
}

fn step_table() -> Result<String> {
    let m = measure_step().map_err(|e| brrr_perf::PerfError::Invalid(e.to_string()))?;
    let cfg = TrainConfig::default();
    let p = cfg.model.num_params() as u64;
    let mut t = Md::new(&["when", "bytes", "how it adds up"]).left(&[2]);
    let batch = 2 * (cfg.batch_size * cfg.seq_len) as u64 * 4;
    let row = |t: &mut Md, what: &str, b: u64, note: String| {
        t.row(vec![what.into(), b.to_string(), note]);
    };
    row(
        &mut t,
        "between steps (weights, gradients, 2 moments, the batch)",
        m.state,
        format!(
            "{p} parameters × 16 B + {batch} B of token ids and targets = {}",
            16 * p + batch
        ),
    );
    row(
        &mut t,
        "after the forward",
        m.after_forward,
        format!(
            "+ {} of saved activations and losses",
            bytes_binary((m.after_forward - m.state) as f64)
        ),
    );
    row(
        &mut t,
        "peak of the step",
        m.peak,
        bytes_binary(m.peak as f64),
    );
    row(
        &mut t,
        "`brrr_train::memory::estimate`",
        m.estimate,
        bytes_binary(m.estimate as f64),
    );
    Ok(page(&format!(
        "`brrr train`'s default model in f32 on brrr-cpu, batch {} × {} tokens, read from \
         `Backend::memory_stats`:\n\n{}",
        cfg.batch_size,
        cfg.seq_len,
        t.render()
    )))
}

/// Per-GPU memory of GPT-3-family models on 8 GPUs, by ZeRO stage.
fn zero_table() -> Result<String> {
    let mut t = Md::new(&[
        "model",
        "parameters",
        "ZeRO stage",
        "model states / GPU",
        "activations / GPU",
        "total / GPU",
    ]);
    for name in ["gpt2", "gpt3-1.3b", "gpt3-6.7b"] {
        let cfg = TransformerConfig::preset(name)?;
        for stage in [0u8, 1, 2, 3] {
            let setup = TrainingSetup {
                dp: 8,
                micro_batch: 4,
                zero_stage: stage,
                recompute: Recompute::Selective,
                ..TrainingSetup::default()
            };
            let m = estimate_memory(&cfg, &setup)?;
            t.row(vec![
                format!("`{name}`"),
                count(m.params_total),
                stage.to_string(),
                bytes_binary(m.states.total()),
                bytes_binary(m.activations()),
                bytes_binary(m.total()),
            ]);
        }
    }
    Ok(page(&format!(
        "Mixed-precision AdamW, 8 data-parallel GPUs, micro-batch 4, selective activation \
         recomputation:\n\n{}",
        t.render()
    )))
}

/// The memory bar of one configuration.
fn memory_svg() -> Result<String> {
    let cfg = TransformerConfig::preset("gpt3-6.7b")?;
    let setup = TrainingSetup {
        dp: 8,
        micro_batch: 4,
        zero_stage: 1,
        recompute: Recompute::Selective,
        ..TrainingSetup::default()
    };
    let m = estimate_memory(&cfg, &setup)?;
    brrr_perf::report::memory_svg(&m, Some(&gpu("a100")?))
}

/// Time to train famous runs at a given MFU.
fn time_table() -> Result<String> {
    let mut t = Md::new(&[
        "run",
        "FLOPs (6ND + attention)",
        "GPUs",
        "MFU (assumed)",
        "time",
    ]);
    let runs: [(&str, &str, f64, u64, f64); 3] = [
        ("GPT-2 small, 10B tokens, 8 × H100", "gpt2", 10e9, 8, 0.4),
        (
            "GPT-3 6.7B, 300B tokens, 256 × A100",
            "gpt3-6.7b",
            300e9,
            256,
            0.4,
        ),
        (
            "GPT-3 175B, 300B tokens, 1024 × A100",
            "gpt3-175b",
            300e9,
            1024,
            0.4,
        ),
    ];
    for (what, preset, tokens, gpus, mfu) in runs {
        let cfg = TransformerConfig::preset(preset)?;
        let g = gpu(if what.contains("H100") {
            "h100"
        } else {
            "a100"
        })?;
        let peak = g.peak(PDType::Bf16, Unit::Tensor)?;
        let e = estimate_time(cfg.params(), tokens, Some(&cfg), gpus, peak, mfu)?;
        t.row(vec![
            what.to_string(),
            flops(e.flops),
            gpus.to_string(),
            format!("{:.0}%", mfu * 100.0),
            duration(e.seconds),
        ]);
    }
    Ok(page(&t.render()))
}

/// Ring all-reduce of a model's bf16 gradients over 8 GPUs of one node, against the
/// compute of one step: the data-parallel question "is communication hidden?".
fn comms_table() -> Result<String> {
    use brrr_perf::comms::{Algorithm, Collective, Link, collective_time};
    let mut t = Md::new(&[
        "model",
        "GPU (8 in a node)",
        "gradient bytes (bf16)",
        "link (one direction)",
        "ring all-reduce",
    ]);
    for (preset, gpu_id) in [("gpt2", "a100"), ("gpt2", "h100"), ("gpt3-1.3b", "h100")] {
        let cfg = TransformerConfig::preset(preset)?;
        let g = gpu(gpu_id)?;
        let link = Link::intra_node(&g)?;
        let grad_bytes = cfg.params() * 2.0;
        let time = collective_time(Collective::AllReduce, Algorithm::Ring, 8, grad_bytes, link)?;
        t.row(vec![
            format!("`{preset}`"),
            g.name.clone(),
            brrr_perf::table::bytes(grad_bytes),
            brrr_perf::table::bandwidth(link.bandwidth),
            duration(time),
        ]);
    }
    Ok(page(&t.render()))
}

/// Every parameter of the GPT `cfg` describes, as `(name, dims)`, read from a `Gpt` built
/// on brrr-cpu (the model's own names and shapes; its values are not used).
fn param_shapes(cfg: &GptConfig) -> BResult<Vec<(String, Vec<usize>)>> {
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let gpt = Gpt::new(&CpuBackend::new(), cfg.clone(), DType::F32, &mut rng)?;
    Ok(gpt
        .params()
        .iter()
        .map(|p| (p.name.clone(), p.value.dims().to_vec()))
        .collect())
}

/// Optimizer state of GPT-2 124M under each `--optimizer`, from
/// `brrr_nn::Optimizer::state_bytes` over the model's parameters: the attention and MLP
/// matrices (what GaLore projects) apart from the rest.
fn optimizer_table() -> Result<String> {
    let invalid = |e: String| brrr_perf::PerfError::Invalid(e);
    let cfg = GptConfig::gpt2_124m();
    let params = param_shapes(&cfg).map_err(|e| invalid(e.to_string()))?;
    let is_matrix = |name: &str, dims: &[usize]| {
        dims.len() == 2 && (name.contains("attn") || name.contains("mlp"))
    };
    let numel = |dims: &[usize]| dims.iter().product::<usize>();
    let (mut n_matrix, mut n_rest) = (0usize, 0usize);
    for (name, dims) in &params {
        match is_matrix(name, dims) {
            true => n_matrix += numel(dims),
            false => n_rest += numel(dims),
        }
    }
    let total_params = n_matrix + n_rest;
    if total_params != cfg.num_params() {
        return Err(invalid(format!(
            "GPT-2 124M has {total_params} parameters, GptConfig::num_params counts {}",
            cfg.num_params()
        )));
    }
    let mut t = Md::new(&[
        "`--optimizer`",
        "attention and MLP matrices",
        "everything else",
        "total",
        "bytes / parameter",
        "of AdamW's",
    ]);
    let mut adamw_total = None;
    for text in ["adamw", "adamw8bit", "galore:128", "galore:256"] {
        let opt: Optimizer = text.parse().map_err(invalid)?;
        let (mut matrix, mut rest) = (0usize, 0usize);
        for (name, dims) in &params {
            let b = opt.state_bytes(name, dims);
            match is_matrix(name, dims) {
                true => matrix += b,
                false => rest += b,
            }
        }
        let total = (matrix + rest) as f64;
        let base = *adamw_total.get_or_insert(total);
        t.row(vec![
            format!("`{text}`"),
            bytes_binary(matrix as f64),
            bytes_binary(rest as f64),
            bytes_binary(total),
            crate::md::sig3(total / total_params as f64),
            format!("{:.0}%", 100.0 * total / base),
        ]);
    }
    Ok(page(&format!(
        "GPT-2 124M ({} parameters: {} in the blocks' attention and MLP matrices, {} in the \
         embeddings, biases and LayerNorms; the weights themselves take {} in f32), optimizer \
         state from `brrr_nn::Optimizer::state_bytes`:\n\n{}",
        count(total_params as f64),
        count(n_matrix as f64),
        count(n_rest as f64),
        bytes_binary(4.0 * total_params as f64),
        t.render()
    )))
}

/// Where the model states of GPT-2 XL go with offload and LoRA: brrr-perf's
/// `estimate_memory` per setup (mixed precision, AdamW, micro-batch 1 of 1024 tokens).
fn finetune_table() -> Result<String> {
    let cfg = TransformerConfig::preset("gpt2-xl")?;
    let setups: [(&str, bool, Option<u64>); 5] = [
        ("AdamW", false, None),
        ("AdamW, offload", true, None),
        ("LoRA rank 8", false, Some(8)),
        ("LoRA rank 64", false, Some(64)),
        ("LoRA rank 8, offload", true, Some(8)),
    ];
    let mut t = Md::new(&[
        "training",
        "trained parameters",
        "weights",
        "gradients",
        "f32 masters",
        "optimizer states",
        "model states on the GPU",
        "in host memory",
    ]);
    for (name, offload, lora_rank) in setups {
        let m = estimate_memory(
            &cfg,
            &TrainingSetup {
                offload,
                lora_rank,
                ..TrainingSetup::default()
            },
        )?;
        let st = &m.states;
        t.row(vec![
            name.to_string(),
            count(m.trained_params),
            bytes_binary(st.weights),
            bytes_binary(st.gradients),
            bytes_binary(st.master_weights),
            bytes_binary(st.optimizer_states),
            bytes_binary(st.total()),
            bytes_binary(m.offloaded),
        ]);
    }
    Ok(page(&format!(
        "GPT-2 XL ({} parameters), mixed precision, from `brrr_perf::memory::estimate_memory` \
         (activations apart: they do not change):\n\n{}",
        count(cfg.params()),
        t.render()
    )))
}

/// The chapter's files.
pub fn files() -> Result<Vec<(String, String)>> {
    Ok(vec![
        ("memory-optimizers.md".into(), optimizer_table()?),
        ("memory-finetune.md".into(), finetune_table()?),
        ("memory-step.md".into(), step_table()?),
        ("memory-zero.md".into(), zero_table()?),
        ("memory-zero.svg".into(), memory_svg()?),
        ("memory-time.md".into(), time_table()?),
        ("memory-comms.md".into(), comms_table()?),
    ])
}
