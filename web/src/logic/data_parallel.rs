//! What the data-parallel page shows: the backward of a GPT and the ring all-reduce of
//! each gradient bucket on two lanes, and what one rank holds and sends per step under
//! ZeRO stages 0–3. Buckets come from `brrr_dp::assign_buckets` (DDP's reverse order, a
//! small first bucket), the all-reduce times from `brrr_perf::comms::collective_time`,
//! the hidden share from `brrr_dp::hidden_fraction`, the memory from
//! `brrr_perf::memory::model_state_bytes` (which `brrr_dp::estimate_model_states` uses).
//!
//! The timeline is a model, not a measurement: every block's backward takes the time the
//! reader sets, the tied LM head's takes that time scaled by its GEMM's share
//! (`V·C` against a block's `12C²` multiply-adds per token), and the embeddings' backward
//! (a scatter-add) takes none.

use brrr_perf::comms::{Algorithm, Collective, Link, collective_time};
use brrr_perf::memory::{
    ModelStates, Optimizer, PRESETS, Precision, TransformerConfig, model_state_bytes,
};

/// Largest number of ranks the page accepts.
pub const MAX_RANKS: u64 = 1024;
/// Largest number of layers the page accepts.
pub const MAX_LAYERS: u64 = 128;

/// The page's inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct DpInput {
    /// A name from `brrr_perf::memory::PRESETS`, or `custom` for the sizes below.
    pub preset: String,
    /// Blocks `L` (custom).
    pub layers: u64,
    /// Width `C` (custom).
    pub hidden: u64,
    /// Context `T` (custom; sets the position table).
    pub seq: u64,
    /// Vocabulary `V` (custom).
    pub vocab: u64,
    /// Bucket size in MiB (PyTorch's `bucket_cap_mb`, 25 by default).
    pub bucket_mib: u64,
    /// First bucket in MiB (1 in PyTorch).
    pub first_bucket_mib: u64,
    /// Data-parallel ranks `n`.
    pub ranks: u64,
    /// Backward time of one block, microseconds.
    pub layer_us: u64,
    /// One-direction link bandwidth per rank, GB/s.
    pub link_gbs: u64,
    /// Per-message latency α, microseconds.
    pub alpha_us: u64,
    /// Mixed precision (2-byte weights and gradients, 4-byte master copy) instead of
    /// brrr-dp's f32.
    pub mixed: bool,
}

impl Default for DpInput {
    /// GPT-2 small on 8 ranks with DDP's default buckets.
    fn default() -> Self {
        DpInput {
            preset: "gpt2".into(),
            layers: 12,
            hidden: 768,
            seq: 1024,
            vocab: 50257,
            bucket_mib: 25,
            first_bucket_mib: 1,
            ranks: 8,
            layer_us: 2000,
            link_gbs: 50,
            alpha_us: 5,
            mixed: false,
        }
    }
}

/// The preset menu: `(key, label)`, `custom` first.
pub fn preset_options() -> Vec<(String, String)> {
    let mut out = vec![("custom".to_string(), "custom sizes".to_string())];
    out.extend(PRESETS.iter().map(|p| (p.0.to_string(), p.0.to_string())));
    out
}

impl DpInput {
    /// The model: the preset's, or a GPT of the custom sizes.
    pub fn model(&self) -> Result<TransformerConfig, String> {
        let cfg = if self.preset == "custom" {
            TransformerConfig::gpt(self.layers, self.hidden, 1, self.seq, self.vocab)
        } else {
            TransformerConfig::preset(&self.preset).map_err(|e| e.to_string())?
        };
        cfg.validate().map_err(|e| e.to_string())?;
        if cfg.layers > MAX_LAYERS {
            return Err(format!("at most {MAX_LAYERS} layers, not {}", cfg.layers));
        }
        Ok(cfg)
    }

    /// f32 (brrr-dp's; 4-byte gradients) or mixed precision (2-byte gradients).
    pub fn precision(&self) -> Precision {
        if self.mixed {
            Precision::Mixed
        } else {
            Precision::Fp32
        }
    }
}

/// Where a parameter's gradient becomes final in the backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ready {
    /// With the LM head's backward (the final LayerNorm).
    Head,
    /// With block `k`'s backward.
    Block(u64),
    /// At the very end (the tied embedding, the positions).
    Embedding,
}

/// A GPT's parameters in model order (GPT-2's: `wte`, `wpe`, per block `ln_1`, `c_attn`,
/// `c_proj`, `ln_2`, `c_fc`, `mlp.c_proj`, then `ln_f`; the head is tied to `wte`), with
/// the part of the backward that finishes each gradient.
fn parameters(cfg: &TransformerConfig) -> Result<Vec<(usize, Ready)>, String> {
    let n = |x: u64| usize::try_from(x).map_err(|_| format!("{x} elements overflow usize"));
    let mul = |a: u64, b: u64| {
        a.checked_mul(b)
            .ok_or_else(|| "a parameter's size overflows".to_string())
    };
    let (c, f) = (cfg.hidden, cfg.ffn_hidden);
    let mut out = vec![
        (n(mul(cfg.vocab, c)?)?, Ready::Embedding),
        (n(mul(cfg.seq_len, c)?)?, Ready::Embedding),
    ];
    for k in 0..cfg.layers {
        for numel in [
            c,
            c,
            mul(3 * c, c)?,
            3 * c,
            mul(c, c)?,
            c,
            c,
            c,
            mul(f, c)?,
            f,
            mul(c, f)?,
            c,
        ] {
            out.push((n(numel)?, Ready::Block(k)));
        }
    }
    out.push((n(c)?, Ready::Head));
    out.push((n(c)?, Ready::Head));
    Ok(out)
}

/// One part of the backward on the compute lane.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    /// `head`, `h.11`, …, `embed`.
    pub name: String,
    /// Start, seconds from the start of the backward.
    pub start: f64,
    /// End, seconds.
    pub end: f64,
}

/// One bucket's all-reduce on the communication lane.
#[derive(Clone, Debug, PartialEq)]
pub struct Comm {
    /// Bucket index (0 is the first to be ready).
    pub bucket: usize,
    /// Parameters in the bucket.
    pub params: usize,
    /// Bytes all-reduced.
    pub bytes: f64,
    /// When its last gradient is final, seconds.
    pub ready: f64,
    /// When the all-reduce starts (after the previous one), seconds.
    pub start: f64,
    /// When it ends, seconds.
    pub end: f64,
}

/// The two lanes and what they add up to.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Backward parts, in order.
    pub parts: Vec<Part>,
    /// All-reduces, in order.
    pub comms: Vec<Comm>,
    /// End of the backward, seconds.
    pub backward: f64,
    /// Sum of all-reduce times, seconds.
    pub comm_total: f64,
    /// End of the last all-reduce (the step's end before the optimizer), seconds.
    pub end: f64,
    /// Communication after the backward ends: `end − backward` (0 if none), seconds.
    pub exposed: f64,
    /// Share of communication time inside the backward (`brrr_dp::hidden_fraction`).
    pub hidden: f64,
}

/// One ZeRO stage's row: what a rank holds and sends.
#[derive(Clone, Debug, PartialEq)]
pub struct StageRow {
    /// 0–3.
    pub stage: u8,
    /// Per-rank model states (`model_state_bytes`).
    pub states: ModelStates,
    /// Bytes one rank sends per step on a ring: `2(n−1)/n · Ψ` gradient-sized elements
    /// for stages 0–2, `3(n−1)/n · Ψ` for stage 3.
    pub sent: f64,
}

/// Everything the page draws.
#[derive(Clone, Debug, PartialEq)]
pub struct DpView {
    /// Parameters Ψ.
    pub params: f64,
    /// The backward and the all-reduces, or why they cannot be drawn: on 32-bit wasm the
    /// flat buffer's offsets (`usize`) stop at 4.29 G elements, so larger models get the
    /// memory table without the timeline.
    pub timeline: Result<Timeline, String>,
    /// Stages 0–3.
    pub stages: Vec<StageRow>,
}

/// The page's numbers for `input`, or what is wrong with it.
pub fn view(input: &DpInput) -> Result<DpView, String> {
    let cfg = input.model()?;
    if !(1..=MAX_RANKS).contains(&input.ranks) {
        return Err(format!(
            "ranks must be 1 to {MAX_RANKS}, not {}",
            input.ranks
        ));
    }
    let timeline = match flat_buffer_overflow(&cfg)? {
        Some(why) => Err(why),
        None => Ok(timeline(input, &cfg)?),
    };
    let params = cfg.params();
    let stages = (0..=3)
        .map(|stage| stage_row(input, params, stage))
        .collect::<Result<_, _>>()?;
    Ok(DpView {
        params,
        timeline,
        stages,
    })
}

/// Why the model's parameters do not fit one flat buffer on this platform (brrr-dp's
/// offsets are `usize`, 32 bits on wasm32), or `None` when they do.
fn flat_buffer_overflow(cfg: &TransformerConfig) -> Result<Option<String>, String> {
    let fits = parameters(cfg)?
        .iter()
        .try_fold(0usize, |a, p| a.checked_add(p.0))
        .is_some();
    Ok((!fits).then(|| {
        format!(
            "its {:.3e} parameters do not fit in one flat buffer indexed by this platform's \
             {}-bit usize (brrr-dp's offsets); the memory table below holds all the same",
            cfg.params(),
            usize::BITS
        )
    }))
}

/// One stage's memory and traffic.
pub fn stage_row(input: &DpInput, params: f64, stage: u8) -> Result<StageRow, String> {
    let precision = input.precision();
    let states = model_state_bytes(params, precision, Optimizer::Adam, stage, input.ranks)
        .map_err(|e| e.to_string())?;
    let grad_bytes = precision.bytes_per_param().1;
    let n = input.ranks as f64;
    let factor = if stage == 3 { 3.0 } else { 2.0 };
    Ok(StageRow {
        stage,
        states,
        sent: factor * (n - 1.0) / n * params * grad_bytes,
    })
}

/// The backward parts: the head, the blocks from the last, the embeddings.
fn backward_parts(cfg: &TransformerConfig, layer_s: f64) -> Vec<Part> {
    // The tied head's GEMM does V·C multiply-adds per token against a block's 12C²
    // (attention scores left out): its backward costs that share of a block's.
    let head = layer_s * cfg.vocab as f64 / (12.0 * cfg.hidden as f64);
    let mut parts = vec![Part {
        name: "head".into(),
        start: 0.0,
        end: head,
    }];
    let mut t = head;
    for k in (0..cfg.layers).rev() {
        parts.push(Part {
            name: format!("h.{k}"),
            start: t,
            end: t + layer_s,
        });
        t += layer_s;
    }
    parts.push(Part {
        name: "embed".into(),
        start: t,
        end: t,
    });
    parts
}

/// The two lanes: buckets in reverse parameter order, each all-reduce starting when its
/// last gradient is final and the previous all-reduce is done (one communication stream).
pub fn timeline(input: &DpInput, cfg: &TransformerConfig) -> Result<Timeline, String> {
    let elem = input.precision().bytes_per_param().1 as usize;
    let params = parameters(cfg)?;
    let numels: Vec<usize> = params.iter().map(|p| p.0).collect();
    let mib = |m: u64| usize::try_from(m.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    let buckets = brrr_dp::assign_buckets(
        &numels,
        elem,
        mib(input.bucket_mib),
        mib(input.first_bucket_mib),
    )
    .map_err(|e| e.to_string())?;
    let link = Link::new(input.alpha_us as f64 * 1e-6, input.link_gbs as f64 * 1e9)
        .map_err(|e| e.to_string())?;
    let parts = backward_parts(cfg, input.layer_us as f64 * 1e-6);
    let backward = parts.last().map_or(0.0, |p| p.end);
    let ready_at = |r: Ready| match r {
        Ready::Head => parts[0].end,
        // parts[1] is the last block.
        Ready::Block(k) => parts[(cfg.layers - k) as usize].end,
        Ready::Embedding => backward,
    };
    let mut comms = Vec::with_capacity(buckets.len());
    let mut free = 0.0f64;
    for (i, b) in buckets.iter().enumerate() {
        // Gradients finish in reverse order, so the bucket's first parameter is its last.
        let ready = params[b.params.clone()]
            .iter()
            .map(|p| ready_at(p.1))
            .fold(0.0, f64::max);
        let bytes = (b.len() * elem) as f64;
        let time = collective_time(
            Collective::AllReduce,
            Algorithm::Ring,
            input.ranks,
            bytes,
            link,
        )
        .map_err(|e| e.to_string())?;
        let start = ready.max(free);
        free = start + time;
        comms.push(Comm {
            bucket: i,
            params: b.params.len(),
            bytes,
            ready,
            start,
            end: free,
        });
    }
    let intervals: Vec<(f64, f64)> = comms.iter().map(|c| (c.start, c.end)).collect();
    let comm_total = comms.iter().map(|c| c.end - c.start).sum();
    let end = free.max(backward);
    Ok(Timeline {
        hidden: brrr_dp::hidden_fraction(&intervals, (0.0, backward)),
        parts,
        comms,
        backward,
        comm_total,
        end,
        exposed: end - backward,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12)
    }

    #[test]
    fn parameters_add_up_to_brrr_perf_count() {
        let cfg = DpInput::default().model().unwrap();
        let total: usize = parameters(&cfg).unwrap().iter().map(|p| p.0).sum();
        assert_eq!(total as f64, cfg.params());
        assert_eq!(total, 124_439_808);
    }

    #[test]
    fn buckets_follow_the_backward_and_queue() {
        let input = DpInput::default();
        let v = view(&input).unwrap();
        let t = v.timeline.as_ref().unwrap();
        // First bucket: ln_f and the last block's small tail reach 1 MiB; ready with h.11.
        assert!(t.comms.len() > 3);
        assert!(close(t.comms[0].ready, t.parts[1].end), "{:?}", t.comms[0]);
        // Every all-reduce starts once ready and once the stream is free.
        for w in t.comms.windows(2) {
            assert!(w[1].start >= w[0].end - 1e-15);
            assert!(w[1].start >= w[1].ready - 1e-15);
        }
        // The last bucket holds wte and is ready only at the end of the backward.
        let last = t.comms.last().unwrap();
        assert!(close(last.ready, t.backward));
        assert!(t.exposed > 0.0 && t.hidden > 0.0 && t.hidden < 1.0);
        // Exposed communication: the step's end minus the backward's.
        assert!(close(t.exposed, last.end - t.backward));
        // Bytes cover every gradient once (4-byte f32).
        let bytes: f64 = t.comms.iter().map(|c| c.bytes).sum();
        assert!(close(bytes, 4.0 * v.params));
        // Ring all-reduce time of each bucket: 2(n−1)α + 2(n−1)/n · S/β.
        let n = 8.0;
        let c = &t.comms[1];
        let want = 2.0 * (n - 1.0) * 5e-6 + 2.0 * (n - 1.0) / n * c.bytes / 50e9;
        assert!(close(c.end - c.start, want));
        // The backward: head V/(12C) of a block, then 12 blocks.
        let head = 2e-3 * 50257.0 / (12.0 * 768.0);
        assert!(close(t.backward, head + 12.0 * 2e-3));
    }

    #[test]
    fn a_fast_link_hides_all_but_the_last_bucket() {
        let slow = view(&DpInput::default()).unwrap().timeline.unwrap();
        let fast = view(&DpInput {
            link_gbs: 5000,
            ..DpInput::default()
        })
        .unwrap()
        .timeline
        .unwrap();
        assert!(fast.hidden > slow.hidden);
        assert!(fast.exposed < slow.exposed);
        // One rank: nothing to send.
        let one = view(&DpInput {
            ranks: 1,
            ..DpInput::default()
        })
        .unwrap()
        .timeline
        .unwrap();
        assert_eq!(one.comm_total, 0.0);
        assert_eq!(one.exposed, 0.0);
    }

    #[test]
    fn zero_stages_match_the_paper() {
        let input = DpInput::default();
        let v = view(&input).unwrap();
        let (p, n) = (v.params, 8.0);
        let totals: Vec<f64> = v.stages.iter().map(|s| s.states.total()).collect();
        // f32 with AdamW, as brrr-dp runs it: 16Ψ, 8Ψ + 8Ψ/n, 4Ψ + 12Ψ/n, 16Ψ/n.
        for (got, want) in totals.iter().zip([
            16.0 * p,
            8.0 * p + 8.0 * p / n,
            4.0 * p + 12.0 * p / n,
            16.0 * p / n,
        ]) {
            assert!(close(*got, want), "{got} vs {want}");
        }
        let dp = brrr_dp::estimate_model_states(p as usize, 3, 8).unwrap();
        assert!(close(dp.total(), totals[3]));
        assert!(close(v.stages[0].sent, 2.0 * 7.0 / 8.0 * p * 4.0));
        assert!(close(v.stages[2].sent, v.stages[0].sent));
        assert!(close(v.stages[3].sent, 1.5 * v.stages[0].sent));
        // Mixed precision: (2 + 2 + 12)Ψ at stage 0, gradients of 2 bytes on the wire.
        let mixed = view(&DpInput {
            mixed: true,
            ..input
        })
        .unwrap();
        assert!(close(mixed.stages[0].states.total(), 16.0 * p));
        assert!(close(mixed.stages[3].states.total(), 16.0 * p / n));
        assert!(close(
            mixed.stages[1].states.total(),
            4.0 * p + 12.0 * p / n
        ));
        assert!(close(mixed.stages[0].sent, 2.0 * 7.0 / 8.0 * p * 2.0));
    }

    #[test]
    fn bad_inputs_are_errors() {
        for bad in [
            DpInput {
                ranks: 0,
                ..DpInput::default()
            },
            DpInput {
                bucket_mib: 0,
                ..DpInput::default()
            },
            DpInput {
                link_gbs: 0,
                ..DpInput::default()
            },
            DpInput {
                preset: "custom".into(),
                layers: 0,
                ..DpInput::default()
            },
            DpInput {
                preset: "nope".into(),
                ..DpInput::default()
            },
        ] {
            assert!(view(&bad).is_err(), "{bad:?}");
        }
    }
}
