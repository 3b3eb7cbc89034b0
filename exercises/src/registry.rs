//! The list of exercises, in book order.

use crate::check::Outcome;
use crate::{
    amp, checkpointing, collectives, data, data_parallel, gpu, kernels, memory, pipeline, regimes,
    serving, tensor_parallel, training,
};

/// One exercise as the runner and the book list it.
#[derive(Debug, Clone, Copy)]
pub struct Exercise {
    /// The book chapter's title.
    pub chapter: &'static str,
    /// Module path inside this crate, e.g. `regimes::gemm_cost` (its test is
    /// `regimes::gemm_cost::tests::check`).
    pub module: &'static str,
    /// One line: what to write.
    pub task: &'static str,
    /// Runs the exercise's check.
    pub check: fn() -> Outcome,
}

impl Exercise {
    /// The file a reader edits, relative to the repository root.
    pub fn file(&self) -> String {
        format!("exercises/src/{}.rs", self.module.replace("::", "/"))
    }

    /// The short name (the module's last part).
    pub fn name(&self) -> &'static str {
        self.module.rsplit("::").next().unwrap_or(self.module)
    }
}

const REGIMES: &str = "Three regimes and rooflines";
const GPU: &str = "What a GPU is";
const KERNELS: &str = "Kernels: from naive to tiled, and fusion";
const TRAINING: &str = "Training a GPT with an explicit backward";
const MEMORY: &str = "What fills GPU memory";
const CHECKPOINTING: &str = "Activation recomputation";
const AMP: &str = "Mixed precision";
const COLLECTIVES: &str = "Collectives";
const DATA: &str = "Data loading: shards, prefetching, packing and balance";
const TENSOR_PARALLEL: &str = "Tensor parallelism";
const PIPELINE: &str = "Pipeline parallelism";
const DATA_PARALLEL: &str = "Data parallelism: DDP, buckets and ZeRO";
const SERVING: &str = "Serving: KV cache, batching, quantization, speculation and a server";

/// Every exercise, in book order (the GPU puzzles come after, see [`crate::puzzles::all`]).
pub fn all() -> Vec<Exercise> {
    vec![
        Exercise {
            chapter: REGIMES,
            module: "regimes::gemm_cost",
            task: "FLOPs, minimum bytes and arithmetic intensity of a GEMM",
            check: regimes::gemm_cost::check,
        },
        Exercise {
            chapter: REGIMES,
            module: "regimes::roofline_time",
            task: "the roofline's predicted time and regime",
            check: regimes::roofline_time::check,
        },
        Exercise {
            chapter: REGIMES,
            module: "regimes::classify",
            task: "compute-, memory- or overhead-bound, from a measured time",
            check: regimes::classify::check,
        },
        Exercise {
            chapter: REGIMES,
            module: "regimes::op_totals",
            task: "a profile's time per op kind inside the measured steps",
            check: regimes::op_totals::check,
        },
        Exercise {
            chapter: REGIMES,
            module: "regimes::multi_tensor_chunks",
            task: "a list of buffers cut into the chunks of one multi-tensor launch",
            check: regimes::multi_tensor_chunks::check,
        },
        Exercise {
            chapter: GPU,
            module: "gpu::compute_ceiling",
            task: "tensor cores or vector units: the peak an op runs under",
            check: gpu::compute_ceiling::check,
        },
        Exercise {
            chapter: GPU,
            module: "gpu::wave_quantization",
            task: "tiles, waves and the useful fraction of a GEMM launch",
            check: gpu::wave_quantization::check,
        },
        Exercise {
            chapter: KERNELS,
            module: "kernels::tiled_matmul",
            task: "a tiled matmul on the CPU, counting global reads",
            check: kernels::tiled_matmul::check,
        },
        Exercise {
            chapter: KERNELS,
            module: "kernels::fusion_bytes",
            task: "FLOPs and bytes of an element-wise chain, fused and unfused",
            check: kernels::fusion_bytes::check,
        },
        Exercise {
            chapter: KERNELS,
            module: "kernels::attention_row",
            task: "one row of a fused attention: softmax and log-sum-exp without overflow",
            check: kernels::attention_row::check,
        },
        Exercise {
            chapter: TRAINING,
            module: "training::gelu_backward",
            task: "GELU's backward, checked against finite differences",
            check: training::gelu_backward::check,
        },
        Exercise {
            chapter: TRAINING,
            module: "training::layernorm_backward",
            task: "LayerNorm's backward: dx, dgamma, dbeta",
            check: training::layernorm_backward::check,
        },
        Exercise {
            chapter: TRAINING,
            module: "training::cross_entropy_backward",
            task: "cross-entropy's gradient of the logits, ignoring padding",
            check: training::cross_entropy_backward::check,
        },
        Exercise {
            chapter: TRAINING,
            module: "training::adamw_step",
            task: "one AdamW step with bias correction and decoupled decay",
            check: training::adamw_step::check,
        },
        Exercise {
            chapter: MEMORY,
            module: "memory::gpt_params",
            task: "the parameter count of a GPT",
            check: memory::gpt_params::check,
        },
        Exercise {
            chapter: MEMORY,
            module: "memory::activations",
            task: "activation bytes of a layer, with and without recomputation",
            check: memory::activations::check,
        },
        Exercise {
            chapter: MEMORY,
            module: "memory::model_states",
            task: "bytes of model states per GPU under ZeRO stages 0-3",
            check: memory::model_states::check,
        },
        Exercise {
            chapter: MEMORY,
            module: "memory::train_time",
            task: "time to train from 6ND, GPUs, peak and MFU",
            check: memory::train_time::check,
        },
        Exercise {
            chapter: CHECKPOINTING,
            module: "checkpointing::sqrt_segments",
            task: "Chen's √n segmentation of a chain",
            check: checkpointing::sqrt_segments::check,
        },
        Exercise {
            chapter: CHECKPOINTING,
            module: "checkpointing::schedule_memory",
            task: "the peak memory of a recomputation schedule",
            check: checkpointing::schedule_memory::check,
        },
        Exercise {
            chapter: CHECKPOINTING,
            module: "checkpointing::dp_step",
            task: "one step of the optimal-checkpointing dynamic program",
            check: checkpointing::dp_step::check,
        },
        Exercise {
            chapter: AMP,
            module: "amp::bf16_round",
            task: "round an f32 to bfloat16 bits, to nearest even",
            check: amp::bf16_round::check,
        },
        Exercise {
            chapter: AMP,
            module: "amp::scaler_update",
            task: "the dynamic loss scaler's update, with hysteresis and a minimum",
            check: amp::scaler_update::check,
        },
        Exercise {
            chapter: AMP,
            module: "amp::policy",
            task: "which op classes autocast runs in 16 bits",
            check: amp::policy::check,
        },
        Exercise {
            chapter: COLLECTIVES,
            module: "collectives::chunk_bounds",
            task: "the elements of chunk i when a length does not divide by the world size",
            check: collectives::chunk_bounds::check,
        },
        Exercise {
            chapter: COLLECTIVES,
            module: "collectives::ring_step",
            task: "the chunk each rank sends in a step of the ring reduce-scatter",
            check: collectives::ring_step::check,
        },
        Exercise {
            chapter: COLLECTIVES,
            module: "collectives::bus_bandwidth",
            task: "nccl-tests' bus bandwidth from a measured time",
            check: collectives::bus_bandwidth::check,
        },
        Exercise {
            chapter: DATA,
            module: "data::shard_header",
            task: "read and validate a token shard's header",
            check: data::shard_header::check,
        },
        Exercise {
            chapter: DATA,
            module: "data::pack_positions",
            task: "positions and segment ids of a packed row",
            check: data::pack_positions::check,
        },
        Exercise {
            chapter: DATA,
            module: "data::rank_windows",
            task: "which windows each data-parallel rank reads",
            check: data::rank_windows::check,
        },
        Exercise {
            chapter: TENSOR_PARALLEL,
            module: "tensor_parallel::column_row_split",
            task: "rank r's column shard of the MLP's first weight and row shard of its second",
            check: tensor_parallel::column_row_split::check,
        },
        Exercise {
            chapter: TENSOR_PARALLEL,
            module: "tensor_parallel::vocab_cross_entropy",
            task: "cross-entropy from vocabulary shards, with only per-position maxima and sums shared",
            check: tensor_parallel::vocab_cross_entropy::check,
        },
        Exercise {
            chapter: TENSOR_PARALLEL,
            module: "tensor_parallel::rank_grid",
            task: "a rank's place in the dp × tp × pp grid and its tensor-parallel group",
            check: tensor_parallel::rank_grid::check,
        },
        Exercise {
            chapter: PIPELINE,
            module: "pipeline::one_f_one_b",
            task: "the 1F1B order of one pipeline stage",
            check: pipeline::one_f_one_b::check,
        },
        Exercise {
            chapter: PIPELINE,
            module: "pipeline::bubble",
            task: "the bubble fraction of GPipe and 1F1B for any forward and backward times",
            check: pipeline::bubble::check,
        },
        Exercise {
            chapter: PIPELINE,
            module: "pipeline::fix_schedule",
            task: "fix a hand-written schedule the validator rejects",
            check: pipeline::fix_schedule::check,
        },
        Exercise {
            chapter: DATA_PARALLEL,
            module: "data_parallel::bucket_assignment",
            task: "gradient buckets in reverse parameter order, a small first bucket",
            check: data_parallel::bucket_assignment::check,
        },
        Exercise {
            chapter: DATA_PARALLEL,
            module: "data_parallel::shard_range",
            task: "the elements a rank owns in a padded flat buffer",
            check: data_parallel::shard_range::check,
        },
        Exercise {
            chapter: DATA_PARALLEL,
            module: "data_parallel::zero_memory",
            task: "one rank's model-state bytes at each ZeRO stage",
            check: data_parallel::zero_memory::check,
        },
        Exercise {
            chapter: DATA_PARALLEL,
            module: "data_parallel::consolidate",
            task: "each parameter's values from every rank's padded chunk of a bucket",
            check: data_parallel::consolidate::check,
        },
        Exercise {
            chapter: SERVING,
            module: "serving::kv_cache_size",
            task: "a token's KV-cache bytes, and the tokens a memory budget holds",
            check: serving::kv_cache_size::check,
        },
        Exercise {
            chapter: SERVING,
            module: "serving::token_slots",
            task: "the cache slots of a sequence's tokens through its block table",
            check: serving::token_slots::check,
        },
        Exercise {
            chapter: SERVING,
            module: "serving::batch_step",
            task: "one continuous-batching step: decodes first, prompts in chunks, a token budget",
            check: serving::batch_step::check,
        },
        Exercise {
            chapter: SERVING,
            module: "serving::prefix_hits",
            task: "the prompt tokens a prefix cache saves: shared full blocks, the last token computed",
            check: serving::prefix_hits::check,
        },
        Exercise {
            chapter: SERVING,
            module: "serving::int4_groups",
            task: "group-wise int4 weights read back: an f16 scale per group, codes in [-7, 7]",
            check: serving::int4_groups::check,
        },
        Exercise {
            chapter: SERVING,
            module: "serving::accept_draft",
            task: "speculative decoding's acceptance rule: keep, or draw from the residual",
            check: serving::accept_draft::check,
        },
    ]
}
