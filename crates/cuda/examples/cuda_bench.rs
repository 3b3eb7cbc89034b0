//! Prints the CUDA backend's benchmark tables (the data comes from `brrr_cuda::bench`).
//!
//! ```text
//! cargo run --release -p brrr-cuda --example cuda_bench -- gemm [SIZE]
//! cargo run --release -p brrr-cuda --example cuda_bench -- bandwidth [ELEMS]
//! cargo run --release -p brrr-cuda --example cuda_bench -- reduce
//! cargo run --release -p brrr-cuda --example cuda_bench -- embedding
//! cargo run --release -p brrr-cuda --example cuda_bench -- overlap [MIB]
//! cargo run --release -p brrr-cuda --example cuda_bench -- all
//! ```
//!
//! Add `--emulated` to run on the CPU emulator of the kernels (tiny sizes only: it is
//! slow, and its numbers mean nothing; it checks that the program works).

use brrr_cuda::CudaBackend;
use brrr_cuda::bench::{
    BandwidthBench, BenchRow, EmbeddingBench, GemmBench, OverlapBench, ReduceBench,
};

fn print(title: &str, rows: &[BenchRow]) {
    println!("\n{title}");
    println!(
        "{:<28} {:<6} {:<18} {:>11} {:>16}  {:>7}  note",
        "name", "dtype", "size", "seconds", "rate", "of base"
    );
    for r in rows {
        let frac = r
            .fraction_of_baseline
            .map(|f| format!("{:6.1}%", f * 100.0))
            .unwrap_or_default();
        println!(
            "{:<28} {:<6} {:<18} {:>11.6} {:>8.2} {:<7}  {:>7}  {}",
            r.name,
            if r.note.contains("tf32") {
                "tf32".to_string()
            } else {
                r.dtype.to_string()
            },
            r.size,
            r.seconds,
            r.rate.value(),
            r.rate.unit(),
            frac,
            r.note
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let emulated = args.iter().any(|a| a == "--emulated");
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let what = pos.first().map(|s| s.as_str()).unwrap_or("all");
    let number = pos.get(1).and_then(|s| s.parse::<usize>().ok());
    let known = ["gemm", "bandwidth", "reduce", "embedding", "overlap", "all"];
    if !known.contains(&what) {
        eprintln!(
            "cuda_bench: unknown benchmark {what:?}: gemm, bandwidth, reduce, embedding, overlap or all"
        );
        std::process::exit(2);
    }
    let cuda = if emulated {
        CudaBackend::emulated()
    } else {
        CudaBackend::new(0)
    };
    let cuda = match cuda {
        Ok(c) => c,
        Err(e) => {
            // Absent hardware is a skip, unless the caller requires the GPU.
            let required =
                std::env::var("BRRR_REQUIRE_CUDA").is_ok_and(|v| !v.is_empty() && v != "0");
            eprintln!("cuda: skipped ({e})");
            std::process::exit(if emulated || required { 1 } else { 0 });
        }
    };
    println!("device: {}", brrr_backend::Backend::info(&cuda).device);
    let run = || -> brrr_backend::Result<()> {
        if what == "gemm" || what == "all" {
            let mut cfg = GemmBench::default();
            if let Some(n) = number.filter(|_| what == "gemm") {
                cfg.n = n;
            }
            if emulated {
                cfg.n = cfg.n.min(64);
                cfg.reps = 1;
                cfg.warmup = 0;
            }
            let rows = brrr_cuda::bench::gemm(&cuda, &cfg)?;
            print(
                &format!(
                    "GEMM {n}x{n}x{n}, brrr-cuda (fraction of cuBLAS in the same dtype)",
                    n = cfg.n
                ),
                &rows,
            );
        }
        if what == "bandwidth" || what == "all" {
            let mut cfg = BandwidthBench::default();
            if let Some(n) = number.filter(|_| what == "bandwidth") {
                cfg.elems = n;
            }
            if emulated {
                cfg = BandwidthBench {
                    elems: 768 * 8,
                    softmax_cols: 64,
                    vocab: 512,
                    head_split: [2, 16, 3, 64],
                    reps: 1,
                    warmup: 0,
                    ..cfg
                };
            }
            let rows = brrr_cuda::bench::bandwidth(&cuda, &cfg)?;
            print(
                "Memory bandwidth, brrr-cuda (fraction of the device-to-device copy)",
                &rows,
            );
            let up =
                brrr_cuda::bench::upload(&cuda, if emulated { 1 << 20 } else { 256 << 20 }, 3)?;
            print("Host to device", &[up]);
        }
        if what == "reduce" || what == "all" {
            let mut cfg = ReduceBench::default();
            if emulated {
                cfg = ReduceBench {
                    bias_rows: 256,
                    bias_cols: 24,
                    long_row: 40_000,
                    reps: 1,
                    warmup: 0,
                    ..cfg
                };
            }
            let rows = brrr_cuda::bench::reductions(&cuda, &cfg)?;
            print(
                "Reductions with few outputs, brrr-cuda (speed of each second row over the first)",
                &rows,
            );
        }
        if what == "embedding" || what == "all" {
            let mut cfg = EmbeddingBench::default();
            if emulated {
                cfg = EmbeddingBench {
                    ids: 300,
                    dim: 40,
                    rows: 200,
                    reps: 1,
                    warmup: 0,
                    ..cfg
                };
            }
            let rows = brrr_cuda::bench::embedding(&cuda, &cfg)?;
            print(
                "Embedding backward, brrr-cuda (speed of each row over v1)",
                &rows,
            );
        }
        if what == "overlap" || what == "all" {
            let mut cfg = OverlapBench::default();
            if let Some(mib) = number.filter(|_| what == "overlap") {
                cfg.upload_bytes = mib.saturating_mul(1 << 20);
            }
            if emulated {
                cfg = OverlapBench {
                    gemm_n: 64,
                    gemms: 2,
                    upload_bytes: 1 << 20,
                    warmup: 0,
                    reps: 1,
                };
            }
            let rows = brrr_cuda::bench::upload_overlap(&cuda, &cfg)?;
            print(
                "Upload beside compute, brrr-cuda (host wall time; fraction: compute alone over the row)",
                &rows,
            );
        }
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("cuda_bench: {e}");
        std::process::exit(1);
    }
}
