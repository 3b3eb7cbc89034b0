//! Attention and the MLP are built from [`LinearLayer`]s and read their widths from
//! them, so a head-sharded layer (Megatron-LM's tensor parallelism, Shoeybi et al. 2019,
//! §3) is built from the same code: here from slices of a full layer's weights.

use brrr_cpu::CpuBackend;
use brrr_nn::{CausalSelfAttention, DType, Linear, LinearLayer, MicroBatch, Mlp, Module, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const F64: DType = DType::F64;
const MB: MicroBatch = MicroBatch(0);
const C: usize = 8;
const HEADS: usize = 4;
const D: usize = C / HEADS;

fn host(t: &Tensor<CpuBackend>) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

fn random(rng: &mut ChaCha8Rng, dims: &[usize]) -> Tensor<CpuBackend> {
    let n = dims.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    Tensor::from_f64(&CpuBackend::new(), &v, dims.to_vec(), F64).unwrap()
}

/// Rows `rows` of a `[r, c]` host matrix, flattened.
fn take_rows(m: &[f64], cols: usize, rows: &[usize]) -> Vec<f64> {
    rows.iter()
        .flat_map(|&r| m[r * cols..(r + 1) * cols].iter().copied())
        .collect()
}

/// Columns `cols` of a `[r, c]` host matrix, flattened row-major.
fn take_cols(m: &[f64], n_cols: usize, cols: &[usize]) -> Vec<f64> {
    m.chunks(n_cols)
        .flat_map(|row| cols.iter().map(move |&c| row[c]))
        .collect()
}

fn tensor(v: &[f64], dims: &[usize]) -> Tensor<CpuBackend> {
    Tensor::from_f64(&CpuBackend::new(), v, dims.to_vec(), F64).unwrap()
}

/// Largest `|a − b|` relative to the largest `|a|`.
fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = a.iter().map(|x| x.abs()).fold(1e-300, f64::max);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
        / scale
}

/// The full layer with every weight and bias random (non-zero biases matter here).
fn full_attention(rng: &mut ChaCha8Rng) -> CausalSelfAttention<CpuBackend> {
    let mut a =
        CausalSelfAttention::new(&CpuBackend::new(), "attn", C, HEADS, 0.3, F64, rng).unwrap();
    for p in a.params_mut() {
        p.value = random(rng, p.value.dims());
    }
    a
}

/// The shard holding heads `heads`: a column-parallel `c_attn` (the q, k and v rows of
/// those heads) and a row-parallel `c_proj` (their input columns). Only shard 0 keeps
/// `c_proj`'s bias, which a row-parallel layer adds once, after the sum over shards.
fn shard(
    full: &CausalSelfAttention<CpuBackend>,
    heads: std::ops::Range<usize>,
    keep_bias: bool,
) -> CausalSelfAttention<CpuBackend> {
    let p = full.params();
    let (w_attn, b_attn, w_proj, b_proj) = (
        host(&p[0].value),
        host(&p[1].value),
        host(&p[2].value),
        host(&p[3].value),
    );
    let local: Vec<usize> = (heads.start * D..heads.end * D).collect();
    // c_attn's output is [q | k | v], each C wide with head h at columns h·D..(h+1)·D.
    let rows: Vec<usize> = (0..3)
        .flat_map(|part| local.iter().map(move |&j| part * C + j))
        .collect();
    let w = local.len();
    let c_attn = Linear::from_weights(
        "attn.c_attn",
        tensor(&take_rows(&w_attn, C, &rows), &[3 * w, C]),
        Some(tensor(&take_rows(&b_attn, 1, &rows), &[3 * w])),
    )
    .unwrap();
    let bias = if keep_bias { b_proj } else { vec![0.0; C] };
    let c_proj = Linear::from_weights(
        "attn.c_proj",
        tensor(&take_cols(&w_proj, C, &local), &[C, w]),
        Some(tensor(&bias, &[C])),
    )
    .unwrap();
    CausalSelfAttention::from_parts(Box::new(c_attn), Box::new(c_proj), D).unwrap()
}

/// Two shards of two heads each, summed, are the full four-head layer: forward output,
/// input gradient, and each shard's parameter gradients are the matching slices of the
/// full layer's (f64; the sums run in a different order, so to 1e-12, not bitwise).
#[test]
fn head_sharded_attention_sums_to_the_full_layer() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut full = full_attention(&mut rng);
    let mut shards = [shard(&full, 0..2, true), shard(&full, 2..4, false)];
    assert_eq!(full.n_head(), 4);
    assert_eq!(shards[0].n_head(), 2, "heads come from c_attn's width");
    let x = random(&mut rng, &[2, 5, C]);
    let dy = random(&mut rng, &[2, 5, C]);

    let y_full = host(&full.forward(MB, &x).unwrap());
    let mut y_sum = vec![0.0; y_full.len()];
    for s in &mut shards {
        for (acc, v) in y_sum.iter_mut().zip(host(&s.forward(MB, &x).unwrap())) {
            *acc += v;
        }
    }
    let err = rel_diff(&y_full, &y_sum);
    assert!(err < 1e-12, "forward: {err:e}");

    let dx_full = host(&full.backward(MB, &dy).unwrap());
    let mut dx_sum = vec![0.0; dx_full.len()];
    for s in &mut shards {
        for (acc, v) in dx_sum.iter_mut().zip(host(&s.backward(MB, &dy).unwrap())) {
            *acc += v;
        }
    }
    let err = rel_diff(&dx_full, &dx_sum);
    assert!(err < 1e-12, "input gradient: {err:e}");

    // Each shard's gradients are slices of the full layer's.
    let g: Vec<Vec<f64>> = full.params().iter().map(|p| host(&p.grad)).collect();
    for (s, heads) in shards.iter().zip([0..2usize, 2..4]) {
        let local: Vec<usize> = (heads.start * D..heads.end * D).collect();
        let rows: Vec<usize> = (0..3)
            .flat_map(|part| local.iter().map(move |&j| part * C + j))
            .collect();
        let sg: Vec<Vec<f64>> = s.params().iter().map(|p| host(&p.grad)).collect();
        let checks = [
            ("c_attn.weight", take_rows(&g[0], C, &rows), &sg[0]),
            ("c_attn.bias", take_rows(&g[1], 1, &rows), &sg[1]),
            ("c_proj.weight", take_cols(&g[2], C, &local), &sg[2]),
            ("c_proj.bias", g[3].clone(), &sg[3]),
        ];
        for (name, want, got) in checks {
            let err = rel_diff(&want, got);
            assert!(err < 1e-12, "heads {heads:?}: {name} gradient {err:e}");
        }
    }
}

#[test]
fn mismatched_projections_are_an_error() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let be = CpuBackend::new();
    let lin = |i, o, rng: &mut ChaCha8Rng| -> Box<dyn LinearLayer<CpuBackend>> {
        Box::new(Linear::new(&be, "l", i, o, true, 0.02, F64, rng).unwrap())
    };
    // c_attn's width is not 3·heads·head_dim.
    let (a, p) = (lin(8, 20, &mut rng), lin(4, 8, &mut rng));
    assert!(CausalSelfAttention::from_parts(a, p, 2).is_err());
    // c_proj reads 6 features but attention produces 2 heads × 2 = 4.
    let (a, p) = (lin(8, 12, &mut rng), lin(6, 8, &mut rng));
    let e = CausalSelfAttention::from_parts(a, p, 2)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("c_proj"), "{e}");
    // The MLP's inner widths must agree.
    let (f, p) = (lin(8, 32, &mut rng), lin(16, 8, &mut rng));
    assert!(Mlp::from_parts(f, p).is_err());
}
