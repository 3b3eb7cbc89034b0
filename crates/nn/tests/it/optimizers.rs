//! AdamW with 8-bit moments and with GaLore against plain AdamW on one small GPT: the
//! state each keeps (measured on the backend, against `Optimizer::state_bytes`), and
//! that each trains about as well.
#![cfg(not(target_arch = "wasm32"))]

use brrr_backend::DType;
use brrr_cpu::CpuBackend;
use brrr_nn::{AdamW, AdamWConfig, GaLoreConfig, Gpt, GptConfig, Module, MomentState, Optimizer};
use brrr_tensor::Tensor;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 128,
        block_size: 16,
        n_layer: 2,
        n_head: 2,
        n_embd: 64,
    }
}

/// Losses over `steps` steps of one repeated batch with `optimizer`, and the optimizer.
fn train(optimizer: Optimizer, steps: usize) -> (Vec<f64>, AdamW<CpuBackend>, Gpt<CpuBackend>) {
    let be = CpuBackend::new();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut gpt = Gpt::new(&be, config(), DType::F32, &mut rng).unwrap();
    let mut opt = AdamW::new(AdamWConfig {
        optimizer,
        ..AdamWConfig::default()
    });
    let (b, t) = (4, 16);
    let ids: Vec<u32> = (0..(b * t) as u32).map(|i| (i * 37 + 5) % 128).collect();
    let targets: Vec<i32> = ids.iter().map(|&i| ((i * 3 + 1) % 128) as i32).collect();
    let ids = Tensor::from_u32(&be, &ids, [b, t]).unwrap();
    let targets = Tensor::from_i32(&be, &targets, [b, t]).unwrap();
    let mut losses = Vec::new();
    for _ in 0..steps {
        gpt.zero_grad().unwrap();
        let loss = gpt.forward_loss(&ids, &targets).unwrap();
        losses.push(loss.mean_all().unwrap().to_scalar_f64().unwrap());
        gpt.backward(1.0 / (b * t) as f32).unwrap();
        opt.step(gpt.params_mut(), 3e-3, 1.0).unwrap();
    }
    (losses, opt, gpt)
}

#[test]
fn eight_bit_moments_train_like_f32_ones_in_a_quarter_of_the_memory() {
    let (f32_losses, f32_opt, _) = train(Optimizer::AdamW, 30);
    let (q_losses, q_opt, gpt) = train(Optimizer::AdamW8bit, 30);
    // Both learn the batch; the 8-bit run's losses stay within 2% of the f32 run's.
    assert!(f32_losses[29] < 0.5 * f32_losses[0], "{f32_losses:?}");
    for (a, b) in f32_losses.iter().zip(&q_losses) {
        assert!((a - b).abs() <= 0.02 * a, "f32 {a} vs 8-bit {b}");
    }
    // Which parameters were quantised: those of MIN_8BIT_NUMEL elements or more.
    let mut quantised = 0;
    for (p, s) in gpt.params().iter().zip(&q_opt.moments) {
        let n = p.value.elem_count();
        let is_q = matches!(s, MomentState::Bits8 { .. });
        assert_eq!(is_q, n >= brrr_nn::MIN_8BIT_NUMEL, "{}", p.name);
        assert_eq!(
            s.bytes(),
            Optimizer::AdamW8bit.state_bytes(&p.name, p.value.dims()),
            "{}",
            p.name
        );
        quantised += usize::from(is_q);
    }
    assert!(quantised >= 5, "{quantised} quantised parameters");
    // The whole state: a quarter of AdamW's and a little (one absmax per 2048 values,
    // the small parameters' f32 moments).
    let ratio = q_opt.state_bytes() as f64 / f32_opt.state_bytes() as f64;
    assert!((0.25..0.30).contains(&ratio), "8-bit / f32 state = {ratio}");
}

#[test]
fn galore_projects_the_block_matrices_and_keeps_the_predicted_state() {
    let galore = Optimizer::GaLore(GaLoreConfig {
        rank: 8,
        update_every: 10,
        scale: 0.25,
    });
    let (losses, opt, gpt) = train(galore, 30);
    assert!(losses[29] < 0.6 * losses[0], "{losses:?}");
    let mut projected = Vec::new();
    for (p, s) in gpt.params().iter().zip(&opt.moments) {
        if matches!(s, MomentState::Projected(_)) {
            projected.push(p.name.clone());
        }
        assert_eq!(
            s.bytes(),
            galore.state_bytes(&p.name, p.value.dims()),
            "{}",
            p.name
        );
    }
    // Every attention and MLP matrix of both blocks (c_attn, c_proj, c_fc, mlp c_proj),
    // never the embeddings.
    assert_eq!(projected.len(), 8, "{projected:?}");
    assert!(
        projected
            .iter()
            .all(|n| !n.starts_with("wte") && !n.starts_with("wpe"))
    );
    // Three refreshes (steps 1, 11, 21) per projected matrix.
    assert_eq!(opt.svd_time().0, 3 * 8);
    // Less state than AdamW's 8 bytes per parameter.
    assert!(opt.state_bytes() < 8 * param_count(&gpt));
}

fn param_count(gpt: &Gpt<CpuBackend>) -> usize {
    gpt.params().iter().map(|p| p.value.elem_count()).sum()
}

#[test]
fn optimizer_names_parse_and_print_back() {
    for s in ["adamw", "adamw8bit", "galore:64:200", "galore:8:10"] {
        let o: Optimizer = s.parse().unwrap();
        assert_eq!(o.to_string(), s);
    }
    let o: Optimizer = "galore:16".parse().unwrap();
    assert_eq!(o.to_string(), "galore:16:200");
    for bad in [
        "adam",
        "galore",
        "galore:0",
        "galore:x",
        "galore:4:0",
        "galore:4:5:6",
    ] {
        let e = bad.parse::<Optimizer>().unwrap_err();
        assert!(
            e.contains("galore") || e.contains("optimizer"),
            "{bad}: {e}"
        );
    }
}
