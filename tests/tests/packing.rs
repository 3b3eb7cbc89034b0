//! Document masking on every backend present: the segmented softmax against brrr-cpu,
//! and a GPT on packed rows (positions restarting at each document, attention masked at
//! document boundaries) giving, position for position, the losses of the documents run
//! one by one, and the gradients of their sum.
#![cfg(not(target_arch = "wasm32"))]

use brrr::nn::{Gpt, GptConfig, MicroBatch, Module};
use brrr::tensor::Tensor;
use brrr_backend::{Backend, DType};
use brrr_conformance::{
    CpuBackend, SuiteOptions, assert_all_passed, backend_absent, report, run_suite,
};
use brrr_data::pack::{PackedBatch, pack_documents};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const OPS: [&str; 3] = ["softmax_segmented", "attention", "attention_backward"];

fn wgpu() -> Option<brrr_wgpu::WgpuBackend> {
    match brrr_wgpu::WgpuBackend::new_blocking() {
        Ok(g) => Some(g),
        Err(e) => {
            backend_absent("wgpu", e.to_string(), "BRRR_REQUIRE_WGPU");
            None
        }
    }
}

fn cuda_emu() -> Option<brrr_cuda::CudaBackend> {
    if !brrr_cuda::emu::compiler_available() {
        brrr_backend::skip::report_skipped(
            "cuda-emu",
            "no C++ compiler to build the kernel emulator",
        );
        return None;
    }
    Some(brrr_cuda::CudaBackend::emulated().expect("building the CUDA kernel emulator"))
}

fn config() -> GptConfig {
    GptConfig {
        vocab_size: 61,
        block_size: 32,
        n_layer: 2,
        n_head: 2,
        n_embd: 32,
    }
}

/// Documents of varied lengths, some longer than a row (they are split).
fn documents() -> Vec<Vec<u32>> {
    let mut x: u32 = 17;
    [9usize, 5, 14, 3, 31, 7, 2, 12]
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) % 61
                })
                .collect()
        })
        .collect()
}

struct Compared {
    /// Largest |packed - separate| loss over all positions, relative to the loss.
    loss: f64,
    /// Largest gradient difference relative to the largest gradient entry.
    grad: f64,
    positions: usize,
}

/// The packed batch's per-position losses and gradients against each document piece
/// run alone.
fn packed_against_separate<B: Backend>(backend: &B) -> Compared {
    let seq = 24;
    let p: PackedBatch = pack_documents(&documents(), seq).unwrap();
    let mut model = Gpt::new(
        backend,
        config(),
        DType::F32,
        &mut ChaCha8Rng::seed_from_u64(5),
    )
    .unwrap();
    let up = |v: &[u32], rows, cols| Tensor::from_u32(backend, v, [rows, cols]).unwrap();
    let ids = up(&p.inputs, p.rows, seq);
    let targets = Tensor::from_i32(backend, &p.targets, [p.rows, seq]).unwrap();
    let (pos, seg) = (up(&p.positions, p.rows, seq), up(&p.segments, p.rows, seq));
    let mb = MicroBatch::default();
    let packed = model
        .forward_loss_packed_mb(mb, &ids, &targets, &pos, &seg)
        .unwrap()
        .to_vec_f64()
        .unwrap();
    model.backward_mb(mb, 1.0).unwrap();
    let g_packed: Vec<Vec<f64>> = model
        .params()
        .iter()
        .map(|q| q.grad.to_vec_f64().unwrap())
        .collect();
    for q in model.params_mut() {
        q.zero_grad().unwrap();
    }

    // Each piece alone, the pieces in the order pack_documents cut them.
    let pieces = brrr_data::pack::split_long(&documents(), seq);
    let (mut worst, mut positions) = (0.0f64, 0);
    for (piece, &(row, start, n)) in pieces.iter().zip(&p.placements) {
        let ids = up(&piece[..n], 1, n);
        let t: Vec<i32> = piece[1..].iter().map(|&x| x as i32).collect();
        let targets = Tensor::from_i32(backend, &t, [1, n]).unwrap();
        let alone = model
            .forward_loss(&ids, &targets)
            .unwrap()
            .to_vec_f64()
            .unwrap();
        model.backward(1.0).unwrap();
        for k in 0..n {
            let want = alone[k];
            let got = packed[row * seq + start + k];
            worst = worst.max((got - want).abs() / want.abs().max(1e-3));
            positions += 1;
        }
    }
    // Padding contributes nothing.
    for (i, &t) in p.targets.iter().enumerate() {
        if t < 0 {
            assert_eq!(packed[i], 0.0, "padding slot {i} has a loss");
        }
    }
    let mut gworst = 0.0f64;
    for (q, gp) in model.params().iter().zip(&g_packed) {
        let gs = q.grad.to_vec_f64().unwrap();
        let scale = gs.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
        for (a, b) in gp.iter().zip(&gs) {
            gworst = gworst.max((a - b).abs() / scale);
        }
    }
    Compared {
        loss: worst,
        grad: gworst,
        positions,
    }
}

fn check<B: Backend>(name: &str, backend: &B) {
    let c = packed_against_separate(backend);
    eprintln!(
        "{name}: packed vs separate over {} positions: loss rel. diff {:.2e}, grad rel. diff {:.2e}",
        c.positions, c.loss, c.grad
    );
    assert_eq!(
        c.positions,
        documents().iter().map(|d| d.len() - 1).sum::<usize>()
    );
    assert!(
        c.loss < 1e-5,
        "{name}: packed losses differ from separate ones by {}",
        c.loss
    );
    assert!(
        c.grad < 1e-5,
        "{name}: packed gradients differ by {}",
        c.grad
    );
}

#[test]
fn packed_gpt_equals_documents_one_by_one_on_cpu() {
    check("cpu", &CpuBackend::new());
}

#[test]
fn packed_gpt_equals_documents_one_by_one_on_wgpu() {
    let Some(g) = wgpu() else { return };
    let results = run_suite(
        &g,
        &CpuBackend::new(),
        &SuiteOptions::all(&[DType::F32, DType::F16]).only(&OPS),
    );
    eprintln!("{}", report(&results));
    assert_all_passed("wgpu", &results);
    check("wgpu", &g);
}

#[test]
fn packed_gpt_equals_documents_one_by_one_on_cuda_emulator() {
    let Some(g) = cuda_emu() else { return };
    let dtypes = [DType::F32, DType::F16, DType::BF16, DType::F64];
    // Small shapes only, as the emulator's full suite (`tests/cuda.rs`): it runs every
    // GPU thread one after another on the CPU, and the large cases took minutes.
    let opts = SuiteOptions {
        large: false,
        ..SuiteOptions::all(&dtypes)
    };
    let results = run_suite(&g, &CpuBackend::new(), &opts.only(&OPS));
    eprintln!("{}", report(&results));
    assert_all_passed("cuda-emu", &results);
    check("cuda-emu", &g);
}

#[test]
fn packed_gpt_equals_documents_one_by_one_on_cuda() {
    let g = match brrr_cuda::CudaBackend::new(0) {
        Ok(g) => g,
        Err(e) => return backend_absent("cuda", e.to_string(), "BRRR_REQUIRE_CUDA"),
    };
    let dtypes = [DType::F32, DType::F16, DType::BF16];
    let results = run_suite(
        &g,
        &CpuBackend::new(),
        &SuiteOptions::all(&dtypes).only(&OPS),
    );
    eprintln!("{}", report(&results));
    assert_all_passed("cuda", &results);
    check("cuda", &g);
}
