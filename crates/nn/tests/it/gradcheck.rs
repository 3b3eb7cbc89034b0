//! Finite-difference gradient checks of every layer, in f64 on the CPU backend, and
//! the gradient-accumulation equivalence.

use brrr_cpu::CpuBackend;
use brrr_nn::gradcheck::{max_rel_error, numeric_grad, probe_indices};
use brrr_nn::{
    Block, CausalSelfAttention, DType, Embedding, Gelu, Gpt, GptConfig, LayerNorm, Linear,
    MicroBatch, Mlp, Module, Param, Result, Tensor,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const F64: DType = DType::F64;
/// The layers' checks run one micro-batch at a time.
const MB: MicroBatch = MicroBatch(0);
/// Central differences in f64 with h = 1e-5 agree with a correct gradient to ~1e-7.
const TOL: f64 = 1e-5;

fn cpu() -> CpuBackend {
    CpuBackend::new()
}

fn rand_vec(rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

fn host(t: &Tensor<CpuBackend>) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

/// Checks a layer `y = layer(x)` through the scalar `L = Σ y ⊙ r` with random `r`:
/// the input gradient (if `check_input`) and every parameter gradient, at probed
/// coordinates.
fn check<L>(
    name: &str,
    layer: &mut L,
    x: &Tensor<CpuBackend>,
    check_input: bool,
    forward: impl Fn(&mut L, &Tensor<CpuBackend>) -> Result<Tensor<CpuBackend>>,
    backward: impl Fn(&mut L, &Tensor<CpuBackend>) -> Result<Option<Tensor<CpuBackend>>>,
    params: impl Fn(&mut L) -> Vec<&mut Param<CpuBackend>>,
) {
    let b = cpu();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let y = forward(layer, x).unwrap();
    let r = Tensor::from_f64(
        &b,
        &rand_vec(&mut rng, y.elem_count()),
        y.shape().clone(),
        F64,
    )
    .unwrap();
    let r_host = host(&r);
    for p in params(layer) {
        p.zero_grad().unwrap();
    }
    let dx = backward(layer, &r).unwrap();
    let loss_at = |layer: &mut L, x: &Tensor<CpuBackend>| -> f64 {
        let y = host(&forward(layer, x).unwrap());
        y.iter().zip(&r_host).map(|(a, b)| a * b).sum()
    };

    if check_input {
        let dx = host(&dx.expect("layer returns an input gradient"));
        let x0 = host(x);
        let idx = probe_indices(x0.len(), 24);
        let num = numeric_grad(
            &mut |v: &[f64]| {
                let xt = Tensor::from_f64(&b, v, x.shape().clone(), F64).unwrap();
                loss_at(layer, &xt)
            },
            &x0,
            &idx,
            1e-5,
        );
        let ana: Vec<f64> = idx.iter().map(|&i| dx[i]).collect();
        let err = max_rel_error(&ana, &num, 1e-6);
        assert!(
            err < TOL,
            "{name}: input gradient rel error {err:e}\nanalytic {ana:?}\nnumeric  {num:?}"
        );
    }

    let n_params = params(layer).len();
    for pi in 0..n_params {
        let (pname, shape, p0, grad) = {
            let p = &params(layer)[pi];
            (
                p.name.clone(),
                p.value.shape().clone(),
                host(&p.value),
                host(&p.grad),
            )
        };
        let idx = probe_indices(p0.len(), 12);
        let num = numeric_grad(
            &mut |v: &[f64]| {
                params(layer)[pi].value = Tensor::from_f64(&b, v, shape.clone(), F64).unwrap();
                loss_at(layer, x)
            },
            &p0,
            &idx,
            1e-5,
        );
        params(layer)[pi].value = Tensor::from_f64(&b, &p0, shape.clone(), F64).unwrap();
        let ana: Vec<f64> = idx.iter().map(|&i| grad[i]).collect();
        let err = max_rel_error(&ana, &num, 1e-6);
        assert!(
            err < TOL,
            "{name}: gradient of {pname} rel error {err:e}\nanalytic {ana:?}\nnumeric  {num:?}"
        );
    }
}

fn input(shape: &[usize], seed: u64) -> Tensor<CpuBackend> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = shape.iter().product();
    Tensor::from_f64(&cpu(), &rand_vec(&mut rng, n), shape.to_vec(), F64).unwrap()
}

#[test]
fn linear() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut l = Linear::new(&cpu(), "fc", 5, 7, true, 0.5, F64, &mut rng).unwrap();
    // Biases start at zero; make them non-trivial.
    l.bias.as_mut().unwrap().value = input(&[7], 11);
    check(
        "Linear",
        &mut l,
        &input(&[2, 3, 5], 2),
        true,
        |l, x| l.forward(MB, x),
        |l, dy| l.backward(MB, dy).map(Some),
        |l| l.params_mut(),
    );
}

#[test]
fn embedding() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut e = Embedding::new(&cpu(), "wte", 6, 4, 0.5, F64, &mut rng).unwrap();
    // Repeated ids exercise the scatter-add.
    let ids = Tensor::from_u32(&cpu(), &[1, 5, 1, 0, 3, 1], [2, 3]).unwrap();
    check(
        "Embedding",
        &mut e,
        &ids,
        false,
        |e, x| e.forward(MB, x),
        |e, dy| e.backward(MB, dy).map(|_| None),
        |e| e.params_mut(),
    );
}

#[test]
fn layernorm() {
    let mut ln = LayerNorm::new(&cpu(), "ln", 9, F64).unwrap();
    ln.gamma.value = input(&[9], 3);
    ln.beta.value = input(&[9], 4);
    check(
        "LayerNorm",
        &mut ln,
        &input(&[4, 9], 5),
        true,
        |l, x| l.forward(MB, x),
        |l, dy| l.backward(MB, dy).map(Some),
        |l| l.params_mut(),
    );
}

#[test]
fn gelu() {
    let mut g = Gelu::new();
    let x = input(&[3, 11], 6).scale(3.0).unwrap();
    check(
        "Gelu",
        &mut g,
        &x,
        true,
        |g, x| g.forward(MB, x),
        |g, dy| g.backward(MB, dy).map(Some),
        |_| Vec::new(),
    );
}

#[test]
fn causal_self_attention() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let mut a = CausalSelfAttention::new(&cpu(), "attn", 8, 2, 0.3, F64, &mut rng).unwrap();
    // Larger weights give peaked attention, a stronger test of the softmax backward.
    for p in a.params_mut() {
        let n = p.value.elem_count();
        let v: Vec<f64> = rand_vec(&mut rng, n);
        p.value = Tensor::from_f64(&cpu(), &v, p.value.shape().clone(), F64).unwrap();
    }
    check(
        "CausalSelfAttention",
        &mut a,
        &input(&[2, 5, 8], 9),
        true,
        |a, x| a.forward(MB, x),
        |a, dy| a.backward(MB, dy).map(Some),
        |a| a.params_mut(),
    );
}

#[test]
fn mlp() {
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    let mut m = Mlp::new(&cpu(), "mlp", 6, 0.3, F64, &mut rng).unwrap();
    check(
        "Mlp",
        &mut m,
        &input(&[2, 3, 6], 11),
        true,
        |m, x| m.forward(MB, x),
        |m, dy| m.backward(MB, dy).map(Some),
        |m| m.params_mut(),
    );
}

#[test]
fn block() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let mut b = Block::new(&cpu(), "h.0", 8, 2, 0.3, F64, &mut rng).unwrap();
    check(
        "Block",
        &mut b,
        &input(&[2, 4, 8], 13),
        true,
        |b, x| b.forward(MB, x),
        |b, dy| b.backward(MB, dy).map(Some),
        |b| b.params_mut(),
    );
}

fn tiny_config() -> GptConfig {
    GptConfig {
        vocab_size: 11,
        block_size: 6,
        n_layer: 2,
        n_head: 2,
        n_embd: 8,
    }
}

fn batch(b: usize, t: usize, vocab: usize, seed: u64) -> (Vec<u32>, Vec<i32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ids = (0..b * t)
        .map(|_| rng.random_range(0..vocab as u32))
        .collect();
    let tg = (0..b * t)
        .map(|_| rng.random_range(0..vocab as i32))
        .collect();
    (ids, tg)
}

/// [`batch`] uploaded as `[b, t]` id and target tensors.
fn batch_tensors(
    be: &CpuBackend,
    b: usize,
    t: usize,
    vocab: usize,
    seed: u64,
) -> (Tensor<CpuBackend>, Tensor<CpuBackend>) {
    let (ids, tg) = batch(b, t, vocab, seed);
    (
        Tensor::from_u32(be, &ids, [b, t]).unwrap(),
        Tensor::from_i32(be, &tg, [b, t]).unwrap(),
    )
}

/// The whole GPT, loss included: `L = mean cross-entropy`.
#[test]
fn gpt_end_to_end() {
    let be = cpu();
    let cfg = tiny_config();
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let mut gpt = Gpt::new(&be, cfg.clone(), F64, &mut rng).unwrap();
    let (b, t) = (2, 5);
    let (ids, tg) = batch_tensors(&be, b, t, cfg.vocab_size, 15);
    let n = (b * t) as f64;
    gpt.zero_grad().unwrap();
    gpt.forward_loss(&ids, &tg).unwrap();
    gpt.backward((1.0 / n) as f32).unwrap();
    let loss_of = |gpt: &mut Gpt<CpuBackend>| -> f64 {
        let l = host(&gpt.forward_loss(&ids, &tg).unwrap());
        gpt.clear_saved();
        l.iter().sum::<f64>() / n
    };
    // 1/n rounds in f32 (the backward's dloss argument); compare against the same.
    let dloss_rel = ((1.0 / n) as f32 as f64 * n - 1.0).abs();
    let names: Vec<String> = gpt.params().iter().map(|p| p.name.clone()).collect();
    for (pi, pname) in names.iter().enumerate() {
        let (shape, p0, grad) = {
            let p = &gpt.params()[pi];
            (p.value.shape().clone(), host(&p.value), host(&p.grad))
        };
        let idx = probe_indices(p0.len(), 4);
        let num = numeric_grad(
            &mut |v: &[f64]| {
                gpt.params_mut()[pi].value = Tensor::from_f64(&be, v, shape.clone(), F64).unwrap();
                loss_of(&mut gpt)
            },
            &p0,
            &idx,
            1e-5,
        );
        gpt.params_mut()[pi].value = Tensor::from_f64(&be, &p0, shape.clone(), F64).unwrap();
        let ana: Vec<f64> = idx.iter().map(|&i| grad[i]).collect();
        let err = max_rel_error(&ana, &num, 1e-6);
        // The whole model composes many rounding steps: 1e-4 still separates a correct
        // gradient from a wrong one by orders of magnitude.
        assert!(
            err < 1e-4 + dloss_rel * 2.0,
            "GPT: gradient of {pname} rel error {err:e}\n{ana:?}\n{num:?}"
        );
    }
}

/// k micro-batches with loss scale 1/(n·k) give the gradients of one batch k times
/// larger (f32, within rounding), because every backward accumulates.
#[test]
fn gradient_accumulation_matches_large_batch() {
    let be = cpu();
    let cfg = tiny_config();
    let (k, b, t) = (3, 2, 6);
    let (ids, tg) = batch(k * b, t, cfg.vocab_size, 16);
    let make = || {
        Gpt::new(
            &be,
            cfg.clone(),
            DType::F32,
            &mut ChaCha8Rng::seed_from_u64(17),
        )
        .unwrap()
    };

    let mut big = make();
    big.zero_grad().unwrap();
    let ids_t = Tensor::from_u32(&be, &ids, [k * b, t]).unwrap();
    let tg_t = Tensor::from_i32(&be, &tg, [k * b, t]).unwrap();
    big.forward_loss(&ids_t, &tg_t).unwrap();
    big.backward(1.0 / (k * b * t) as f32).unwrap();

    let mut acc = make();
    acc.zero_grad().unwrap();
    for i in 0..k {
        let r = i * b * t..(i + 1) * b * t;
        let ids_t = Tensor::from_u32(&be, &ids[r.clone()], [b, t]).unwrap();
        let tg_t = Tensor::from_i32(&be, &tg[r], [b, t]).unwrap();
        acc.forward_loss(&ids_t, &tg_t).unwrap();
        acc.backward(1.0 / (k * b * t) as f32).unwrap();
    }

    let mut worst = 0.0f64;
    for (p, q) in big.params().iter().zip(acc.params()) {
        let (g1, g2) = (host(&p.grad), host(&q.grad));
        let scale = g1.iter().map(|x| x.abs()).fold(0.0, f64::max).max(1e-12);
        let err = g1
            .iter()
            .zip(&g2)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max)
            / scale;
        assert!(
            g1.iter().any(|&x| x != 0.0),
            "{}: gradient is all zeros",
            p.name
        );
        assert!(
            err < 1e-4,
            "{}: accumulated gradient differs by {err:e} (relative to max)",
            p.name
        );
        worst = worst.max(err);
    }
    // And it is not trivially equal to a single micro-batch's gradient.
    let mut single = make();
    single.zero_grad().unwrap();
    let ids_t = Tensor::from_u32(&be, &ids[..b * t], [b, t]).unwrap();
    let tg_t = Tensor::from_i32(&be, &tg[..b * t], [b, t]).unwrap();
    single.forward_loss(&ids_t, &tg_t).unwrap();
    single.backward(1.0 / (b * t) as f32).unwrap();
    let g1 = host(&big.params()[0].grad);
    let g3 = host(&single.params()[0].grad);
    let diff = g1
        .iter()
        .zip(&g3)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(
        diff > 1e-4,
        "a single micro-batch should differ from the full batch"
    );
    eprintln!("gradient accumulation: worst relative difference {worst:e}");
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let be = cpu();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut l = Linear::new(&be, "fc", 5, 7, true, 0.02, DType::F32, &mut rng).unwrap();
    let x = Tensor::zeros(&be, [3, 4], DType::F32).unwrap();
    let e = l.forward(MB, &x).unwrap_err().to_string();
    assert!(e.contains("fc.weight") && e.contains("[3, 4]"), "{e}");
    let e = l.backward(MB, &x).unwrap_err().to_string();
    assert!(e.contains("before forward"), "{e}");
    let cfg = GptConfig {
        n_embd: 10,
        n_head: 3,
        ..tiny_config()
    };
    assert!(Gpt::new(&be, cfg, DType::F32, &mut rng).is_err());
    let mut gpt = Gpt::new(&be, tiny_config(), DType::F32, &mut rng).unwrap();
    let long = Tensor::from_u32(&be, &[0; 14], [2, 7]).unwrap();
    let e = gpt.forward(&long).unwrap_err().to_string();
    assert!(e.contains("block_size"), "{e}");
    let oob = Tensor::from_u32(&be, &[0, 99], [1, 2]).unwrap();
    assert!(gpt.forward(&oob).is_err(), "token id beyond the vocabulary");
}

#[test]
fn parameter_count_matches_the_formula() {
    let be = cpu();
    let cfg = tiny_config();
    let gpt = Gpt::new(
        &be,
        cfg.clone(),
        DType::F32,
        &mut ChaCha8Rng::seed_from_u64(1),
    )
    .unwrap();
    assert_eq!(gpt.num_params(), cfg.num_params());
    // GPT-2 small: 124,475,904 parameters with the padded 50304 vocabulary
    // (124,439,808 with 50257; Radford et al. 2019 report "117M", later corrected to 124M).
    assert_eq!(GptConfig::gpt2_124m().num_params(), 124_475_904);
}

/// `clear_saved` after a forward leaves nothing for a backward: the model's backward
/// reports that no forward ran instead of using stale activations, and each block does
/// too (every layer clears its own saved tensors).
#[test]
fn clear_saved_drops_every_activation() {
    let be = CpuBackend::new();
    let cfg = tiny_config();
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let mut gpt = Gpt::new(&be, cfg.clone(), F64, &mut rng).unwrap();
    let (b, t) = (2, 5);
    let (ids, tg) = batch_tensors(&be, b, t, cfg.vocab_size, 22);
    gpt.forward_loss(&ids, &tg).unwrap();
    gpt.clear_saved();
    let err = gpt.backward(0.1).unwrap_err().to_string();
    assert!(err.contains("before forward"), "{err}");
    let dy =
        Tensor::from_f64(&be, &vec![0.5; b * t * cfg.n_embd], [b, t, cfg.n_embd], F64).unwrap();
    for (i, block) in gpt.h.iter_mut().enumerate() {
        let err = block.backward(MB, &dy).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains("before forward"), "block {i}: {err}");
    }
}

#[test]
fn lora_linear() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let mut base = Linear::new(&cpu(), "fc", 6, 5, true, 0.5, F64, &mut rng).unwrap();
    base.bias.as_mut().unwrap().value = input(&[5], 13);
    let lora = brrr_nn::LoraConfig {
        rank: 3,
        alpha: 6.0,
    };
    let mut l = brrr_nn::LoraLinear::new(Box::new(base), lora, &mut rng).unwrap();
    // B starts at zero, which would hide A's gradient: give it values.
    for p in l.params_mut() {
        if p.name.ends_with(".lora_b") {
            p.value = input(&[5, 3], 14);
        }
    }
    check(
        "LoraLinear",
        &mut l,
        &input(&[2, 4, 6], 15),
        true,
        |l, x| brrr_nn::LinearLayer::forward(l, MB, x),
        |l, dy| brrr_nn::LinearLayer::backward(l, MB, dy).map(Some),
        |l| {
            l.params_mut()
                .into_iter()
                .filter(|p| brrr_nn::lora::is_adapter(&p.name))
                .collect()
        },
    );
    // The frozen weight's and bias's gradients were never computed.
    for p in l.params() {
        if !brrr_nn::lora::is_adapter(&p.name) {
            assert!(host(&p.grad).iter().all(|&g| g == 0.0), "{}", p.name);
        }
    }
}
