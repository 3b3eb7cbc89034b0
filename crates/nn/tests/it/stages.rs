//! A [`Gpt`] cut into stages (embedding, ranges of blocks, head), run stage by stage,
//! gives the whole model's losses and gradients.

use brrr_cpu::CpuBackend;
use brrr_nn::{
    DType, Gpt, GptConfig, MicroBatch, Module, Tensor, copy_to_backend, move_to_backend,
    sum_tied_grads,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 11,
        block_size: 6,
        n_layer: 3,
        n_head: 2,
        n_embd: 8,
    }
}

const B: usize = 2;
const T: usize = 5;
const MICRO_BATCHES: u32 = 2;

fn model(be: &CpuBackend) -> Gpt<CpuBackend> {
    let mut gpt = Gpt::new(be, config(), DType::F32, &mut ChaCha8Rng::seed_from_u64(9)).unwrap();
    gpt.zero_grad().unwrap();
    gpt
}

/// Micro-batch `i`'s ids and targets on `be`.
fn batch(be: &CpuBackend, i: u32) -> (Tensor<CpuBackend>, Tensor<CpuBackend>) {
    let mut rng = ChaCha8Rng::seed_from_u64(100 + u64::from(i));
    let v = config().vocab_size;
    let ids: Vec<u32> = (0..B * T).map(|_| rng.random_range(0..v as u32)).collect();
    let tg: Vec<i32> = (0..B * T).map(|_| rng.random_range(0..v as i32)).collect();
    (
        Tensor::from_u32(be, &ids, [B, T]).unwrap(),
        Tensor::from_i32(be, &tg, [B, T]).unwrap(),
    )
}

fn bits(t: &Tensor<CpuBackend>) -> Vec<u32> {
    t.to_vec_f32()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// Gradients by parameter name.
type Grads = HashMap<String, Vec<f32>>;

const DLOSS: f32 = 1.0 / (MICRO_BATCHES as usize * B * T) as f32;

/// The whole model, micro-batches one after another: losses and gradients by name.
fn whole() -> (Vec<Vec<u32>>, Grads) {
    let be = CpuBackend::new();
    let mut gpt = model(&be);
    let mut losses = Vec::new();
    for i in 0..MICRO_BATCHES {
        let (ids, tg) = batch(&be, i);
        losses.push(bits(
            &gpt.forward_loss_mb(MicroBatch(i), &ids, &tg).unwrap(),
        ));
        gpt.backward_mb(MicroBatch(i), DLOSS).unwrap();
    }
    let grads = gpt
        .params()
        .iter()
        .map(|p| (p.name.clone(), p.grad.to_vec_f32().unwrap()))
        .collect();
    (losses, grads)
}

/// The same model cut into embedding / blocks 0..1 / blocks 1..3 / head, all forwards
/// then all backwards (GPipe order). With `head_elsewhere` the head lives on a second
/// backend instance and activations and gradients cross through the host.
fn staged(head_elsewhere: bool) -> (Vec<Vec<u32>>, Grads, Vec<f32>) {
    let be = CpuBackend::new();
    let be2 = CpuBackend::new();
    let mut s = model(&be).into_stages(&[0..1, 1..3]).unwrap();
    let head_be = if head_elsewhere { &be2 } else { &be };
    if head_elsewhere {
        move_to_backend(&mut s.head, head_be).unwrap();
    }
    let mut losses = Vec::new();
    for i in 0..MICRO_BATCHES {
        let mb = MicroBatch(i);
        let (ids, tg) = batch(&be, i);
        let mut x = s.embedding.forward(mb, &ids).unwrap();
        for stage in &mut s.blocks {
            x = stage.forward(mb, &x).unwrap();
        }
        let x = copy_to_backend(&x, head_be).unwrap();
        let tg = copy_to_backend(&tg, head_be).unwrap();
        losses.push(bits(&s.head.forward_loss(mb, &x, &tg).unwrap()));
    }
    for i in 0..MICRO_BATCHES {
        let mb = MicroBatch(i);
        let mut dx = copy_to_backend(&s.head.backward(mb, DLOSS).unwrap(), &be).unwrap();
        for stage in s.blocks.iter_mut().rev() {
            dx = stage.backward(mb, &dx).unwrap();
        }
        s.embedding.backward(mb, &dx).unwrap();
    }
    assert!(s.head.in_flight().is_empty());
    sum_tied_grads(&mut s.embedding, &mut s.head).unwrap();
    let head_wte = s.head.wte.grad.to_vec_f32().unwrap();
    let mut grads = HashMap::new();
    let mut add = |p: &brrr_nn::Param<CpuBackend>| {
        let old = grads.insert(p.name.clone(), p.grad.to_vec_f32().unwrap());
        assert!(old.is_none(), "{} appears twice", p.name);
    };
    s.embedding.params().into_iter().for_each(&mut add);
    s.blocks.iter().flat_map(|b| b.params()).for_each(&mut add);
    // The head's wte copy is compared separately; it must equal the embedding's.
    s.head.params().into_iter().skip(1).for_each(&mut add);
    (losses, grads, head_wte)
}

fn compare(head_elsewhere: bool) {
    let (l_whole, g_whole) = whole();
    let (l_staged, g_staged, head_wte) = staged(head_elsewhere);
    assert_eq!(l_whole, l_staged, "losses must be bitwise equal");
    assert_eq!(g_whole.len(), g_staged.len(), "every parameter once");
    for (name, g) in &g_whole {
        let s = &g_staged[name];
        assert!(g.iter().any(|&v| v != 0.0), "{name}: zero gradient");
        if name == "wte.weight" {
            // Per element the whole model adds head, embedding, head, embedding
            // contributions in micro-batch order; the stages add the embedding's, then
            // the head's sum: a different rounding order, so equal to 1e-6, not bitwise.
            let scale = g.iter().map(|x| x.abs()).fold(0.0, f32::max);
            let err = g
                .iter()
                .zip(s)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max)
                / scale;
            eprintln!("wte.weight: staged vs whole, max difference / max |g| = {err:e}");
            assert!(err < 1e-6, "wte.weight: {err:e}");
            let same: Vec<u32> = s.iter().map(|x| x.to_bits()).collect();
            let head: Vec<u32> = head_wte.iter().map(|x| x.to_bits()).collect();
            assert_eq!(
                same, head,
                "both copies of the tied gradient are the same sum"
            );
        } else {
            let (a, b): (Vec<u32>, Vec<u32>) = (
                g.iter().map(|x| x.to_bits()).collect(),
                s.iter().map(|x| x.to_bits()).collect(),
            );
            assert_eq!(a, b, "{name}: gradient must be bitwise equal");
        }
    }
}

#[test]
fn stages_on_one_backend_match_the_whole_model() {
    compare(false);
}

#[test]
fn head_on_a_second_backend_matches_the_whole_model() {
    compare(true);
}

#[test]
fn stage_parameters_are_the_whole_models() {
    let be = CpuBackend::new();
    let names: Vec<String> = model(&be).params().iter().map(|p| p.name.clone()).collect();
    let s = model(&be).into_stages(&[0..2, 2..3]).unwrap();
    assert_eq!(s.blocks[1].layers(), 2..3);
    let mut staged: Vec<String> = s
        .embedding
        .params()
        .iter()
        .map(|p| p.name.clone())
        .collect();
    for b in &s.blocks {
        staged.extend(b.params().iter().map(|p| p.name.clone()));
    }
    staged.extend(s.head.params().iter().skip(1).map(|p| p.name.clone()));
    assert_eq!(names, staged);
    assert_eq!(s.head.params()[0].name, "wte.weight", "the tied copy");
}

#[test]
fn bad_stage_ranges_are_an_error() {
    let be = CpuBackend::new();
    // (start, end) pairs: gaps, short of n_layer, not from 0, beyond n_layer.
    let cases: [&[(usize, usize)]; 4] =
        [&[(0, 1), (2, 3)], &[(0, 2)], &[(1, 3)], &[(0, 2), (2, 4)]];
    for case in cases {
        let ranges: Vec<_> = case.iter().map(|&(a, b)| a..b).collect();
        let e = model(&be).into_stages(&ranges).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("into_stages")), "{ranges:?}");
    }
    // An empty range is a stage without blocks.
    let s = model(&be).into_stages(&[0..0, 0..3]).unwrap();
    assert!(s.blocks[0].h.is_empty());
}
