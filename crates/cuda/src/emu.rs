//! The CPU emulator: brrr's CUDA C kernels compiled as host C++ (`kernels/emu`) and run
//! with one OS thread per CUDA thread, behind the same `Device` trait as a real GPU.
//!
//! It exists so that the whole backend above the driver calls (argument marshalling,
//! launch geometry, the allocator, the cuBLAS operand mapping) and the kernels themselves
//! (indexing, reductions, tensor-core fragment layouts) are tested on machines with no
//! GPU. "cuBLAS" here is a straightforward implementation of the documented column-major
//! semantics of `cublasGemmStridedBatchedEx` and of cuBLASLt's bias/GELU epilogue, so
//! the row-major mapping is checked against the definition of the API it calls.
//!
//! Beyond a CPU's checks, it fails where a GPU program is wrong but a CPU run would
//! pass: misaligned 16-byte accesses and shared memory outside the launch (in
//! `kernels/emu`), and an op that writes past the end of one of its operands into the
//! allocator's rounding (each handed-out block's tail is guarded).
//!
//! Building needs a C++20 compiler (`g++`, or `$CXX`); [`build_emulator`] writes the
//! embedded sources to a directory and compiles them once per source version.

use crate::device::{
    AllocFail, Arg, BlasGemm, DevPtr, Device, DeviceInfo, EventId, LaunchCfg, LtMatmul, Pattern,
};
use crate::kernels::{Family, PRELUDE, fnv1a};
use brrr_backend::{DType, Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

const EMU_H: &str = include_str!("../kernels/emu/emu.h");
const EMU_CPP: &str = include_str!("../kernels/emu/emu.cpp");

fn emu_err(msg: impl Into<String>) -> Error {
    Error::Backend {
        backend: "cuda-emu",
        msg: msg.into(),
    }
}

/// The C++ compiler the emulator is built with: `$CXX` or `g++`.
fn cxx() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "g++".to_string())
}

/// Whether a C++ compiler is available to build the emulator.
pub fn compiler_available() -> bool {
    std::process::Command::new(cxx())
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Builds the emulator library in `dir` (default: `$BRRR_EMU_DIR`, else
/// `~/.cache/brrr/emu`, else the temp directory) unless a build of the same sources is
/// already there, and returns its path.
pub fn build_emulator(dir: Option<&Path>) -> Result<PathBuf> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::var_os("BRRR_EMU_DIR")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/brrr/emu")))
            .unwrap_or_else(|| std::env::temp_dir().join("brrr-emu")),
    };
    let mut parts: Vec<&[u8]> = vec![PRELUDE.as_bytes(), EMU_H.as_bytes(), EMU_CPP.as_bytes()];
    for f in Family::ALL {
        parts.push(f.source().as_bytes());
    }
    let key = fnv1a(&parts);
    let lib = dir.join(format!("libbrrr_cuda_emu-{key:016x}.so"));
    if lib.is_file() {
        return Ok(lib);
    }
    let src = dir.join(format!("src-{key:016x}-{}", std::process::id()));
    std::fs::create_dir_all(&src)
        .map_err(|e| Error::io(format!("creating {}", src.display()), e))?;
    let write = |name: &str, text: &str| {
        std::fs::write(src.join(name), text).map_err(|e| Error::io(format!("writing {name}"), e))
    };
    write("common.cuh", PRELUDE)?;
    write("emu.h", EMU_H)?;
    write("emu.cpp", EMU_CPP)?;
    for f in Family::ALL {
        write(f.file_name(), f.source())?;
    }
    let tmp = dir.join(format!(
        "libbrrr_cuda_emu-{key:016x}.{}.tmp",
        std::process::id()
    ));
    let out = std::process::Command::new(cxx())
        .args([
            "-std=c++20",
            "-O1",
            "-g0",
            "-shared",
            "-fPIC",
            "-pthread",
            "-w",
        ])
        .arg(src.join("emu.cpp"))
        .arg("-o")
        .arg(&tmp)
        .output()
        .map_err(|e| Error::io(format!("running {}", cxx()), e))?;
    let _ = std::fs::remove_dir_all(&src);
    if !out.status.success() {
        return Err(emu_err(format!(
            "building the kernel emulator failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    std::fs::rename(&tmp, &lib).map_err(|e| Error::io(format!("moving {}", tmp.display()), e))?;
    Ok(lib)
}

type LaunchFn = unsafe extern "C" fn(
    *const c_char,
    *const c_uint,
    *const c_uint,
    c_uint,
    *mut *mut c_void,
) -> c_int;
type ErrorFn = unsafe extern "C" fn() -> *const c_char;

/// The emulator as a [`Device`]: "device memory" is host memory.
pub(crate) struct EmuDevice {
    _lib: libloading::Library,
    launch: LaunchFn,
    error: ErrorFn,
    capacity: u64,
    state: Mutex<EmuState>,
}

#[derive(Default)]
struct EmuState {
    allocs: HashMap<DevPtr, std::alloc::Layout>,
    /// The blocks the allocator has handed out, by start address.
    guards: BTreeMap<DevPtr, Guard>,
    used: u64,
    events: HashMap<EventId, Option<Instant>>,
    next_event: EventId,
}

/// The byte every guarded tail holds. Reading it gives NaN in every float dtype, so a
/// kernel that reads past a buffer's end fails loudly too.
const GUARD_BYTE: u8 = 0xff;

/// A handed-out block: its buffer uses `used` bytes, the bytes from `start` to `size`
/// hold [`GUARD_BYTE`].
#[derive(Clone, Copy, Debug)]
struct Guard {
    used: usize,
    /// `used` rounded up to 4 bytes: the backend zero-fills a buffer as 4-byte words, so
    /// the last word of a 16-bit buffer of odd length is the buffer's to write.
    start: usize,
    size: usize,
}

impl Guard {
    /// The guarded tail of the block at `ptr`.
    ///
    /// # Safety
    /// The block at `ptr` must still be allocated with at least `self.size` bytes.
    unsafe fn tail<'a>(self, ptr: DevPtr) -> &'a mut [u8] {
        // SAFETY: per the function contract; start <= size.
        unsafe {
            std::slice::from_raw_parts_mut((ptr as *mut u8).add(self.start), self.size - self.start)
        }
    }
}

impl EmuDevice {
    /// Loads the emulator library; `capacity` is the memory it pretends to have (for
    /// out-of-memory tests).
    pub(crate) fn load(path: &Path, capacity: u64) -> Result<Self> {
        // SAFETY: loading the library runs only static constructors that fill the kernel
        // registry; the symbols have the declared signatures (kernels/emu/emu.cpp).
        unsafe {
            let lib = libloading::Library::new(path)
                .map_err(|e| emu_err(format!("cannot load {}: {e}", path.display())))?;
            let launch: LaunchFn = *lib
                .get::<LaunchFn>(b"brrr_emu_launch\0")
                .map_err(|e| emu_err(format!("{}: {e}", path.display())))?;
            let error: ErrorFn = *lib
                .get::<ErrorFn>(b"brrr_emu_error\0")
                .map_err(|e| emu_err(format!("{}: {e}", path.display())))?;
            Ok(EmuDevice {
                _lib: lib,
                launch,
                error,
                capacity,
                state: Mutex::new(EmuState::default()),
            })
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, EmuState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks the guarded tails of the blocks that `ptrs` point into, after `what` ran.
    ///
    /// A real GPU would not notice such a write (the allocator's rounding leaves the bytes
    /// to the buffer), but the same kernel on a view into a flat parameter buffer would
    /// overwrite the next parameter. Only the operands are checked, so that a write is
    /// blamed on the op that made it even when tests run ops on other threads.
    fn check_guards(&self, what: &dyn Fn() -> String, ptrs: &[DevPtr]) -> Result<()> {
        let st = self.state();
        for &p in ptrs.iter().filter(|&&p| p != 0) {
            let Some((&base, g)) = st.guards.range(..=p).next_back() else {
                continue;
            };
            if p >= base + g.size as u64 {
                continue;
            }
            // SAFETY: the block is in `guards`, so it is allocated and handed out.
            let tail = unsafe { g.tail(base) };
            let Some(first) = tail.iter().position(|&b| b != GUARD_BYTE) else {
                continue;
            };
            let last = tail.iter().rposition(|&b| b != GUARD_BYTE).unwrap_or(first);
            tail.fill(GUARD_BYTE);
            return Err(emu_err(format!(
                "{} wrote past the end of a buffer: bytes {}..={} of the block at {base:#x} \
                 changed, and its buffer has {} bytes",
                what(),
                g.start + first,
                g.start + last,
                g.used
            )));
        }
        Ok(())
    }
}

/// Reads element `i` of a `dtype` array at `ptr` as f64.
///
/// # Safety
/// `ptr` must point to at least `i + 1` elements of `dtype`.
unsafe fn read_elem(ptr: DevPtr, i: usize, dtype: DType) -> f64 {
    // SAFETY: per the function contract.
    unsafe {
        match dtype {
            DType::F16 => half::f16::from_bits(*(ptr as *const u16).add(i)).to_f64(),
            DType::BF16 => half::bf16::from_bits(*(ptr as *const u16).add(i)).to_f64(),
            DType::F32 => f64::from(*(ptr as *const f32).add(i)),
            DType::F64 => *(ptr as *const f64).add(i),
            DType::I32 => f64::from(*(ptr as *const i32).add(i)),
            DType::U32 => f64::from(*(ptr as *const u32).add(i)),
        }
    }
}

/// # Safety
/// `ptr` must point to at least `i + 1` elements of `dtype`.
unsafe fn write_elem(ptr: DevPtr, i: usize, dtype: DType, v: f64) {
    // SAFETY: per the function contract.
    unsafe {
        match dtype {
            DType::F16 => *(ptr as *mut u16).add(i) = half::f16::from_f64(v).to_bits(),
            DType::BF16 => *(ptr as *mut u16).add(i) = half::bf16::from_f64(v).to_bits(),
            DType::F32 => *(ptr as *mut f32).add(i) = v as f32,
            DType::F64 => *(ptr as *mut f64).add(i) = v,
            DType::I32 => *(ptr as *mut i32).add(i) = v as i32,
            DType::U32 => *(ptr as *mut u32).add(i) = v as u32,
        }
    }
}

/// The documented semantics of `cublasGemmStridedBatchedEx` (column-major): for each
/// batch, `C = alpha * op(A) op(B) + beta * C` with `op(A)` m x k, `op(B)` k x n, element
/// (i, j) of a matrix X with leading dimension ld at `X[i + j * ld]`, C not read when
/// beta is 0; C has its own dtype (`c_dtype`, f32 for a mixed-precision product).
/// Followed by the cuBLASLt epilogue when `lt` is given.
///
/// # Safety
/// The pointers must hold the matrices the descriptor describes.
unsafe fn reference_gemm(g: &BlasGemm, lt: Option<&LtMatmul>) {
    let at = |a: DevPtr, i: usize| {
        // SAFETY: the caller guarantees the extents.
        unsafe { read_elem(a, i, g.dtype) }
    };
    for b in 0..g.batch {
        let (pa, pb, pc) = (
            g.a + (b * g.stride_a * g.dtype.size_in_bytes()) as u64,
            g.b + (b * g.stride_b * g.dtype.size_in_bytes()) as u64,
            g.c + (b * g.stride_c * g.c_dtype.size_in_bytes()) as u64,
        );
        for j in 0..g.n {
            for i in 0..g.m {
                let mut acc = 0.0f64;
                for p in 0..g.k {
                    let a = if g.trans_a {
                        at(pa, p + i * g.lda)
                    } else {
                        at(pa, i + p * g.lda)
                    };
                    let bv = if g.trans_b {
                        at(pb, j + p * g.ldb)
                    } else {
                        at(pb, p + j * g.ldb)
                    };
                    acc += a * bv;
                }
                let idx = i + j * g.ldc;
                let mut r = f64::from(g.alpha) * acc;
                if g.beta != 0.0 {
                    // SAFETY: idx is inside C per the descriptor.
                    r += f64::from(g.beta) * unsafe { read_elem(pc, idx, g.c_dtype) };
                }
                if let Some(lt) = lt {
                    if let Some(bias) = lt.bias {
                        r += at(bias, i);
                    }
                    if lt.gelu {
                        let k = (2.0 / std::f64::consts::PI).sqrt();
                        r = 0.5 * r * (1.0 + (k * (r + 0.044715 * r * r * r)).tanh());
                    }
                }
                // SAFETY: idx is inside C per the descriptor.
                unsafe { write_elem(pc, idx, g.c_dtype, r) };
            }
        }
    }
}

impl Device for EmuDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: "brrr CUDA emulator (CPU threads)".to_string(),
            cc: (9, 0),
            sm_count: 4,
            total_mem: self.capacity,
        }
    }

    fn kind(&self) -> &'static str {
        "cuda-emu"
    }

    fn malloc(&self, bytes: usize) -> std::result::Result<DevPtr, AllocFail> {
        let mut st = self.state();
        if st.used + bytes as u64 > self.capacity {
            return Err(AllocFail::OutOfMemory);
        }
        let layout = std::alloc::Layout::from_size_align(bytes.max(1), 256)
            .map_err(|e| AllocFail::Other(emu_err(e.to_string())))?;
        // SAFETY: non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(AllocFail::OutOfMemory);
        }
        // Fresh device memory holds garbage; make it NaN-like so kernels that read
        // memory they should not (C with beta = 0) fail loudly.
        // SAFETY: p points to layout.size() bytes.
        unsafe { std::ptr::write_bytes(p, 0xff, layout.size()) };
        st.used += bytes as u64;
        st.allocs.insert(p as DevPtr, layout);
        Ok(p as DevPtr)
    }

    fn free(&self, ptr: DevPtr) {
        let mut st = self.state();
        if let Some(layout) = st.allocs.remove(&ptr) {
            st.used -= layout.size().min(st.used as usize) as u64;
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        }
    }

    fn mem_info(&self) -> Result<(u64, u64)> {
        let st = self.state();
        Ok((self.capacity - st.used.min(self.capacity), self.capacity))
    }

    fn memset(&self, ptr: DevPtr, pattern: Pattern, count: usize) -> Result<()> {
        // SAFETY: the backend only fills inside its allocations.
        unsafe {
            match pattern {
                Pattern::B16(v) => std::slice::from_raw_parts_mut(ptr as *mut u16, count).fill(v),
                Pattern::B32(v) => std::slice::from_raw_parts_mut(ptr as *mut u32, count).fill(v),
                Pattern::B64(v) => std::slice::from_raw_parts_mut(ptr as *mut u64, count).fill(v),
            }
        }
        self.check_guards(&|| "memset".to_string(), &[ptr])
    }

    fn copy_htod(&self, dst: DevPtr, src: &[u8], _after: Option<EventId>) -> Result<()> {
        // SAFETY: dst holds src.len() bytes (checked by the backend).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        self.check_guards(&|| "a host-to-device copy".to_string(), &[dst])
    }

    fn copy_dtoh(&self, dst: &mut [u8], src: DevPtr) -> Result<()> {
        // SAFETY: src holds dst.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn copy_dtod(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<()> {
        // SAFETY: both hold `bytes` bytes; they may overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
        self.check_guards(&|| "a device-to-device copy".to_string(), &[dst])
    }

    fn launch(&self, _family: Family, name: &str, cfg: LaunchCfg, args: &[Arg]) -> Result<()> {
        let cname = CString::new(name).map_err(|_| emu_err("kernel name with NUL"))?;
        let grid = [cfg.grid.0, cfg.grid.1, cfg.grid.2];
        let block = [cfg.block.0, cfg.block.1, cfg.block.2];
        let mut params: Vec<*mut c_void> = args.iter().map(Arg::as_param_ptr).collect();
        // SAFETY: the kernel's parameter list matches `args` (the backend's contract,
        // checked by the tests), and the argument values outlive the synchronous call.
        let rc = unsafe {
            (self.launch)(
                cname.as_ptr(),
                grid.as_ptr(),
                block.as_ptr(),
                cfg.smem,
                params.as_mut_ptr(),
            )
        };
        if rc != 0 {
            // SAFETY: the library returns a NUL-terminated string it owns.
            let msg = unsafe { CStr::from_ptr((self.error)()) }
                .to_string_lossy()
                .into_owned();
            return Err(emu_err(format!("launch of {name} failed: {msg}")));
        }
        let ptrs: Vec<DevPtr> = args
            .iter()
            .filter_map(|a| match a {
                Arg::Ptr(p) => Some(*p),
                _ => None,
            })
            .collect();
        self.check_guards(&|| format!("kernel {name}"), &ptrs)
    }

    fn blas_gemm(&self, g: &BlasGemm) -> Result<()> {
        // SAFETY: the backend checked the operands' lengths against the descriptor.
        unsafe { reference_gemm(g, None) };
        self.check_guards(&|| "cublasGemmStridedBatchedEx".to_string(), &[g.c])
    }

    fn lt_matmul(&self, g: &LtMatmul) -> Result<()> {
        // SAFETY: as above.
        unsafe { reference_gemm(&g.gemm, Some(g)) };
        self.check_guards(&|| "cublasLtMatmul".to_string(), &[g.gemm.c])
    }

    fn event_create(&self, _timing: bool) -> Result<EventId> {
        let mut st = self.state();
        st.next_event += 1;
        let id = st.next_event;
        st.events.insert(id, None);
        Ok(id)
    }

    fn event_destroy(&self, ev: EventId) {
        self.state().events.remove(&ev);
    }

    fn event_record(&self, ev: EventId) -> Result<()> {
        self.state().events.insert(ev, Some(Instant::now()));
        Ok(())
    }

    fn event_elapsed(&self, start: EventId, end: EventId) -> Result<f64> {
        let st = self.state();
        match (
            st.events.get(&start).copied().flatten(),
            st.events.get(&end).copied().flatten(),
        ) {
            (Some(a), Some(b)) => Ok(b.saturating_duration_since(a).as_secs_f64()),
            _ => Err(emu_err("elapsed time of an event that was never recorded")),
        }
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn block_in_use(&self, ptr: DevPtr, used: usize, size: usize) {
        let start = used.next_multiple_of(4).min(size);
        let g = Guard { used, start, size };
        // SAFETY: the allocator hands out a block of `size` bytes it got from `malloc`.
        unsafe { g.tail(ptr) }.fill(GUARD_BYTE);
        self.state().guards.insert(ptr, g);
    }

    fn block_released(&self, ptr: DevPtr) {
        self.state().guards.remove(&ptr);
    }
}

impl Drop for EmuDevice {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for (ptr, layout) in st.allocs.drain() {
            // SAFETY: allocated by malloc above with this layout.
            unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::Allocator;
    use std::sync::Arc;

    fn device() -> Option<Arc<EmuDevice>> {
        if !compiler_available() {
            brrr_backend::skip::report_skipped("cuda-emu guards", "no C++ compiler");
            return None;
        }
        let lib = build_emulator(None).expect("building the kernel emulator");
        Some(Arc::new(
            EmuDevice::load(&lib, 1 << 30).expect("loading it"),
        ))
    }

    /// `fill_b64` writing `n` 8-byte words from `ptr`.
    fn fill(dev: &EmuDevice, ptr: DevPtr, n: u64) -> Result<()> {
        let cfg = LaunchCfg {
            grid: (1, 1, 1),
            block: (32, 1, 1),
            smem: 0,
        };
        let args = [Arg::Ptr(ptr), Arg::U64(n), Arg::U64(7)];
        dev.launch(Family::Elementwise, "fill_b64", cfg, &args)
    }

    #[test]
    fn a_kernel_writing_past_a_buffer_is_an_error() {
        let Some(dev) = device() else { return };
        let alloc = Allocator::new(dev.clone());
        let block = alloc.alloc(80).unwrap(); // ten words in a 512-byte block
        fill(&dev, block.ptr, 10).unwrap();
        let e = fill(&dev, block.ptr, 11).unwrap_err().to_string();
        assert!(
            e.contains("kernel fill_b64 wrote past the end of a buffer")
                && e.contains("bytes 80..=87")
                && e.contains("has 80 bytes"),
            "{e}"
        );
        // An operand pointing inside the block (a view) is checked too, and the guard was
        // restored after the error.
        let e = fill(&dev, block.ptr + 8, 10).unwrap_err().to_string();
        assert!(e.contains("bytes 80..=87"), "{e}");
        fill(&dev, block.ptr + 8, 9).unwrap();
        // A reused block is guarded for its new, shorter buffer.
        alloc.release(block);
        let again = alloc.alloc(16).unwrap();
        fill(&dev, again.ptr, 2).unwrap();
        let e = fill(&dev, again.ptr, 3).unwrap_err().to_string();
        assert!(
            e.contains("bytes 16..=23") && e.contains("has 16 bytes"),
            "{e}"
        );
        alloc.release(again);
    }

    #[test]
    fn the_last_word_of_an_odd_16_bit_buffer_is_not_guarded() {
        let Some(dev) = device() else { return };
        let alloc = Allocator::new(dev.clone());
        let block = alloc.alloc(6).unwrap(); // three f16 elements: zeroed as two words
        dev.memset(block.ptr, Pattern::B32(0), 2).unwrap();
        let e = dev
            .memset(block.ptr, Pattern::B32(0), 3)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("memset wrote past") && e.contains("bytes 8..=11"),
            "{e}"
        );
        alloc.release(block);
    }
}
