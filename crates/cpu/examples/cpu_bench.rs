//! Prints the CPU backend's throughput: GEMM in every dtype, and the row-wise kernels
//! at GPT-2-small sizes. Run with `cargo run --release -p brrr-cpu --example cpu_bench`.
//! (Benchmarks print tables; they never assert timings.)

use brrr_backend::{Backend, DType, GemmSpec, HostData, LayerNormSpec, SoftmaxSpec};
use brrr_cpu::{CpuBackend, CpuBuffer};
use std::time::Instant;

/// Seconds per call: one warm-up, then repeats until about half a second has passed.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let (start, mut n) = (Instant::now(), 0u32);
    while n < 3 || start.elapsed().as_secs_f64() < 0.5 {
        f();
        n += 1;
    }
    start.elapsed().as_secs_f64() / f64::from(n)
}

fn buf(dtype: DType, n: usize) -> CpuBuffer {
    let h = HostData::from_f64(
        dtype,
        &(0..n)
            .map(|i| ((i * 7919) % 1000) as f64 / 1000.0 - 0.5)
            .collect::<Vec<_>>(),
    );
    CpuBackend::new().upload(&h).unwrap()
}

fn main() {
    let cpu = CpuBackend::new();
    println!("{}", cpu.info().device);
    println!("\nGEMM C = A·B (square), GFLOP/s");
    println!(
        "{:>6} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "n", "f32", "bf16", "f16", "f64", "f32 A·Bᵀ"
    );
    for n in [256, 512, 1024, 2048] {
        let mut row = format!("{n:>6}");
        for (dtype, tb) in [
            (DType::F32, false),
            (DType::BF16, false),
            (DType::F16, false),
            (DType::F64, false),
            (DType::F32, true),
        ] {
            let spec = GemmSpec::new(n, n, n).trans_b(tb);
            let (a, b, mut c) = (buf(dtype, n * n), buf(dtype, n * n), buf(dtype, n * n));
            let s = time(|| cpu.gemm(&spec, &a, &b, &mut c).unwrap());
            row += &format!(
                " {:>8.1}",
                spec.flops().expect("benchmark sizes fit u64") as f64 / s / 1e9
            );
        }
        println!("{row}");
    }

    // GPT-2 small shapes: batch 8 × 256 tokens, 12 heads, d = 768, vocab 50257.
    let (bt, d, heads, t, vocab) = (8 * 256, 768, 12, 256, 50257);
    println!("\nKernels at GPT-2-small sizes (B·T = {bt}), f32, ms per call");
    let att = GemmSpec::batched(8 * heads, t, t, d / heads).trans_b(true);
    let (q, k, mut s) = (
        buf(DType::F32, 8 * t * d),
        buf(DType::F32, 8 * t * d),
        buf(DType::F32, 8 * heads * t * t),
    );
    let sec = time(|| cpu.gemm(&att, &q, &k, &mut s).unwrap());
    println!(
        "{:<40} {:>8.2} ms ({:.0} GFLOP/s)",
        "attention scores Q·Kᵀ (96 × 256×256×64)",
        sec * 1e3,
        att.flops().expect("benchmark sizes fit u64") as f64 / sec / 1e9
    );
    let sm = SoftmaxSpec {
        rows: 8 * heads * t,
        cols: t,
        scale: 0.125,
        causal: true,
    };
    let mut p = buf(DType::F32, 8 * heads * t * t);
    let sec = time(|| cpu.softmax(&sm, &s, &mut p).unwrap());
    println!(
        "{:<40} {:>8.2} ms",
        "causal softmax [24576, 256]",
        sec * 1e3
    );
    let ln = LayerNormSpec {
        rows: bt,
        cols: d,
        eps: 1e-5,
        gamma_offset: 0,
        beta_offset: 0,
    };
    let (x, g) = (buf(DType::F32, bt * d), buf(DType::F32, d));
    let (mut y, mut mu, mut rs) = (
        buf(DType::F32, bt * d),
        buf(DType::F32, bt),
        buf(DType::F32, bt),
    );
    let sec = time(|| {
        cpu.layernorm(&ln, &x, &g, &g, &mut y, &mut mu, &mut rs)
            .unwrap()
    });
    println!("{:<40} {:>8.2} ms", "layernorm [2048, 768]", sec * 1e3);
    let (mut dx, mut dg, mut db) = (
        buf(DType::F32, bt * d),
        buf(DType::F32, d),
        buf(DType::F32, d),
    );
    let sec = time(|| {
        cpu.layernorm_backward(&ln, &x, &x, &g, &mu, &rs, &mut dx, &mut dg, &mut db)
            .unwrap()
    });
    println!(
        "{:<40} {:>8.2} ms",
        "layernorm backward [2048, 768]",
        sec * 1e3
    );
    let (h, mut hy) = (buf(DType::F32, bt * 4 * d), buf(DType::F32, bt * 4 * d));
    let sec = time(|| cpu.gelu(&h, &mut hy).unwrap());
    println!("{:<40} {:>8.2} ms", "gelu [2048, 3072]", sec * 1e3);
    let logits = buf(DType::F32, bt * vocab);
    let targets = HostData::I32((0..bt as i32).map(|i| i * 31 % vocab as i32).collect());
    let targets = cpu.upload(&targets).unwrap();
    let mut losses = buf(DType::F32, bt);
    let sec = time(|| {
        cpu.cross_entropy(&logits, &targets, vocab, &mut losses)
            .unwrap()
    });
    println!(
        "{:<40} {:>8.2} ms",
        "cross-entropy [2048, 50257]",
        sec * 1e3
    );
    let (dl, mut dlogits) = (buf(DType::F32, bt), buf(DType::F32, bt * vocab));
    let sec = time(|| {
        cpu.cross_entropy_backward(&logits, &targets, &dl, vocab, &mut dlogits)
            .unwrap()
    });
    println!(
        "{:<40} {:>8.2} ms",
        "cross-entropy backward [2048, 50257]",
        sec * 1e3
    );
    let lm = GemmSpec::new(bt, vocab, d).trans_b(true);
    let wte = buf(DType::F32, vocab * d);
    let sec = time(|| cpu.gemm(&lm, &x, &wte, &mut dlogits).unwrap());
    println!(
        "{:<40} {:>8.2} ms ({:.0} GFLOP/s)",
        "lm head X·Wᵀ [2048×768]·[768×50257]",
        sec * 1e3,
        lm.flops().expect("benchmark sizes fit u64") as f64 / sec / 1e9
    );
}
