//! The CUDA C sources in `kernels/`, and their compilation to PTX with NVRTC.
//!
//! Each `kernels/*.cu` file is one kernel family and one NVRTC program: brrr-cuda
//! prepends `kernels/common.cuh` (dtype structs, conversions, reductions, PTX wrappers)
//! and compiles the result for the device's architecture at run time, so building the
//! workspace needs no CUDA toolkit. The sources are embedded in the binary with
//! `include_str!`; the compiled PTX is cached in memory per device and on disk (see
//! [`KernelCache`]) so that a second run does not pay for NVRTC again.

/// One kernel family: a file of `kernels/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `elementwise.cu`: unary and binary math, axpy, GELU and its backward, dtype casts,
    /// strided gathers (transposes, broadcasts made real) and fills.
    Elementwise,
    /// `reduce.cu`: sum, mean, max and min over the middle axis of `[outer, n, inner]`,
    /// with split forms for few outputs, and the fused sum of squares.
    Reduce,
    /// `softmax.cu`: row-wise (optionally causal, scaled) softmax, one-pass online
    /// statistics (Milakov & Gimelshein 2018), and its backward.
    Softmax,
    /// `layernorm.cu`: LayerNorm over the last axis (Ba et al. 2016) and its backward,
    /// including the gamma/beta column sums.
    LayerNorm,
    /// `embedding.cu`: token-embedding lookup and its deterministic, atomic-free
    /// scatter-add backward.
    Embedding,
    /// `cross_entropy.cu`: per-row cross-entropy of logits against targets and its
    /// gradient; a negative target marks an ignored row.
    CrossEntropy,
    /// `optim.cu`: the fused AdamW step and the mixed-precision pair (unscale with a
    /// finite check, loss-scale update on the device).
    Optim,
    /// `gemm.cu`: brrr's own matrix multiplications v1-v4 (cuBLAS is the default path).
    Gemm,
}

impl Family {
    /// Every family, one per `.cu` file of `kernels/`.
    pub const ALL: [Family; 8] = [
        Family::Elementwise,
        Family::Reduce,
        Family::Softmax,
        Family::LayerNorm,
        Family::Embedding,
        Family::CrossEntropy,
        Family::Optim,
        Family::Gemm,
    ];

    /// The file name in `kernels/`.
    pub fn file_name(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise.cu",
            Family::Reduce => "reduce.cu",
            Family::Softmax => "softmax.cu",
            Family::LayerNorm => "layernorm.cu",
            Family::Embedding => "embedding.cu",
            Family::CrossEntropy => "cross_entropy.cu",
            Family::Optim => "optim.cu",
            Family::Gemm => "gemm.cu",
        }
    }

    /// The file's text, as embedded at build time.
    pub fn source(self) -> &'static str {
        match self {
            Family::Elementwise => include_str!("../kernels/elementwise.cu"),
            Family::Reduce => include_str!("../kernels/reduce.cu"),
            Family::Softmax => include_str!("../kernels/softmax.cu"),
            Family::LayerNorm => include_str!("../kernels/layernorm.cu"),
            Family::Embedding => include_str!("../kernels/embedding.cu"),
            Family::CrossEntropy => include_str!("../kernels/cross_entropy.cu"),
            Family::Optim => include_str!("../kernels/optim.cu"),
            Family::Gemm => include_str!("../kernels/gemm.cu"),
        }
    }

    /// The complete NVRTC program: the prelude, then the file. A `#line` directive makes
    /// compiler messages point into the right file.
    pub fn program(self) -> String {
        format!(
            "#line 1 \"common.cuh\"\n{PRELUDE}\n#line 1 \"{}\"\n{}",
            self.file_name(),
            self.source()
        )
    }
}

/// `kernels/common.cuh`, prepended to every program.
pub const PRELUDE: &str = include_str!("../kernels/common.cuh");

/// 64-bit FNV-1a: a stable hash for cache keys (std's hasher may change between Rust
/// releases; a cache key must not).
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // Separate the parts so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(not(target_arch = "wasm32"))]
pub use native::*;

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use super::Family;
    use brrr_backend::{Error, Result};
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    /// Options every program is compiled with (besides the architecture).
    /// `--std=c++17` for `if constexpr`; no fast math: results must match the reference.
    pub const NVRTC_OPTIONS: &[&str] = &["--std=c++17", "--device-as-default-execution-space"];

    fn nvrtc_err(msg: impl Into<String>) -> Error {
        Error::Backend {
            backend: "cuda",
            msg: msg.into(),
        }
    }

    /// Whether the NVRTC library can be loaded. Looks where cudarc looks (the loader
    /// path), and then, because cudarc's own lookup panics when nothing is found, in the
    /// usual install locations: `$BRRR_NVRTC_LIB` (a directory or a file), `$CUDA_HOME`,
    /// `$CUDA_PATH`, `/usr/local/cuda`, and the cache of `bench/install-nvrtc.sh`. A
    /// library found there is loaded by its full path, after which cudarc's lookup by
    /// name (`libnvrtc.so.12`) finds it among the loaded objects.
    pub fn nvrtc_available() -> bool {
        static FOUND: OnceLock<bool> = OnceLock::new();
        *FOUND.get_or_init(|| {
            // SAFETY: dlopen of a library name; loading NVRTC runs no user-visible code.
            if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                return true;
            }
            for dir in library_dirs() {
                if preload_from(&dir, "libnvrtc-builtins", "libnvrtc.so.") {
                    // SAFETY: as above.
                    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                        return true;
                    }
                }
            }
            false
        })
    }

    /// Directories that may hold CUDA libraries, most specific first.
    pub(crate) fn library_dirs() -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if let Some(p) = std::env::var_os("BRRR_NVRTC_LIB") {
            let p = PathBuf::from(p);
            if p.is_file() {
                if let Some(d) = p.parent() {
                    dirs.push(d.to_path_buf());
                }
            } else {
                dirs.push(p);
            }
        }
        for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
            if let Some(root) = std::env::var_os(var) {
                let root = PathBuf::from(root);
                dirs.push(root.join("lib64"));
                dirs.push(root.join("lib"));
            }
        }
        dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
        dirs.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
        dirs.push(PathBuf::from("/usr/local/cuda/targets/sbsa-linux/lib"));
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
        if let Some(cache) = cache {
            let brrr = cache.join("brrr");
            if let Ok(entries) = std::fs::read_dir(&brrr) {
                let mut found: Vec<PathBuf> = entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("nvrtc-"))
                    })
                    .map(|p| p.join("nvidia/cuda_nvrtc/lib"))
                    .collect();
                found.sort();
                dirs.extend(found.into_iter().rev());
            }
        }
        dirs.retain(|d| d.is_dir());
        dirs
    }

    /// Loads (and keeps loaded) every file in `dir` whose name starts with one of the
    /// prefixes, helpers first. Returns whether a file with the last prefix was loaded.
    pub(crate) fn preload_from(dir: &Path, helper_prefix: &str, main_prefix: &str) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        names.sort();
        let starts = |p: &PathBuf, prefix: &str| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && !n.contains(".alt."))
        };
        for p in names.iter().filter(|p| starts(p, helper_prefix)) {
            // SAFETY: loading a shared library by path; it stays loaded for the process.
            if let Ok(lib) = unsafe { libloading::Library::new(p) } {
                std::mem::forget(lib);
            }
        }
        let mut loaded = false;
        for p in names.iter().filter(|p| starts(p, main_prefix)) {
            // SAFETY: as above.
            if let Ok(lib) = unsafe { libloading::Library::new(p) } {
                std::mem::forget(lib);
                loaded = true;
            }
        }
        loaded
    }

    /// NVRTC's version, (major, minor).
    pub fn nvrtc_version() -> Result<(i32, i32)> {
        if !nvrtc_available() {
            return Err(no_nvrtc());
        }
        let mut major = 0;
        let mut minor = 0;
        // SAFETY: NVRTC is loaded; the out-pointers are valid.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .map_err(|e| nvrtc_err(format!("nvrtcVersion failed: {e:?}")))?;
        Ok((major, minor))
    }

    pub(crate) fn no_nvrtc() -> Error {
        Error::NoDevice {
            backend: "cuda",
            reason: "NVRTC not found (libnvrtc.so); put the CUDA toolkit's lib64 on \
                     LD_LIBRARY_PATH, set CUDA_HOME or BRRR_NVRTC_LIB, or run bench/install-nvrtc.sh"
                .into(),
        }
    }

    /// What NVRTC produced: PTX text for a virtual architecture (`compute_90`) or
    /// machine code (CUBIN) for a real one (`sm_90`, which runs ptxas inside NVRTC, so
    /// inline PTX is checked too), plus the compiler log (warnings, and with
    /// `verbose` ptxas' register and spill report).
    #[derive(Clone, Debug)]
    pub struct Compiled {
        /// The bytes to load as a module: PTX text without its trailing NUL, or the
        /// CUBIN's ELF image.
        pub image: Vec<u8>,
        /// Whether `image` is a CUBIN (the architecture was `sm_XY`) rather than PTX.
        pub is_cubin: bool,
        /// NVRTC's log; empty when it had nothing to say.
        pub log: String,
    }

    impl Compiled {
        /// The PTX text (empty for a CUBIN).
        pub fn ptx(&self) -> &str {
            if self.is_cubin {
                ""
            } else {
                std::str::from_utf8(&self.image).unwrap_or("")
            }
        }
    }

    /// Compiles one kernel family to PTX for a virtual architecture such as
    /// `compute_90`. Works without a GPU (only NVRTC is needed).
    pub fn compile_ptx(family: Family, arch: &str) -> Result<String> {
        let c = compile_source(&family.program(), family.file_name(), arch, false)?;
        Ok(c.ptx().to_string())
    }

    /// Compiles any CUDA C program (with no `#include`s) for `arch`: `compute_XY` gives
    /// PTX, `sm_XY` gives a CUBIN. `verbose` adds ptxas' resource usage to the log.
    pub fn compile_source(
        program: &str,
        name: &str,
        arch: &str,
        verbose: bool,
    ) -> Result<Compiled> {
        use cudarc::nvrtc::sys;
        use std::ffi::{CString, c_char};
        if !nvrtc_available() {
            return Err(no_nvrtc());
        }
        let mut options: Vec<String> = NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
        options.push(format!("--gpu-architecture={arch}"));
        if verbose {
            options.push("--ptxas-options=-v".to_string());
        }
        let src = CString::new(program)
            .map_err(|_| nvrtc_err(format!("{name}: NUL byte in the source")))?;
        let cname = CString::new(name).map_err(|_| nvrtc_err("NUL byte in a program name"))?;
        let c_opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()).expect("options have no NUL"))
            .collect();
        let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
        let check = |what: &str, r: sys::nvrtcResult| -> Result<()> {
            if r == sys::nvrtcResult::NVRTC_SUCCESS {
                Ok(())
            } else {
                Err(nvrtc_err(format!(
                    "{what} failed for {name} ({arch}): {r:?}"
                )))
            }
        };
        let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: valid C strings that outlive the program; no headers are passed.
        check("nvrtcCreateProgram", unsafe {
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        })?;
        struct Guard(sys::nvrtcProgram);
        impl Drop for Guard {
            fn drop(&mut self) {
                // SAFETY: the program was created above and is destroyed once.
                unsafe {
                    let _ = sys::nvrtcDestroyProgram(&mut self.0);
                }
            }
        }
        let guard = Guard(prog);
        // SAFETY: prog is live; the option pointers are valid for the call.
        let compiled =
            unsafe { sys::nvrtcCompileProgram(guard.0, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
        let log = {
            let mut size = 0usize;
            // SAFETY: prog is live; the buffer has the size NVRTC reported.
            unsafe {
                if sys::nvrtcGetProgramLogSize(guard.0, &mut size)
                    == sys::nvrtcResult::NVRTC_SUCCESS
                    && size > 1
                {
                    let mut buf = vec![0u8; size];
                    let _ = sys::nvrtcGetProgramLog(guard.0, buf.as_mut_ptr() as *mut c_char);
                    buf.truncate(size - 1);
                    String::from_utf8_lossy(&buf).into_owned()
                } else {
                    String::new()
                }
            }
        };
        if compiled != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(nvrtc_err(format!(
                "NVRTC failed to compile {name} for {arch} ({compiled:?}, options {options:?}):\n{log}"
            )));
        }
        let is_cubin = arch.starts_with("sm_");
        let mut size = 0usize;
        let image = if is_cubin {
            // SAFETY: prog compiled successfully; the buffer has the reported size.
            unsafe {
                check(
                    "nvrtcGetCUBINSize",
                    sys::nvrtcGetCUBINSize(guard.0, &mut size),
                )?;
                let mut buf = vec![0u8; size];
                check(
                    "nvrtcGetCUBIN",
                    sys::nvrtcGetCUBIN(guard.0, buf.as_mut_ptr() as *mut c_char),
                )?;
                buf
            }
        } else {
            // SAFETY: as above; the PTX ends in a NUL, which is dropped.
            unsafe {
                check("nvrtcGetPTXSize", sys::nvrtcGetPTXSize(guard.0, &mut size))?;
                let mut buf = vec![0u8; size];
                check(
                    "nvrtcGetPTX",
                    sys::nvrtcGetPTX(guard.0, buf.as_mut_ptr() as *mut c_char),
                )?;
                while buf.last() == Some(&0) {
                    buf.pop();
                }
                buf
            }
        };
        Ok(Compiled {
            image,
            is_cubin,
            log,
        })
    }

    /// The architectures this NVRTC can target, as compute capabilities (e.g. 90).
    pub fn nvrtc_supported_archs() -> Result<Vec<i32>> {
        use cudarc::nvrtc::sys;
        if !nvrtc_available() {
            return Err(no_nvrtc());
        }
        let mut n = 0i32;
        // SAFETY: NVRTC is loaded; the buffer has the reported size.
        unsafe {
            if sys::nvrtcGetNumSupportedArchs(&mut n) != sys::nvrtcResult::NVRTC_SUCCESS {
                return Err(nvrtc_err("nvrtcGetNumSupportedArchs failed"));
            }
            let mut archs = vec![0i32; n.max(0) as usize];
            if sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) != sys::nvrtcResult::NVRTC_SUCCESS {
                return Err(nvrtc_err("nvrtcGetSupportedArchs failed"));
            }
            Ok(archs)
        }
    }

    /// Compiled kernels, kept on disk between runs under `$BRRR_KERNEL_CACHE` or
    /// `~/.cache/brrr/kernels`, keyed by a hash of the program text, the architecture,
    /// the options and the NVRTC version. A missing or unwritable cache directory only
    /// costs a recompilation.
    #[derive(Clone, Debug)]
    pub struct KernelCache {
        dir: Option<PathBuf>,
    }

    impl Default for KernelCache {
        fn default() -> Self {
            let dir = std::env::var_os("BRRR_KERNEL_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("XDG_CACHE_HOME")
                        .map(PathBuf::from)
                        .or_else(|| {
                            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"))
                        })
                        .map(|c| c.join("brrr").join("kernels"))
                });
            KernelCache { dir }
        }
    }

    impl KernelCache {
        /// A cache in `dir`, or no disk cache at all with `None`.
        pub fn new(dir: Option<PathBuf>) -> Self {
            KernelCache { dir }
        }

        /// The compiled image of `family` for `arch` (`compute_XY`: PTX, `sm_XY`: CUBIN),
        /// from disk if present, else compiled and stored.
        pub fn get(&self, family: Family, arch: &str) -> Result<Vec<u8>> {
            let program = family.program();
            let (major, minor) = nvrtc_version()?;
            let key = super::fnv1a(&[
                program.as_bytes(),
                arch.as_bytes(),
                NVRTC_OPTIONS.join(" ").as_bytes(),
                format!("{major}.{minor}").as_bytes(),
            ]);
            let stem = family.file_name().trim_end_matches(".cu");
            let ext = if arch.starts_with("sm_") {
                "cubin"
            } else {
                "ptx"
            };
            let path = self
                .dir
                .as_ref()
                .map(|d| d.join(format!("{stem}-{arch}-{key:016x}.{ext}")));
            if let Some(p) = &path
                && let Ok(image) = std::fs::read(p)
                && !image.is_empty()
            {
                return Ok(image);
            }
            let image = compile_source(&program, family.file_name(), arch, false)?.image;
            // Write to a temporary name and rename, so a concurrent reader never sees half
            // a file. A cache that cannot be written only costs a recompilation next time.
            if let Some(p) = &path
                && let Some(dir) = p.parent()
                && std::fs::create_dir_all(dir).is_ok()
            {
                let tmp = p.with_extension(format!("tmp{}", std::process::id()));
                if std::fs::write(&tmp, &image).is_ok() {
                    let _ = std::fs::rename(&tmp, p);
                }
            }
            Ok(image)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_a_source() {
        for f in Family::ALL {
            assert!(
                f.source().contains("extern \"C\" __global__"),
                "{}",
                f.file_name()
            );
            assert!(f.program().starts_with("#line 1 \"common.cuh\""));
        }
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }
}
