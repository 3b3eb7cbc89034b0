//! Communication rooflines: alpha-beta costs of collectives, bus bandwidth, and the
//! compute-vs-communication conditions of data, tensor, expert and pipeline parallelism.
//!
//! Cost model (Hockney 1994; Thakur, Rabenseifner and Gropp, "Optimization of Collective
//! Communication Operations in MPICH", IJHPCA 2005): sending `m` bytes over one link costs
//! `α + m/β` with latency `α` and one-direction bandwidth `β` per GPU. With `n` ranks and a
//! buffer of `S` bytes (the *full* buffer: the all-reduce input, the all-gather output, the
//! reduce-scatter input):
//!
//! | collective | ring | tree (pipelined double binary tree) |
//! |---|---|---|
//! | all-reduce | `2(n−1)α + 2(n−1)/n · S/β` | `2⌈log₂n⌉α + 2·S/β` |
//! | reduce-scatter, all-gather | `(n−1)α + (n−1)/n · S/β` | — |
//! | broadcast | `(n−1)α + S/β` (pipelined chain) | `⌈log₂n⌉α + S/β` |
//! | all-to-all | `(n−1)α + (n−1)/n · S/β` | — |
//!
//! The tree all-reduce is NCCL's double binary tree (Sanders, Speck and Träff, "Two-tree
//! algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing 2009;
//! NVIDIA, "Massively Scale Your Deep Learning Training with NCCL 2.4", 2019): logarithmic
//! latency and, pipelined, near-full bandwidth.
//!
//! Parallelism rooflines follow Austin et al., "How to Scale Your Model", ch. 12 "How to Think
//! About GPUs" (2025), section "Rooflines for LLM Scaling on GPUs", which looks at one MLP
//! block `x[B, D] · W_in[D, F] · W_out[F, D]` with `B` the batch **in tokens**, peak `C`
//! FLOP/s per GPU and collective bandwidth `W` (GPU egress within a node, node egress beyond).

use crate::error::{PerfError, Result, at_least_one, positive};
use crate::specs::GpuSpec;
use serde::Serialize;

/// A collective operation, as the cost model sees it. `brrr_collectives` has its own
/// enum for the runtime: the estimators stay free of runtime crates (and the runtime of
/// plotting ones), and the CLI maps one onto the other where it compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    /// Sum over ranks, result on every rank.
    AllReduce,
    /// Sum over ranks, each rank keeps `1/n` of the result.
    ReduceScatter,
    /// Every rank contributes `1/n`, every rank gets all of it.
    AllGather,
    /// One rank's buffer to all.
    Broadcast,
    /// Every rank sends a distinct `1/n` to each other rank.
    AllToAll,
}

impl Collective {
    /// All collectives, in table order.
    pub const ALL: [Collective; 5] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast,
        Collective::AllToAll,
    ];

    /// Name as in nccl-tests (`all_reduce` …) but with dashes.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::ReduceScatter => "reduce-scatter",
            Collective::AllGather => "all-gather",
            Collective::Broadcast => "broadcast",
            Collective::AllToAll => "all-to-all",
        }
    }

    /// nccl-tests bus-bandwidth factor (NVIDIA nccl-tests, doc/PERFORMANCE.md): `busbw =
    /// algbw × factor`, with `2(n−1)/n` for all-reduce, `(n−1)/n` for reduce-scatter,
    /// all-gather and all-to-all, 1 for broadcast. It makes busbw comparable to the link
    /// bandwidth whatever `n` is.
    pub fn bus_factor(self, n: u64) -> f64 {
        let n = n as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::ReduceScatter | Collective::AllGather | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::Broadcast => 1.0,
        }
    }
}

/// A collective algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Ring: bandwidth-optimal, latency linear in `n`.
    Ring,
    /// (Double binary) tree: latency logarithmic in `n`.
    Tree,
}

/// A link in the alpha-beta model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Link {
    /// Per-message latency α in seconds.
    pub alpha_s: f64,
    /// One-direction bandwidth β per GPU in bytes/s.
    pub bandwidth: f64,
}

/// Default α within a node (NVLink/PCIe), seconds: an order-of-magnitude assumption (a few
/// microseconds per step), not a published figure; measure with nccl-tests for real numbers.
pub const DEFAULT_ALPHA_INTRA_NODE_S: f64 = 2e-6;
/// Default α across nodes (InfiniBand/RoCE), seconds: likewise an assumption.
pub const DEFAULT_ALPHA_INTER_NODE_S: f64 = 5e-6;

impl Link {
    /// A link with latency `alpha_s` seconds and bandwidth `bandwidth` bytes/s.
    pub fn new(alpha_s: f64, bandwidth: f64) -> Result<Self> {
        if !(alpha_s.is_finite() && alpha_s >= 0.0) {
            return Err(PerfError::OutOfRange {
                name: "alpha",
                value: alpha_s,
                expected: "finite and >= 0",
            });
        }
        positive("link bandwidth", bandwidth)?;
        Ok(Self { alpha_s, bandwidth })
    }

    /// The intra-node link of `gpu` (one-way NVLink, else PCIe) with [`DEFAULT_ALPHA_INTRA_NODE_S`].
    pub fn intra_node(gpu: &GpuSpec) -> Result<Self> {
        Self::new(DEFAULT_ALPHA_INTRA_NODE_S, gpu.intra_node_bandwidth()?)
    }

    /// The scale-out link of `gpu`, per rank: the node's aggregate egress (NIC bandwidth ×
    /// GPUs per node, capped by the intra-node bandwidth), with [`DEFAULT_ALPHA_INTER_NODE_S`].
    ///
    /// Why the aggregate and not one NIC: NCCL runs one ring (channel) per NIC, and in each
    /// ring only the node-boundary hops use the network, so a ring collective crossing nodes
    /// moves data at the node's total egress. The JAX scaling book ch. 12 uses the same figure:
    /// "beyond the node level, the cost of an AllGather or ReduceScatter on B bytes is roughly
    /// B / W_node egress", 400e9 on a DGX H100 SuperPod (measured numbers are often lower).
    pub fn inter_node(gpu: &GpuSpec) -> Result<Self> {
        let node = gpu.node_egress_bandwidth()?;
        let bw = gpu
            .intra_node_bandwidth()
            .map_or(node, |intra| node.min(intra));
        Self::new(DEFAULT_ALPHA_INTER_NODE_S, bw)
    }
}

/// Alpha-beta time of `collective` with `algorithm` over `n` ranks for a full buffer of
/// `bytes` (see the module table). `n = 1` costs nothing. The tree variant exists for
/// all-reduce and broadcast only.
pub fn collective_time(
    collective: Collective,
    algorithm: Algorithm,
    n: u64,
    bytes: f64,
    link: Link,
) -> Result<f64> {
    at_least_one("ranks", n)?;
    if !(bytes.is_finite() && bytes >= 0.0) {
        return Err(PerfError::OutOfRange {
            name: "bytes",
            value: bytes,
            expected: "finite and >= 0",
        });
    }
    if n == 1 {
        return Ok(0.0);
    }
    let nf = n as f64;
    let (a, s) = (link.alpha_s, bytes / link.bandwidth);
    let log_n = nf.log2().ceil();
    Ok(match (collective, algorithm) {
        (Collective::AllReduce, Algorithm::Ring) => {
            2.0 * (nf - 1.0) * a + 2.0 * (nf - 1.0) / nf * s
        }
        (Collective::AllReduce, Algorithm::Tree) => 2.0 * log_n * a + 2.0 * s,
        (
            Collective::ReduceScatter | Collective::AllGather | Collective::AllToAll,
            Algorithm::Ring,
        ) => (nf - 1.0) * a + (nf - 1.0) / nf * s,
        (Collective::Broadcast, Algorithm::Ring) => (nf - 1.0) * a + s,
        (Collective::Broadcast, Algorithm::Tree) => log_n * a + s,
        (c, Algorithm::Tree) => {
            return Err(PerfError::Invalid(format!(
                "no tree algorithm modelled for {}",
                c.name()
            )));
        }
    })
}

/// nccl-tests algorithm bandwidth `S / t` (bytes/s).
pub fn alg_bandwidth(bytes: f64, time_s: f64) -> Result<f64> {
    Ok(positive("bytes", bytes)? / positive("time", time_s)?)
}

/// nccl-tests bus bandwidth `S / t × factor(collective, n)` (see [`Collective::bus_factor`]).
pub fn bus_bandwidth(collective: Collective, n: u64, bytes: f64, time_s: f64) -> Result<f64> {
    at_least_one("ranks", n)?;
    Ok(alg_bandwidth(bytes, time_s)? * collective.bus_factor(n))
}

/// Compute and communication time of one step of a parallelism strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommsRoofline {
    /// Strategy name.
    pub strategy: String,
    /// Arithmetic time, seconds.
    pub math_s: f64,
    /// Communication time, seconds (assumed overlappable with the math).
    pub comms_s: f64,
    /// `math_s ≥ comms_s`.
    pub compute_bound: bool,
    /// The critical value of the quantity the condition is about (tokens per GPU for DP,
    /// maximum degree for TP), for display.
    pub critical: f64,
    /// What `critical` means.
    pub condition: String,
}

fn roofline(
    strategy: &str,
    math_s: f64,
    comms_s: f64,
    critical: f64,
    condition: String,
) -> CommsRoofline {
    CommsRoofline {
        strategy: strategy.into(),
        math_s,
        comms_s,
        compute_bound: math_s >= comms_s,
        critical,
        condition,
    }
}

/// Data parallelism (or ZeRO/FSDP, same cost) over `x` ranks, per MLP layer in the backward
/// pass (scaling book ch. 12): `T_math = 8·B·D·F / (X·C)`, `T_comms = 8·D·F / W` (bf16
/// gradients, all-reduce = reduce-scatter + all-gather). Compute-bound iff
/// `B/X > C/W`: **2,200 tokens per GPU within an H100 node (990e12/450e9), 2,475 across nodes
/// (990e12/400e9)**. `tokens_per_gpu` is `B/X`.
pub fn data_parallel(
    tokens_per_gpu: f64,
    d_model: f64,
    d_ff: f64,
    peak_flops: f64,
    w: f64,
) -> Result<CommsRoofline> {
    positive("tokens per GPU", tokens_per_gpu)?;
    positive("d_model", d_model)?;
    positive("d_ff", d_ff)?;
    positive("peak FLOP/s", peak_flops)?;
    positive("collective bandwidth", w)?;
    let math = 8.0 * tokens_per_gpu * d_model * d_ff / peak_flops;
    let comms = 8.0 * d_model * d_ff / w;
    Ok(roofline(
        "data parallel",
        math,
        comms,
        peak_flops / w,
        "min tokens per GPU (C/W)".into(),
    ))
}

/// Critical per-GPU batch in tokens for data parallelism: `C / W` (scaling book ch. 12).
pub fn dp_critical_tokens_per_gpu(peak_flops: f64, w: f64) -> Result<f64> {
    Ok(positive("peak FLOP/s", peak_flops)? / positive("collective bandwidth", w)?)
}

/// The same with only `nodes` nodes of data parallelism, where the ring's `(X−1)/X` factor
/// helps: `C/W · (X−1)/X` (2-node H100 DP: 2475 / 2 ≈ 1237 tokens per GPU; scaling book ch. 12,
/// "What happens when X is small?").
pub fn dp_critical_tokens_per_gpu_few_nodes(peak_flops: f64, w: f64, nodes: u64) -> Result<f64> {
    at_least_one("nodes", nodes)?;
    let x = nodes as f64;
    Ok(dp_critical_tokens_per_gpu(peak_flops, w)? * (x - 1.0) / x)
}

/// Mixture-of-experts data parallelism with `experts` experts and `top_k` active per token:
/// weights grow by `E`, FLOPs by `k`, so the critical batch is `E/k · C/W` (scaling book ch.
/// 12: k = 4, E = 128 → 32 × 2475 = 79,200 tokens per GPU across nodes).
pub fn moe_dp_critical_tokens_per_gpu(
    peak_flops: f64,
    w: f64,
    experts: u64,
    top_k: u64,
) -> Result<f64> {
    at_least_one("experts", experts)?;
    at_least_one("top-k", top_k)?;
    if top_k > experts {
        return Err(PerfError::Invalid(format!(
            "top-k {top_k} exceeds the {experts} experts"
        )));
    }
    Ok(experts as f64 / top_k as f64 * dp_critical_tokens_per_gpu(peak_flops, w)?)
}

/// Tensor parallelism of degree `y` over an MLP with feed-forward width `d_ff`, forward
/// pass (scaling book ch. 12): `T_math = 4·B·D·F / (Y·C)`, `T_comms = 4·B·D / W` (all-gather
/// and reduce-scatter of bf16 activations). Compute-bound iff `Y < F·W / C`: about `F / 2200`
/// within an H100 node. `tokens` is `B` (it cancels).
pub fn tensor_parallel(
    tokens: f64,
    d_model: f64,
    d_ff: f64,
    y: u64,
    peak_flops: f64,
    w: f64,
) -> Result<CommsRoofline> {
    positive("tokens", tokens)?;
    positive("d_model", d_model)?;
    positive("d_ff", d_ff)?;
    at_least_one("tensor parallel degree", y)?;
    positive("peak FLOP/s", peak_flops)?;
    positive("collective bandwidth", w)?;
    let math = 4.0 * tokens * d_model * d_ff / (y as f64 * peak_flops);
    let comms = 4.0 * tokens * d_model / w;
    Ok(roofline(
        "tensor parallel",
        math,
        comms,
        d_ff * w / peak_flops,
        "max TP degree (F·W/C)".into(),
    ))
}

/// Largest compute-bound tensor-parallel degree `F·W/C` (scaling book ch. 12).
pub fn tp_max_degree(d_ff: f64, peak_flops: f64, w: f64) -> Result<f64> {
    Ok(
        positive("d_ff", d_ff)? * positive("collective bandwidth", w)?
            / positive("peak FLOP/s", peak_flops)?,
    )
}

/// Expert parallelism of degree `z` spanning nodes of `gpus_per_node` (scaling book ch. 12):
/// `T_math = 4·B·k·D·F / (Z·C)`, `T_comms = 4·B·D·(Z−G)/(W·Z) · min(G·k/Z, 1)` with `G` GPUs
/// per node (8 in the book) and `W` the node egress bandwidth. Only cross-node traffic is
/// counted: for `Z ≤ G` the all-to-alls stay on NVLink and this model's comms time is 0.
#[allow(clippy::too_many_arguments)]
pub fn expert_parallel(
    tokens: f64,
    d_model: f64,
    d_ff: f64,
    top_k: u64,
    z: u64,
    gpus_per_node: u64,
    peak_flops: f64,
    w: f64,
) -> Result<CommsRoofline> {
    positive("tokens", tokens)?;
    positive("d_model", d_model)?;
    positive("d_ff", d_ff)?;
    at_least_one("top-k", top_k)?;
    at_least_one("expert parallel degree", z)?;
    at_least_one("GPUs per node", gpus_per_node)?;
    positive("peak FLOP/s", peak_flops)?;
    positive("collective bandwidth", w)?;
    let (zf, g, k) = (z as f64, gpus_per_node as f64, top_k as f64);
    let math = 4.0 * tokens * k * d_model * d_ff / (zf * peak_flops);
    let comms = (4.0 * tokens * d_model * (zf - g) / (w * zf) * (g * k / zf).min(1.0)).max(0.0);
    let alpha = peak_flops / w;
    // Critical F: from T_math ≥ T_comms, F ≥ α·(Z−G)/k·min(G·k/Z, 1).
    let critical = (alpha * (zf - g) / k * (g * k / zf).min(1.0)).max(0.0);
    Ok(roofline(
        "expert parallel",
        math,
        comms,
        critical,
        "min d_ff for compute-bound EP".into(),
    ))
}

/// Pipeline-parallel communication: `2·B·D / (W·N_mb) · (N_mb + N_stages − 2)` seconds for
/// the whole pipeline (bf16 activations sent stage to stage; scaling book ch. 12). Tiny next to
/// the others: "from a communication standpoint, pipelining is basically free".
pub fn pipeline_comms_time(
    tokens: f64,
    d_model: f64,
    microbatches: u64,
    stages: u64,
    w: f64,
) -> Result<f64> {
    positive("tokens", tokens)?;
    positive("d_model", d_model)?;
    at_least_one("micro-batches", microbatches)?;
    at_least_one("pipeline stages", stages)?;
    positive("bandwidth", w)?;
    let (m, p) = (microbatches as f64, stages as f64);
    Ok(2.0 * tokens * d_model / (w * m) * (m + p - 2.0).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_all_reduce_is_two_reduce_scatters() {
        let link = Link::new(1e-6, 100e9).unwrap();
        let ar = collective_time(Collective::AllReduce, Algorithm::Ring, 8, 1e9, link).unwrap();
        let rs = collective_time(Collective::ReduceScatter, Algorithm::Ring, 8, 1e9, link).unwrap();
        let ag = collective_time(Collective::AllGather, Algorithm::Ring, 8, 1e9, link).unwrap();
        assert!((ar - rs - ag).abs() < 1e-15);
        // Bandwidth term: 2 × 7/8 × 1e9 / 100e9 = 17.5 ms; latency 14 µs.
        assert!((ar - (0.0175 + 14e-6)).abs() < 1e-12);
        assert_eq!(
            collective_time(Collective::AllReduce, Algorithm::Ring, 1, 1e9, link).unwrap(),
            0.0
        );
        assert!(collective_time(Collective::AllGather, Algorithm::Tree, 8, 1e9, link).is_err());
        assert!(collective_time(Collective::AllReduce, Algorithm::Ring, 0, 1e9, link).is_err());
    }

    /// nccl-tests doc/PERFORMANCE.md: a ring all-reduce at the link's full bandwidth has
    /// busbw equal to that bandwidth, whatever n.
    #[test]
    fn bus_bandwidth_equals_link_bandwidth_for_ideal_ring() {
        for n in [2, 4, 8, 64] {
            let link = Link::new(0.0, 100e9).unwrap();
            for c in [
                Collective::AllReduce,
                Collective::AllGather,
                Collective::ReduceScatter,
            ] {
                let t = collective_time(c, Algorithm::Ring, n, 1e9, link).unwrap();
                let bus = bus_bandwidth(c, n, 1e9, t).unwrap();
                assert!((bus - 100e9).abs() / 100e9 < 1e-12, "{c:?} n={n}");
            }
        }
    }

    /// Scaling book ch. 12: collective bandwidth 450e9 within an H100 node, 400e9 beyond.
    #[test]
    fn h100_links() {
        let h100 = crate::specs::gpu("h100").unwrap();
        assert_eq!(Link::intra_node(&h100).unwrap().bandwidth, 450e9);
        assert_eq!(Link::inter_node(&h100).unwrap().bandwidth, 400e9);
        // PCIe cards: intra-node over PCIe (32 GB/s one way), no network in the spec.
        let l4 = crate::specs::gpu("l4").unwrap();
        assert_eq!(Link::intra_node(&l4).unwrap().bandwidth, 32e9);
        assert!(Link::inter_node(&l4).is_err());
    }

    #[test]
    fn tree_has_log_latency() {
        let link = Link::new(5e-6, 50e9).unwrap();
        let ring =
            collective_time(Collective::AllReduce, Algorithm::Ring, 1024, 1e3, link).unwrap();
        let tree =
            collective_time(Collective::AllReduce, Algorithm::Tree, 1024, 1e3, link).unwrap();
        assert!(tree < ring / 50.0);
    }

    #[test]
    fn dp_condition_is_the_ratio_of_times() {
        let r = data_parallel(2200.0, 8192.0, 28672.0, 990e12, 450e9).unwrap();
        assert!((r.math_s / r.comms_s - 1.0).abs() < 1e-12);
        assert!((r.critical - 2200.0).abs() < 1e-9);
        assert!(
            !data_parallel(1000.0, 8192.0, 28672.0, 990e12, 450e9)
                .unwrap()
                .compute_bound
        );
        assert!(moe_dp_critical_tokens_per_gpu(1.0, 1.0, 4, 8).is_err());
    }
}
