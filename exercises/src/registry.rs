//! The list of exercises, in book order.

use crate::check::Outcome;
use crate::{
    amp, checkpointing, collectives, data, data_parallel, gpu, kernels, memory, pipeline, planning,
    regimes, serving, tensor_parallel, training,
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
    /// The exercise's file as written (its module doc is the statement).
    pub source: &'static str,
    /// The reference solution's file, which the book shows collapsed.
    pub solution: &'static str,
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

    /// The module doc, without its `//!` markers: the title line, the question, the hint.
    fn doc(&self) -> String {
        self.source
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| l.trim_start_matches("//!").strip_prefix(' ').unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The title: the module doc's `# ` heading.
    pub fn title(&self) -> String {
        self.doc()
            .lines()
            .next()
            .map(|l| l.trim_start_matches('#').trim().to_string())
            .unwrap_or_default()
    }

    /// The question: the module doc after its title, up to its `## Hint` section.
    pub fn statement(&self) -> String {
        let doc = self.doc();
        let body = doc.split_once('\n').map_or("", |(_, rest)| rest);
        let question = body.split("\n## Hint").next().unwrap_or(body);
        question.trim().to_string()
    }

    /// The `## Hint` section of the module doc, if the exercise has one.
    pub fn hint(&self) -> Option<String> {
        let doc = self.doc();
        let (_, hint) = doc.split_once("\n## Hint\n")?;
        Some(hint.trim().to_string())
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
const PLANNING: &str = "Choosing a layout";
const DATA_PARALLEL: &str = "Data parallelism: DDP, buckets and ZeRO";
const SERVING: &str = "Serving: KV cache, batching, quantization, speculation and a server";

/// One exercise of a chapter: its module (`group::name`, whose `check` it runs) and its
/// task. The module path is written once, so its text and its check cannot disagree.
macro_rules! exercise {
    ($chapter:expr, $group:ident :: $name:ident, $task:expr) => {
        Exercise {
            chapter: $chapter,
            module: concat!(stringify!($group), "::", stringify!($name)),
            task: $task,
            check: $group::$name::check,
            source: include_str!(concat!(stringify!($group), "/", stringify!($name), ".rs")),
            solution: include_str!(concat!(
                "solutions/",
                stringify!($group),
                "/",
                stringify!($name),
                ".rs"
            )),
        }
    };
}

/// Every exercise, in book order (the GPU puzzles come after, see [`crate::puzzles::all`]).
pub fn all() -> Vec<Exercise> {
    [
        regimes_exercises(),
        gpu_exercises(),
        kernels_exercises(),
        training_exercises(),
        memory_exercises(),
        amp_exercises(),
        checkpointing_exercises(),
        collectives_exercises(),
        data_exercises(),
        data_parallel_exercises(),
        tensor_parallel_exercises(),
        pipeline_exercises(),
        planning_exercises(),
        serving_exercises(),
    ]
    .concat()
}

/// The exercises of the chapter [`REGIMES`].
fn regimes_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            REGIMES,
            regimes::gemm_cost,
            "FLOPs, minimum bytes and arithmetic intensity of a GEMM"
        ),
        exercise!(
            REGIMES,
            regimes::roofline_time,
            "the roofline's predicted time and regime"
        ),
        exercise!(
            REGIMES,
            regimes::classify,
            "compute-, memory- or overhead-bound, from a measured time"
        ),
        exercise!(
            REGIMES,
            regimes::op_totals,
            "a profile's time per op kind inside the measured steps"
        ),
        exercise!(
            REGIMES,
            regimes::multi_tensor_chunks,
            "a list of buffers cut into the chunks of one multi-tensor launch"
        ),
    ]
}

/// The exercises of the chapter [`GPU`].
fn gpu_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            GPU,
            gpu::compute_ceiling,
            "tensor cores or vector units: the peak an op runs under"
        ),
        exercise!(
            GPU,
            gpu::wave_quantization,
            "tiles, waves and the useful fraction of a GEMM launch"
        ),
    ]
}

/// The exercises of the chapter [`KERNELS`].
fn kernels_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            KERNELS,
            kernels::tiled_matmul,
            "a tiled matmul on the CPU, counting global reads"
        ),
        exercise!(
            KERNELS,
            kernels::fusion_bytes,
            "FLOPs and bytes of an element-wise chain, fused and unfused"
        ),
        exercise!(
            KERNELS,
            kernels::attention_row,
            "one row of a fused attention: softmax and log-sum-exp without overflow"
        ),
    ]
}

/// The exercises of the chapter [`TRAINING`].
fn training_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            TRAINING,
            training::gelu_backward,
            "GELU's backward, checked against finite differences"
        ),
        exercise!(
            TRAINING,
            training::layernorm_backward,
            "LayerNorm's backward: dx, dgamma, dbeta"
        ),
        exercise!(
            TRAINING,
            training::cross_entropy_backward,
            "cross-entropy's gradient of the logits, ignoring padding"
        ),
        exercise!(
            TRAINING,
            training::adamw_step,
            "one AdamW step with bias correction and decoupled decay"
        ),
    ]
}

/// The exercises of the chapter [`MEMORY`].
fn memory_exercises() -> Vec<Exercise> {
    vec![
        exercise!(MEMORY, memory::gpt_params, "the parameter count of a GPT"),
        exercise!(
            MEMORY,
            memory::activations,
            "activation bytes of a layer, with and without recomputation"
        ),
        exercise!(
            MEMORY,
            memory::model_states,
            "bytes of model states per GPU under ZeRO stages 0-3"
        ),
        exercise!(
            MEMORY,
            memory::train_time,
            "time to train from parameters, tokens, GPUs, peak and MFU"
        ),
        exercise!(
            MEMORY,
            memory::blockwise_quantize,
            "8-bit codes with an absmax per block, nearest on the dynamic map, and back"
        ),
        exercise!(
            MEMORY,
            memory::galore_project,
            "GaLore's projection from the gradient's SVD, there and back, and its state bytes"
        ),
        exercise!(
            MEMORY,
            memory::lora_forward_backward,
            "a LoRA layer's forward and backward: dx, dA, dB around a frozen weight"
        ),
    ]
}

/// The exercises of the chapter [`CHECKPOINTING`].
fn checkpointing_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            CHECKPOINTING,
            checkpointing::sqrt_segments,
            "Chen's √n segmentation of a chain"
        ),
        exercise!(
            CHECKPOINTING,
            checkpointing::schedule_memory,
            "the peak memory of a recomputation schedule"
        ),
        exercise!(
            CHECKPOINTING,
            checkpointing::dp_step,
            "one step of the optimal-checkpointing dynamic program"
        ),
    ]
}

/// The exercises of the chapter [`AMP`].
fn amp_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            AMP,
            amp::bf16_round,
            "round an f32 to bfloat16 bits, to nearest even"
        ),
        exercise!(
            AMP,
            amp::scaler_update,
            "the dynamic loss scaler's update, with hysteresis and a minimum"
        ),
        exercise!(
            AMP,
            amp::policy,
            "which op classes autocast runs in 16 bits"
        ),
    ]
}

/// The exercises of the chapter [`COLLECTIVES`].
fn collectives_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            COLLECTIVES,
            collectives::chunk_bounds,
            "the elements of chunk i when a length does not divide by the world size"
        ),
        exercise!(
            COLLECTIVES,
            collectives::ring_step,
            "the chunk each rank sends in a step of the ring reduce-scatter"
        ),
        exercise!(
            COLLECTIVES,
            collectives::bus_bandwidth,
            "nccl-tests' bus bandwidth from a measured time"
        ),
    ]
}

/// The exercises of the chapter [`DATA`].
fn data_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            DATA,
            data::shard_header,
            "read and validate a token shard's header"
        ),
        exercise!(
            DATA,
            data::pack_positions,
            "positions and segment ids of a packed row"
        ),
        exercise!(
            DATA,
            data::rank_windows,
            "which windows each data-parallel rank reads"
        ),
    ]
}

/// The exercises of the chapter [`TENSOR_PARALLEL`].
fn tensor_parallel_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            TENSOR_PARALLEL,
            tensor_parallel::column_row_split,
            "rank r's column shard of the MLP's first weight and row shard of its second"
        ),
        exercise!(
            TENSOR_PARALLEL,
            tensor_parallel::vocab_cross_entropy,
            "cross-entropy from vocabulary shards, with only per-position maxima and sums shared"
        ),
        exercise!(
            TENSOR_PARALLEL,
            tensor_parallel::rank_grid,
            "a rank's place in the dp × tp × pp grid and its tensor-parallel group"
        ),
        exercise!(
            TENSOR_PARALLEL,
            tensor_parallel::tp_mlp,
            "a strategy puzzle: the split MLP on real ranks, within one all-reduce's traffic"
        ),
    ]
}

/// The exercises of the chapter [`PIPELINE`].
fn pipeline_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            PIPELINE,
            pipeline::one_f_one_b,
            "the 1F1B order of one pipeline stage"
        ),
        exercise!(
            PIPELINE,
            pipeline::bubble,
            "the bubble fraction of GPipe and 1F1B for any forward and backward times"
        ),
        exercise!(
            PIPELINE,
            pipeline::fix_schedule,
            "fix a hand-written schedule the validator rejects"
        ),
    ]
}

/// The exercises of the chapter [`PLANNING`].
fn planning_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            PLANNING,
            planning::fits,
            "the layouts whose busiest GPU fits in the planner's share of memory"
        ),
        exercise!(
            PLANNING,
            planning::step_time,
            "a layout's predicted step from its parts and its bubble, and layouts ranked"
        ),
        exercise!(
            PLANNING,
            planning::micro_batches,
            "the fewest micro-batches that keep the bubble within a share of the step"
        ),
    ]
}

/// The exercises of the chapter [`DATA_PARALLEL`].
fn data_parallel_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            DATA_PARALLEL,
            data_parallel::bucket_assignment,
            "gradient buckets in reverse parameter order, a small first bucket"
        ),
        exercise!(
            DATA_PARALLEL,
            data_parallel::shard_range,
            "the elements a rank owns in a padded flat buffer"
        ),
        exercise!(
            DATA_PARALLEL,
            data_parallel::zero_memory,
            "one rank's model-state bytes at each ZeRO stage"
        ),
        exercise!(
            DATA_PARALLEL,
            data_parallel::consolidate,
            "each parameter's values from every rank's padded chunk of a bucket"
        ),
        exercise!(
            DATA_PARALLEL,
            data_parallel::zero1_step,
            "a strategy puzzle: ZeRO-1's step on real ranks, within memory and traffic budgets"
        ),
    ]
}

/// The exercises of the chapter [`SERVING`].
fn serving_exercises() -> Vec<Exercise> {
    vec![
        exercise!(
            SERVING,
            serving::kv_cache_size,
            "a token's KV-cache bytes, and the tokens a memory budget holds"
        ),
        exercise!(
            SERVING,
            serving::token_slots,
            "the cache slots of a sequence's tokens through its block table"
        ),
        exercise!(
            SERVING,
            serving::batch_step,
            "one continuous-batching step: decodes first, prompts in chunks, a token budget"
        ),
        exercise!(
            SERVING,
            serving::prefix_hits,
            "the prompt tokens a prefix cache saves: shared full blocks, the last token computed"
        ),
        exercise!(
            SERVING,
            serving::int4_groups,
            "group-wise int4 weights read back: an f16 scale per group, codes in [-7, 7]"
        ),
        exercise!(
            SERVING,
            serving::accept_draft,
            "speculative decoding's acceptance rule: keep, or draw from the residual"
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::all;

    /// Every exercise has a title and a question for the book, and a solution to show.
    #[test]
    fn every_exercise_has_a_statement_and_a_solution() {
        for ex in all() {
            assert!(!ex.title().is_empty(), "{}: no `# ` title", ex.module);
            assert!(!ex.statement().is_empty(), "{}: no statement", ex.module);
            assert!(ex.solution.contains("pub fn"), "{}: no solution", ex.module);
            assert!(
                !ex.statement().contains("## "),
                "{}: a section other than `## Hint` inside the statement",
                ex.module
            );
        }
    }
}
