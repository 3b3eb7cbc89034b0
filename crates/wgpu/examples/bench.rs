//! Prints the benchmark tables of `brrr_wgpu::bench` (what `brrr bench` shows):
//!
//! ```text
//! cargo run --release -p brrr-wgpu --example bench            # gemm and overhead
//! cargo run --release -p brrr-wgpu --example bench -- gemm 64,256,1024
//! cargo run --release -p brrr-wgpu --example bench -- overhead
//! cargo run --release -p brrr-wgpu --example bench -- upload 4096,65536,262144
//! cargo run --release -p brrr-wgpu --example bench -- reduce
//! ```
//!
//! On a software adapter (lavapipe, SwiftShader) the numbers describe a CPU pretending
//! to be a GPU: the shapes of the curves are instructive, the values are not GPU numbers.

#[cfg(target_arch = "wasm32")]
fn main() {} // timing needs std::time, and the browser demos have their own

#[cfg(not(target_arch = "wasm32"))]
use brrr_wgpu::bench::{
    GEMM_SIZES, OVERHEAD_SIZES, Row, bench_gemm, bench_overhead, bench_reduce, bench_upload,
    overhead_crossover,
};
#[cfg(not(target_arch = "wasm32"))]
use brrr_wgpu::{MatmulKernel, WgpuBackend};

#[cfg(not(target_arch = "wasm32"))]
fn print(title: &str, rows: &[Row]) {
    println!("\n{title}");
    println!(
        "{:<22} {:>10} {:>14} {:>12}",
        "kernel", "size", "time", "rate"
    );
    for r in rows {
        println!(
            "{:<22} {:>10} {:>11.3} us {:>8.2} {}",
            r.kernel,
            r.size,
            r.seconds * 1e6,
            r.rate,
            r.unit
        );
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn main() -> brrr_backend::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map_or("all", String::as_str);
    let sizes: Option<Vec<usize>> = args
        .get(1)
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect());
    let gpu = WgpuBackend::new_blocking()?;
    println!("device: {}", gpu.report());
    gpu.warm_up()?;
    if what == "all" || what == "gemm" {
        let sizes = sizes.clone().unwrap_or(GEMM_SIZES.to_vec());
        let rows = bench_gemm(&gpu, &sizes, &MatmulKernel::ALL, 0.5)?;
        print("GEMM, f32, n×n×n (GFLOP/s)", &rows);
    }
    if what == "all" || what == "overhead" {
        let sizes = sizes.clone().unwrap_or(OVERHEAD_SIZES.to_vec());
        let rows = bench_overhead(&gpu, &sizes, 50, 0.3)?;
        print(
            "element-wise y = x·1 + 0, f32: time per dispatch (GB/s moved)",
            &rows,
        );
        for k in ["submit_per_op", "one_submission"] {
            match overhead_crossover(&rows, k) {
                Some(n) => println!("{k}: overhead-bound below ~{n} elements"),
                None => println!("{k}: overhead-bound at every size measured"),
            }
        }
    }
    if what == "all" || what == "upload" {
        // Token ids of a batch: 16 × 128 (the default run), 64 × 1024, and 4× that.
        let sizes = sizes.unwrap_or(vec![2048, 65536, 262_144]);
        let rows = bench_upload(&gpu, &sizes, 0.5)?;
        print(
            "upload of u32 token ids, two per step then a wait: time per upload (GB/s)",
            &rows,
        );
    }
    if what == "all" || what == "reduce" {
        // A bias gradient of GPT-2 small (8 x 1024 rows, 768 columns) and a 16M-element
        // gradient's sum.
        let rows = bench_reduce(&gpu, [8192, 768], 1 << 24, 0.5)?;
        print(
            "reductions with few outputs, f32: one pass against the split (GB/s read)",
            &rows,
        );
    }
    Ok(())
}
