//! Compiles every `kernels/*.cu` with NVRTC: to PTX for compute_75/80/90 and, through
//! NVRTC's built-in ptxas, to machine code for sm_80 and sm_90, which also checks every
//! inline-PTX instruction (mma, ldmatrix, cp.async) and reports registers and spills.
//! Needs only the NVRTC library, not a GPU; prints a skip line where NVRTC is absent
//! (`bench/install-nvrtc.sh` installs it from PyPI).
#![cfg(not(target_arch = "wasm32"))]

use brrr_cuda::kernels::{Family, compile_source, nvrtc_available, nvrtc_version};

#[test]
fn every_kernel_file_compiles() {
    if !nvrtc_available() {
        brrr_backend::skip::report_skipped("nvrtc", "libnvrtc not found");
        return;
    }
    let (major, minor) = nvrtc_version().unwrap();
    // sm_80 and sm_90 compile through compute_80's and compute_90's PTX before ptxas,
    // so those virtual targets would check nothing more; compute_75 is the one below
    // Ampere (no bf16 instructions, no cp.async), reached through `pick_arch`'s fallback.
    let archs = ["compute_75", "sm_80", "sm_90"];
    // One thread per architecture: NVRTC programs are independent.
    let results: Vec<(String, Vec<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = archs
            .iter()
            .map(|&arch| s.spawn(move || compile_all(arch)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("compile thread"))
            .collect()
    });
    let mut failures = Vec::new();
    for (report, errs) in results {
        print!(
            "{}",
            report.replace("nvrtc:", &format!("nvrtc {major}.{minor}:"))
        );
        failures.extend(errs);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn compile_all(arch: &str) -> (String, Vec<String>) {
    let mut report = String::new();
    let mut failures = Vec::new();
    for f in Family::ALL {
        let verbose = arch.starts_with("sm_");
        match compile_source(&f.program(), f.file_name(), arch, verbose) {
            Ok(c) => {
                if c.is_cubin {
                    assert!(
                        c.image.starts_with(b"\x7fELF"),
                        "{} for {arch}: not an ELF",
                        f.file_name()
                    );
                } else {
                    let ptx = c.ptx();
                    assert!(
                        ptx.contains(".entry"),
                        "{} for {arch}: no kernels",
                        f.file_name()
                    );
                    // Every kernel declares its launch bounds (so a 1024-thread launch can
                    // never fail for lack of registers): `.maxntid` between the entry's
                    // name and its body.
                    for entry in ptx.split(".entry ").skip(1) {
                        let header = &entry[..entry.find('{').unwrap_or(entry.len())];
                        if !header.contains(".maxntid") {
                            let name = header.split('(').next().unwrap_or("?").trim();
                            failures.push(format!(
                                "{}: kernel {name} has no launch bounds",
                                f.file_name()
                            ));
                        }
                    }
                }
                // Warnings are failures: they are usually real bugs in kernels.
                let warnings: Vec<&str> = c.log.lines().filter(|l| l.contains("warning")).collect();
                if !warnings.is_empty() {
                    failures.push(format!(
                        "{} for {arch}: warnings:\n{}",
                        f.file_name(),
                        warnings.join("\n")
                    ));
                }
                // The tensor-core GEMM must not spill its accumulators to local memory.
                if verbose && f == Family::Gemm {
                    report_v4(arch, &c.log, &mut report, &mut failures);
                }
                report += &format!(
                    "nvrtc: {} for {arch}: ok ({} bytes)\n",
                    f.file_name(),
                    c.image.len()
                );
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    (report, failures)
}

/// ptxas -v prints, per kernel, "Compiling entry function 'NAME' for 'sm_XY'" followed by
/// lines with "N bytes spill stores" and "Used R registers".
fn report_v4(arch: &str, log: &str, report: &mut String, failures: &mut Vec<String>) {
    let mut current = String::new();
    for line in log.lines() {
        if let Some(i) = line.find("Compiling entry function '") {
            let rest = &line[i + 26..];
            current = rest[..rest.find('\'').unwrap_or(rest.len())].to_string();
        }
        if current.starts_with("gemm_v4") || current == "gemm_v3_f32" {
            if line.contains("Used") && line.contains("registers") {
                *report += &format!("  {arch} {current}: {}\n", line.trim());
            }
            if line.contains("spill")
                && current.starts_with("gemm_v4")
                && !line.contains(" 0 bytes spill stores")
            {
                failures.push(format!(
                    "{arch} {current} spills registers: {}",
                    line.trim()
                ));
            }
        }
    }
}

#[test]
fn compiled_kernels_are_cached_on_disk() {
    if !nvrtc_available() {
        brrr_backend::skip::report_skipped("nvrtc", "libnvrtc not found");
        return;
    }
    let dir = std::env::temp_dir().join(format!("brrr-kernel-cache-test-{}", std::process::id()));
    let cache = brrr_cuda::kernels::KernelCache::new(Some(dir.clone()));
    let first = cache.get(Family::Reduce, "compute_80").unwrap();
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .collect();
    assert_eq!(files.len(), 1, "one cached file");
    let name = files[0].file_name().into_string().unwrap();
    assert!(
        name.starts_with("reduce-compute_80-") && name.ends_with(".ptx"),
        "{name}"
    );
    // A second lookup reads the file (make it recognisable to prove it).
    let path = files[0].path();
    let mut marked = first.clone();
    marked.extend_from_slice(b"\n// from disk\n");
    std::fs::write(&path, &marked).unwrap();
    assert_eq!(cache.get(Family::Reduce, "compute_80").unwrap(), marked);
    std::fs::remove_dir_all(&dir).unwrap();
}
