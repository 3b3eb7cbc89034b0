//! The backward split into B (input gradient) and W (weight gradient), as the
//! zero-bubble pipeline schedules run it (Qi et al., "Zero Bubble Pipeline
//! Parallelism", 2023): B then W gives bitwise the gradients of the fused backward,
//! with several micro-batches in flight and the W passes in any order; W without B is
//! an error; the W stash is freed.
//!
//! Bitwise against what: a gradient summed over micro-batches depends on the order of
//! the additions in f32. The projections' weight gradients are added when W runs, all
//! other gradients (LayerNorms, embeddings, the whole model's tied head) when B runs.
//! So the reference for a projection weight is the fused backward run in the W order,
//! and for every other parameter the fused backward run in the B order.

use brrr_cpu::CpuBackend;
use brrr_nn::{Backend, DType, Gpt, GptConfig, GptStages, MicroBatch, Module, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 13,
        block_size: 6,
        n_layer: 3,
        n_head: 2,
        n_embd: 8,
    }
}

const B: usize = 2;
const T: usize = 5;
const M: u32 = 4;
const DLOSS: f32 = 1.0 / (M as usize * B * T) as f32;

fn model(be: &CpuBackend) -> Gpt<CpuBackend> {
    let mut gpt = Gpt::new(be, config(), DType::F32, &mut ChaCha8Rng::seed_from_u64(3)).unwrap();
    gpt.zero_grad().unwrap();
    gpt
}

fn batch(be: &CpuBackend, i: u32) -> (Tensor<CpuBackend>, Tensor<CpuBackend>) {
    let mut rng = ChaCha8Rng::seed_from_u64(500 + u64::from(i));
    let v = config().vocab_size;
    let ids: Vec<u32> = (0..B * T).map(|_| rng.random_range(0..v as u32)).collect();
    let tg: Vec<i32> = (0..B * T).map(|_| rng.random_range(0..v as i32)).collect();
    (
        Tensor::from_u32(be, &ids, [B, T]).unwrap(),
        Tensor::from_i32(be, &tg, [B, T]).unwrap(),
    )
}

/// Each parameter's name and gradient bits.
fn grads<M: Module<CpuBackend>>(m: &M) -> Vec<(String, Vec<u32>)> {
    m.params()
        .iter()
        .map(|p| {
            let bits = p.grad.to_vec_f32().unwrap();
            (p.name.clone(), bits.iter().map(|x| x.to_bits()).collect())
        })
        .collect()
}

fn is_projection(name: &str) -> bool {
    [".c_attn.", ".c_proj.", ".c_fc."]
        .iter()
        .any(|k| name.contains(k))
}

/// One backward step: `('B', mb)` or `('W', mb)`.
type Step = (char, u32);

/// Orders to test: W right after its B, all W after all B in another order, and
/// interleaved.
fn orders() -> Vec<Vec<Step>> {
    vec![
        vec![
            ('B', 0),
            ('W', 0),
            ('B', 1),
            ('W', 1),
            ('B', 2),
            ('W', 2),
            ('B', 3),
            ('W', 3),
        ],
        vec![
            ('B', 3),
            ('B', 1),
            ('B', 0),
            ('B', 2),
            ('W', 2),
            ('W', 0),
            ('W', 3),
            ('W', 1),
        ],
        vec![
            ('B', 0),
            ('B', 1),
            ('W', 1),
            ('B', 2),
            ('W', 0),
            ('B', 3),
            ('W', 3),
            ('W', 2),
        ],
    ]
}

fn order_of(steps: &[Step], kind: char) -> Vec<u32> {
    steps.iter().filter(|s| s.0 == kind).map(|s| s.1).collect()
}

/// The whole model: all forwards, then the fused backward in `order`.
fn gpt_fused(order: &[u32]) -> Vec<(String, Vec<u32>)> {
    let be = CpuBackend::new();
    let mut gpt = model(&be);
    for i in 0..M {
        let (ids, tg) = batch(&be, i);
        gpt.forward_loss_mb(MicroBatch(i), &ids, &tg).unwrap();
    }
    for &i in order {
        gpt.backward_mb(MicroBatch(i), DLOSS).unwrap();
    }
    grads(&gpt)
}

/// The whole model: all forwards, then B and W in the order of `steps`.
fn gpt_split(steps: &[Step]) -> Vec<(String, Vec<u32>)> {
    let be = CpuBackend::new();
    let mut gpt = model(&be);
    for i in 0..M {
        let (ids, tg) = batch(&be, i);
        gpt.forward_loss_mb(MicroBatch(i), &ids, &tg).unwrap();
    }
    for &(kind, i) in steps {
        match kind {
            'B' => gpt.backward_input_mb(MicroBatch(i), DLOSS).unwrap(),
            _ => gpt.backward_weight_mb(MicroBatch(i)).unwrap(),
        }
    }
    assert!(gpt.in_flight().is_empty());
    grads(&gpt)
}

fn assert_bitwise(
    got: &[(String, Vec<u32>)],
    by_b: &[(String, Vec<u32>)],
    by_w: &[(String, Vec<u32>)],
    split_head: bool,
    what: &str,
) {
    assert_eq!(got.len(), by_b.len());
    for (i, (name, bits)) in got.iter().enumerate() {
        let deferred = is_projection(name) || (split_head && name == "head.wte.weight");
        let want = if deferred { &by_w[i] } else { &by_b[i] };
        assert_eq!(&want.0, name);
        assert!(
            bits == &want.1,
            "{what}: {name} differs from the fused backward"
        );
    }
}

#[test]
fn gpt_b_then_w_matches_the_fused_backward_bitwise_in_any_w_order() {
    for steps in orders() {
        let got = gpt_split(&steps);
        let by_b = gpt_fused(&order_of(&steps, 'B'));
        let by_w = gpt_fused(&order_of(&steps, 'W'));
        assert_bitwise(&got, &by_b, &by_w, false, &format!("{steps:?}"));
    }
    // The orders differ enough that the test can fail: summing a projection's
    // gradient in another order changes some bits.
    let a = gpt_fused(&[0, 1, 2, 3]);
    let b = gpt_fused(&[3, 1, 0, 2]);
    assert!(
        a.iter().zip(&b).any(|(x, y)| x.1 != y.1),
        "the order of accumulation changed no bit: the test cannot tell orders apart"
    );
}

fn stages(be: &CpuBackend) -> GptStages<CpuBackend> {
    model(be).into_stages(&[0..1, 1..3]).unwrap()
}

/// Every stage's gradients, named `embedding.` / `blocks{k}.` / `head.` + the name.
fn stage_grads(st: &GptStages<CpuBackend>) -> Vec<(String, Vec<u32>)> {
    let prefix = |p: &str, v: Vec<(String, Vec<u32>)>| {
        v.into_iter()
            .map(|(n, b)| (format!("{p}.{n}"), b))
            .collect::<Vec<_>>()
    };
    let mut all = prefix("embedding", grads(&st.embedding));
    for (k, b) in st.blocks.iter().enumerate() {
        all.extend(prefix(&format!("blocks{k}"), grads(b)));
    }
    all.extend(prefix("head", grads(&st.head)));
    all
}

/// The stages: all forwards, then `steps`; a `'F'` step is the fused backward.
fn run_stages(steps: &[Step]) -> Vec<(String, Vec<u32>)> {
    let be = CpuBackend::new();
    let mut st = stages(&be);
    for i in 0..M {
        let (ids, tg) = batch(&be, i);
        let mb = MicroBatch(i);
        let mut x = st.embedding.forward(mb, &ids).unwrap();
        for b in &mut st.blocks {
            x = b.forward(mb, &x).unwrap();
        }
        st.head.forward_loss(mb, &x, &tg).unwrap();
    }
    for &(kind, i) in steps {
        let mb = MicroBatch(i);
        match kind {
            'F' => {
                let mut dx = st.head.backward(mb, DLOSS).unwrap();
                for b in st.blocks.iter_mut().rev() {
                    dx = b.backward(mb, &dx).unwrap();
                }
                st.embedding.backward(mb, &dx).unwrap();
            }
            'B' => {
                let mut dx = st.head.backward_input(mb, DLOSS).unwrap();
                for b in st.blocks.iter_mut().rev() {
                    dx = b.backward_input(mb, &dx).unwrap();
                }
                st.embedding.backward(mb, &dx).unwrap();
            }
            _ => {
                st.head.backward_weight(mb).unwrap();
                for b in st.blocks.iter_mut().rev() {
                    b.backward_weight(mb).unwrap();
                }
            }
        }
    }
    stage_grads(&st)
}

#[test]
fn stages_b_then_w_match_the_fused_backward_bitwise_in_any_w_order() {
    let fused =
        |order: Vec<u32>| run_stages(&order.into_iter().map(|i| ('F', i)).collect::<Vec<_>>());
    for steps in orders() {
        let got = run_stages(&steps);
        let by_b = fused(order_of(&steps, 'B'));
        let by_w = fused(order_of(&steps, 'W'));
        // The head stage's tied copy of wte is deferred to W as well.
        assert_bitwise(&got, &by_b, &by_w, true, &format!("{steps:?}"));
    }
}

#[test]
fn w_without_b_is_an_error_naming_the_layer_and_micro_batch() {
    let be = CpuBackend::new();
    let mut gpt = model(&be);
    let (ids, tg) = batch(&be, 0);
    gpt.forward_loss_mb(MicroBatch(0), &ids, &tg).unwrap();
    let e = gpt
        .backward_weight_mb(MicroBatch(0))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("micro-batch 0") && e.contains("W before B") && e.contains(".weight"),
        "{e}"
    );
    gpt.backward_input_mb(MicroBatch(0), DLOSS).unwrap();
    gpt.backward_weight_mb(MicroBatch(0)).unwrap();
    let e = gpt
        .backward_weight_mb(MicroBatch(0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("W twice"), "{e}");

    let mut st = stages(&be);
    let e = st
        .head
        .backward_weight(MicroBatch(2))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("HeadStage") && e.contains("micro-batch 2"),
        "{e}"
    );
    let e = st.blocks[0]
        .backward_weight(MicroBatch(1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("h.0.") && e.contains("micro-batch 1"), "{e}");
}

#[test]
fn the_w_stash_is_freed_back_to_the_baseline() {
    let be = CpuBackend::new();
    let mut gpt = model(&be);
    let data: Vec<_> = (0..M).map(|i| batch(&be, i)).collect();
    let baseline = be.memory_stats().bytes_in_use;
    for (i, (ids, tg)) in data.iter().enumerate() {
        drop(gpt.forward_loss_mb(MicroBatch(i as u32), ids, tg).unwrap());
    }
    for i in 0..M {
        gpt.backward_input_mb(MicroBatch(i), DLOSS).unwrap();
    }
    // Each projection keeps its input and output gradient per micro-batch.
    let c = config().n_embd;
    let per_block = (c + 3 * c) + (c + c) + (c + 4 * c) + (4 * c + c); // x + dy of 4 GEMMs
    let held = (M as usize * B * T * per_block * config().n_layer * 4) as u64;
    let after_b = be.memory_stats().bytes_in_use;
    assert_eq!(after_b - baseline, held, "bytes held between B and W");
    for i in (0..M).rev() {
        gpt.backward_weight_mb(MicroBatch(i)).unwrap();
    }
    assert_eq!(be.memory_stats().bytes_in_use, baseline);

    // clear_saved drops a pending W as well.
    for (i, (ids, tg)) in data.iter().enumerate() {
        drop(gpt.forward_loss_mb(MicroBatch(i as u32), ids, tg).unwrap());
        gpt.backward_input_mb(MicroBatch(i as u32), DLOSS).unwrap();
    }
    assert!(be.memory_stats().bytes_in_use > baseline);
    gpt.clear_saved();
    assert_eq!(be.memory_stats().bytes_in_use, baseline);
}
