//! Worked problems of the GPU, kernels, collectives and serving chapters, in the shape
//! of [`crate::worked`]: numbers the reader can work by hand, answers computed here.

use crate::md::sig3;
use crate::worked::{Problem, Res, perf, smallest};
use brrr_perf::comms::{self, Algorithm, Collective, Link, collective_time};
use brrr_perf::memory::TransformerConfig;
use brrr_perf::roofline::{AttentionShape, OpCost, Roofline, gemm_quantization};
use brrr_perf::serve::{ServeSetup, decode_step, estimate_serve};
use brrr_perf::specs::{GpuSpec, gpu};
use brrr_perf::table::{bandwidth, bytes, bytes_binary, count, duration, flops_per_s, percent};
use brrr_perf::{DType, Unit};

/// The GPU chapter: two ridges, a GEMM that wastes a wave, and the vector units.
pub fn gpu_problems() -> Res<Vec<Problem>> {
    let (a100, h100) = (perf(gpu("a100"))?, perf(gpu("h100"))?);
    let ridge = |g: &GpuSpec| perf(g.ridge_point(DType::Bf16, Unit::Tensor));
    let (ra, rh) = (ridge(&a100)?, ridge(&h100)?);
    let p1 = Problem {
        title: "two generations, two ridges".into(),
        question: format!(
            "How many FLOPs per byte must a bf16 matmul do to be compute-bound on an {} and \
             on an {}? Which chip makes it harder?",
            a100.name, h100.name
        ),
        answer: format!(
            "The ridge is the tensor-core peak over the memory bandwidth: {} / {} = **{}** \
             FLOP/byte on the {}, {} / {} = **{}** on the {}. The newer chip's compute grew \
             faster than its bandwidth, so the same kernel needs {}× the intensity to stay \
             compute-bound.",
            flops_per_s(perf(a100.peak(DType::Bf16, Unit::Tensor))?),
            bandwidth(a100.memory_bandwidth),
            sig3(ra),
            a100.name,
            flops_per_s(perf(h100.peak(DType::Bf16, Unit::Tensor))?),
            bandwidth(h100.memory_bandwidth),
            sig3(rh),
            h100.name,
            sig3(rh / ra)
        ),
    };
    Ok(vec![p1, full_waves(&a100)?, vector_units(&h100)?])
}

/// The smallest number of rows from which a GEMM fills whole waves on an A100.
fn full_waves(g: &GpuSpec) -> Res<Problem> {
    let (n, tile, sms) = (4096u64, 128u64, u64::from(g.sm_count));
    let q = |m| perf(gemm_quantization(m, n, tile, tile, sms, 1));
    let at = q(4096)?;
    let m = smallest("rows", (1..=512).map(|i| i * tile), |m| {
        Ok(q(m)?.wave_efficiency >= 1.0 - 1e-12)
    })?;
    Ok(Problem {
        title: "a wave with a hole".into(),
        question: format!(
            "An `m × {n}` GEMM output in {tile} × {tile} tiles, one block per SM, on the \
             {sms} SMs of an {}. At `m = 4096`, what fraction of the launch is useful? \
             What is the smallest `m` (a multiple of {tile}) whose tiles fill whole waves, \
             and how does its time compare?",
            g.name
        ),
        answer: format!(
            "At 4096 rows: {} tiles, {} waves, so the last wave is partly idle and {} of \
             the launch is useful. The tiles fill whole waves when their count is a \
             multiple of {sms}: first at **m = {m}** ({} tiles, {} waves). It takes {} \
             wave-times against {} for 4096 rows: {} of the rows in {} of the time.",
            at.tiles,
            sig3(at.waves),
            percent(at.efficiency),
            q(m)?.tiles,
            sig3(q(m)?.waves),
            q(m)?.waves.ceil(),
            at.waves.ceil(),
            percent(m as f64 / 4096.0),
            percent(q(m)?.waves.ceil() / at.waves.ceil())
        ),
    })
}

/// An element-wise op and a matmul of the same dtype: the peaks they run under.
fn vector_units(g: &GpuSpec) -> Res<Problem> {
    let gemm = perf(OpCost::gemm(4096, 4096, 4096, DType::Bf16))?;
    let add = perf(OpCost::elementwise(1 << 24, 1.0, 2, 1, DType::Bf16))?;
    let peak =
        |op: &OpCost| -> Res<f64> { Ok(perf(Roofline::for_op(g, op, DType::Bf16))?.peak_flops) };
    let (pg, pa) = (peak(&gemm)?, peak(&add)?);
    Ok(Problem {
        title: "the units an op runs on".into(),
        question: format!(
            "On an {}, a bf16 GEMM and a bf16 element-wise add: which compute ceiling does \
             each run under, and how far apart are they?",
            g.name
        ),
        answer: format!(
            "The GEMM runs on the tensor cores at **{}**; the add cannot, and runs on the \
             vector units at **{}**, {}× less. It hardly matters for the add, which is \
             memory-bound long before either ceiling, but it is why a matmul written \
             without tensor cores cannot approach the datasheet's headline figure.",
            flops_per_s(pg),
            flops_per_s(pa),
            sig3(pg / pa)
        ),
    })
}

/// The kernels chapter: what fusion buys, attention fused or not, and the tile a
/// matmul needs.
pub fn kernels_problems() -> Res<Vec<Problem>> {
    let a100 = perf(gpu("a100"))?;
    let n = 1u64 << 26;
    let time = |op: &OpCost| -> Res<f64> {
        Ok(perf(Roofline::for_op(&a100, op, DType::Bf16))?
            .predict(op)
            .time_s)
    };
    let un = perf(OpCost::elementwise_chain(n, 5, DType::Bf16, false))?;
    let fu = perf(OpCost::elementwise_chain(n, 5, DType::Bf16, true))?;
    let p1 = Problem {
        title: "five element-wise ops".into(),
        question: format!(
            "A GELU written as five element-wise ops runs over {} bf16 activations on an {}. \
             How long does it take as five kernels, and fused into one?",
            count(n as f64),
            a100.name
        ),
        answer: format!(
            "Unfused, every kernel reads and writes the whole tensor: {} in all, **{}**. \
             Fused, one read and one write: {}, **{}**, {}× faster. Both are memory-bound: \
             fusion saves bytes, not FLOPs.",
            bytes(un.bytes),
            duration(time(&un)?),
            bytes(fu.bytes),
            duration(time(&fu)?),
            sig3(time(&un)? / time(&fu)?)
        ),
    };
    Ok(vec![p1, fused_attention()?, matmul_tile(&a100)?])
}

/// Attention at a long context, materialising the scores or not.
fn fused_attention() -> Res<Problem> {
    let h100 = perf(gpu("h100"))?;
    let shape = AttentionShape {
        batch: 4,
        heads: 32,
        seq: 8192,
        head_dim: 128,
        causal: true,
        fused: true,
    };
    let fused = perf(OpCost::attention(shape, DType::Bf16))?;
    let unfused = perf(OpCost::attention(
        AttentionShape {
            fused: false,
            ..shape
        },
        DType::Bf16,
    ))?;
    let predict = |op: &OpCost| -> Res<brrr_perf::roofline::Prediction> {
        Ok(perf(Roofline::for_op(&h100, op, DType::Bf16))?.predict(op))
    };
    let (pf, pu) = (predict(&fused)?, predict(&unfused)?);
    Ok(Problem {
        title: "attention without the score matrix".into(),
        question: format!(
            "Causal attention over {} sequences of {} tokens, {} heads of {} in bf16, on an \
             {}. What does writing the `T × T` scores to memory and reading them back cost, \
             against a fused kernel that keeps them on chip?",
            shape.batch, shape.seq, shape.heads, shape.head_dim, h100.name
        ),
        answer: format!(
            "Unfused it moves {} (intensity {}): **{}**, {}. Fused it moves {} (intensity \
             {}): **{}**, {}. Same FLOPs, {}× less time: the scores were most of the bytes.",
            bytes(unfused.bytes),
            sig3(pu.intensity),
            duration(pu.time_s),
            pu.regime,
            bytes(fused.bytes),
            sig3(pf.intensity),
            duration(pf.time_s),
            pf.regime,
            sig3(pu.time_s / pf.time_s)
        ),
    })
}

/// The smallest square tile whose global-memory intensity clears the fp32 ridge.
fn matmul_tile(g: &GpuSpec) -> Res<Problem> {
    let roof = perf(Roofline::for_gpu(g, DType::F32, Unit::Vector))?;
    // A tile × tile block of C loads 2·tile f32 values per step of k for 2·tile² FLOPs.
    let intensity = |tile: u64| 2.0 * (tile * tile) as f64 / (2 * tile * 4) as f64;
    let tile = smallest("tile", (0..12).map(|i| 1u64 << i), |t| {
        Ok(intensity(t) >= roof.ridge())
    })?;
    Ok(Problem {
        title: "how big a tile".into(),
        question: format!(
            "A tiled fp32 matmul computes a `t × t` block of C per workgroup, loading a \
             `t`-wide column of A and row of B from global memory per step of `k`. On an {}, \
             what is the smallest power-of-two `t` whose global-memory intensity reaches the \
             fp32 ridge?",
            g.name
        ),
        answer: format!(
            "Per step: `2t` loads of 4 bytes for `2t²` FLOPs, an intensity of `t/4` \
             FLOP/byte. The fp32 ridge is {} FLOP/byte, so **t = {tile}** (intensity {}). \
             Smaller tiles are memory-bound however well the rest is written.",
            sig3(roof.ridge()),
            sig3(intensity(tile))
        ),
    })
}

/// The collectives chapter: ring against tree, bus bandwidth, and a gradient
/// all-reduce.
pub fn collectives_problems() -> Res<Vec<Problem>> {
    let h100 = perf(gpu("h100"))?;
    let link = perf(Link::intra_node(&h100))?;
    let n = 8u64;
    let time = |alg, bytes| perf(collective_time(Collective::AllReduce, alg, n, bytes, link));
    let sizes: Vec<u64> = (10..=32).map(|i| 1u64 << i).collect();
    let cross = smallest("buffer size", sizes.iter().copied(), |b| {
        Ok(time(Algorithm::Ring, b as f64)? < time(Algorithm::Tree, b as f64)?)
    })?;
    let p1 = Problem {
        title: "ring or tree".into(),
        question: format!(
            "An all-reduce over the {n} GPUs of an {} node (α = {} per message, {} per \
             direction). From which buffer size (a power of two) is the ring faster than \
             the tree?",
            h100.name,
            duration(link.alpha_s),
            bandwidth(link.bandwidth)
        ),
        answer: format!(
            "The ring pays `2(n − 1)` latencies and sends `2(n − 1)/n` of the buffer; the \
             tree pays `2⌈log₂ n⌉` latencies and sends twice the buffer. The ring wins from \
             **{}** on ({} against {}); at half that it is {} against {}.",
            bytes(cross as f64),
            duration(time(Algorithm::Ring, cross as f64)?),
            duration(time(Algorithm::Tree, cross as f64)?),
            duration(time(Algorithm::Ring, cross as f64 / 2.0)?),
            duration(time(Algorithm::Tree, cross as f64 / 2.0)?)
        ),
    };
    Ok(vec![
        p1,
        measured_bus(n)?,
        gradient_all_reduce(&h100, link)?,
    ])
}

/// Bus bandwidth from a (stated) measurement.
fn measured_bus(n: u64) -> Res<Problem> {
    let (size, secs) = (1024.0 * 1024.0 * 1024.0, 5.2e-3);
    let alg = perf(comms::alg_bandwidth(size, secs))?;
    let bus = perf(comms::bus_bandwidth(Collective::AllReduce, n, size, secs))?;
    Ok(Problem {
        title: "reading nccl-tests".into(),
        question: format!(
            "An all-reduce of {} over {n} GPUs took {}. What are its algorithm and bus \
             bandwidths, and which one do you compare with the NVLink datasheet?",
            bytes_binary(size),
            duration(secs)
        ),
        answer: format!(
            "Algorithm bandwidth {}; bus bandwidth {} × `2(n − 1)/n` = **{}**, the rate at \
             which each GPU's link carried data. Compare the bus bandwidth with the link's \
             one-way speed.",
            bandwidth(alg),
            bandwidth(alg),
            bandwidth(bus)
        ),
    })
}

/// The all-reduce of GPT-2 124M's fp32 gradients over one node.
fn gradient_all_reduce(g: &GpuSpec, link: Link) -> Res<Problem> {
    let cfg = perf(TransformerConfig::preset("gpt2"))?;
    let grad_bytes = cfg.params() * 4.0;
    let t = perf(collective_time(
        Collective::AllReduce,
        Algorithm::Ring,
        8,
        grad_bytes,
        link,
    ))?;
    Ok(Problem {
        title: "a whole model's gradients".into(),
        question: format!(
            "Data parallelism over the 8 GPUs of an {} node all-reduces GPT-2 124M's fp32 \
             gradients every step. How long does one ring all-reduce of them take?",
            g.name
        ),
        answer: format!(
            "{} of gradients; the ring sends `2 · 7/8` of them per GPU at {}, plus 14 \
             latencies: **{}**. Split into buckets, most of it hides behind the backward.",
            bytes(grad_bytes),
            bandwidth(link.bandwidth),
            duration(t)
        ),
    })
}

/// The serving chapter: the cache, decode's bound, and speculative decoding.
pub fn serving_problems() -> Res<Vec<Problem>> {
    let h100 = perf(gpu("h100"))?;
    let cfg = perf(TransformerConfig::preset("gpt3-6.7b"))?;
    let setup = ServeSetup {
        weight_bytes: 2.0,
        kv_bytes: 2.0,
        context: 4096,
        memory_fraction: 0.9,
        compute: DType::Bf16,
    };
    let e = perf(estimate_serve(&cfg, &h100, &setup, &[]))?;
    let p1 = Problem {
        title: "how many requests fit".into(),
        question: format!(
            "GPT-3 6.7B ({} layers, width {}) serves from one {} in bf16, weights and cache \
             allowed {} of its memory. How many bytes does one token's keys and values take, \
             and how many requests of {} tokens fit at once?",
            cfg.layers,
            cfg.hidden,
            h100.name,
            percent(setup.memory_fraction),
            setup.context
        ),
        answer: format!(
            "`2 · l · h` elements of 2 bytes: **{}** per token. The weights take {}, \
             leaving {} for the cache: {} tokens, **{} requests** of {} tokens.",
            bytes_binary(e.kv_bytes_per_token),
            bytes_binary(e.weight_bytes),
            bytes_binary(e.cache_bytes),
            sig3(e.max_tokens),
            e.max_batch,
            setup.context
        ),
    };
    Ok(vec![
        p1,
        decode_batch(&cfg, &h100, &setup, e.max_batch, e.weight_bytes)?,
        speculative(),
    ])
}

/// Tokens per second of decode at batch 1 and at the largest batch that fits.
fn decode_batch(
    cfg: &TransformerConfig,
    g: &GpuSpec,
    setup: &ServeSetup,
    max_batch: u64,
    weight_bytes: f64,
) -> Res<Problem> {
    let one = perf(decode_step(cfg, g, setup, 1))?;
    let full = perf(decode_step(cfg, g, setup, max_batch))?;
    let bound = |memory_bound: bool| {
        if memory_bound {
            "memory-bound"
        } else {
            "compute-bound"
        }
    };
    Ok(Problem {
        title: "what batching buys".into(),
        question: format!(
            "The same model and GPU. How many tokens per second does decoding produce with one \
             request, and with the {max_batch} that fit?"
        ),
        answer: format!(
            "One request: each step reads {} (the weights and one cache) in {}: **{} \
             tokens/s**, {}. {max_batch} requests: each step reads {} in {}: **{} tokens/s**, \
             {}, {}× as many. Of those {}, the caches are {}: with long contexts, the \
             cache and not the weights sets the cost of a step.",
            bytes(one.bytes),
            duration(one.memory_s.max(one.compute_s)),
            sig3(one.tokens_per_s),
            bound(one.memory_bound),
            bytes(full.bytes),
            duration(full.memory_s.max(full.compute_s)),
            sig3(full.tokens_per_s),
            bound(full.memory_bound),
            sig3(full.tokens_per_s / one.tokens_per_s),
            bytes(full.bytes),
            bytes(full.bytes - weight_bytes)
        ),
    })
}

/// The number of drafted tokens that pays best at one acceptance rate and draft cost.
fn speculative() -> Problem {
    use brrr_serve::speculative::{expected_speedup, expected_tokens_per_step};
    let (alpha, cost) = (0.8, 0.1);
    let best = (1..=16usize)
        .max_by(|&a, &b| {
            expected_speedup(alpha, a, cost).total_cmp(&expected_speedup(alpha, b, cost))
        })
        .unwrap_or(1);
    Problem {
        title: "how many tokens to draft".into(),
        question: format!(
            "Speculative decoding with a draft model that costs {} of the target per token \
             and whose tokens the target accepts with probability {alpha}. How many tokens \
             `k` should the draft propose per step (1 to 16), and what does it buy?",
            percent(cost)
        ),
        answer: format!(
            "A step yields `(1 − α^(k+1))/(1 − α)` tokens on average for the cost of `k` \
             draft tokens and one target pass. The speed-up peaks at **k = {best}**: {} \
             tokens per step, **{}×**. More drafting mostly adds rejected tokens: at k = 16, \
             {}×.",
            sig3(expected_tokens_per_step(alpha, best)),
            sig3(expected_speedup(alpha, best, cost)),
            sig3(expected_speedup(alpha, 16, cost))
        ),
    }
}

/// The data-loading chapter: a shard's size, the windows each rank reads, and what
/// packing saves over padding.
pub fn data_problems() -> Res<Vec<Problem>> {
    use brrr_data::loader::{epoch_slot, windows_in};
    use brrr_data::{ShardHeader, TokenWidth};
    let tokens = 100_000_000usize;
    let len = |vocab| {
        ShardHeader {
            width: TokenWidth::for_vocab(vocab),
            tokens,
        }
        .file_len()
        .ok_or_else(|| "shard size overflows".to_string())
    };
    let (small, large) = (len(50257)?, len(128256)?);
    let p1 = Problem {
        title: "the size of a shard".into(),
        question: format!(
            "A shard holds {} tokens. How many bytes is the file for GPT-2's vocabulary of \
             50257, and for a vocabulary of 128256?",
            count(tokens as f64)
        ),
        answer: format!(
            "Token ids below 2¹⁶ fit in 2 bytes, larger vocabularies need 4; the header is \
             256 words of 4 bytes. GPT-2: **{}** bytes; 128256: **{}** bytes.",
            small, large
        ),
    };
    let (seq, world, batch) = (1024usize, 8usize, 16usize);
    let windows = windows_in(tokens, seq);
    let rounds = windows / (world * batch);
    let dropped = windows - rounds * world * batch;
    let slot = epoch_slot(2, 0, 3, world, batch);
    let p2 = Problem {
        title: "who reads which window".into(),
        question: format!(
            "The same shard read in windows of {seq} + 1 tokens at stride {seq}, by {world} \
             data-parallel ranks taking batches of {batch} windows. How many windows does \
             the shard hold, how many batches does each rank take per epoch, how many \
             windows are dropped, and which epoch position does rank 3's batch 2 start at?"
        ),
        answer: format!(
            "**{windows}** windows; a round deals {} of them, so each rank takes **{rounds}** \
             batches and **{dropped}** windows are dropped. Rank 3's batch 2 starts at \
             position **{slot}**: two whole rounds, then three ranks' batches.",
            world * batch
        ),
    };
    Ok(vec![p1, p2, packing()?])
}

/// Packing long-tailed documents against one document per row.
fn packing() -> Res<Problem> {
    use brrr_data::pack::{long_tailed_lengths, pack_documents};
    let (n, seq) = (512usize, 1024usize);
    let lens = long_tailed_lengths(n, 4 * seq, 11);
    let docs: Vec<Vec<u32>> = lens.iter().map(|&l| vec![1u32; l]).collect();
    let packed = pack_documents(&docs, seq).map_err(|e| e.to_string())?;
    let total: usize = lens.iter().sum();
    // One document per row, split over as many rows as it needs, the rest padding.
    let padded_rows: usize = lens.iter().map(|l| l.div_ceil(seq)).sum();
    let padded_fill = total as f64 / (padded_rows * seq) as f64;
    Ok(Problem {
        title: "packing or padding".into(),
        question: format!(
            "{n} documents with long-tailed lengths ({} tokens in all, the longest {}) go \
             into rows of {seq}. With one document per row (a long one spread over several \
             rows, the rest padded), what fraction of the slots hold tokens? And packed?",
            count(total as f64),
            lens.iter().max().copied().unwrap_or(0)
        ),
        answer: format!(
            "One per row: {padded_rows} rows, **{}** of the slots used. Packed first-fit \
             decreasing: {} rows, **{}** of the slots hold a target. Every padded slot is \
             compute spent on nothing; the document mask keeps packed documents from \
             attending to each other.",
            percent(padded_fill),
            packed.rows,
            percent(packed.fill())
        ),
    })
}
