//! Threads (rayon on native, none on wasm32) and SIMD dispatch.
//!
//! Kernels cut their output into *tasks* (chunks of rows or elements) whose size
//! depends only on the problem size, never on the number of threads. A kernel that
//! sums partial results per task (LayerNorm's parameter gradients, say) therefore adds
//! in the same order on every machine and thread count: results are bit-identical
//! between a laptop, a server and the single-threaded browser build.

#[cfg(not(target_arch = "wasm32"))]
use rayon::prelude::*;
use std::sync::OnceLock;

/// Elements of simple work (an add, a multiply, a conversion) below which a kernel
/// stays on the calling thread: a rayon split costs a few microseconds, roughly what
/// 2^15 such elements take on one core.
pub(crate) const MIN_TASK_WORK: usize = 1 << 15;

/// Worker threads the kernels spread over (1 on wasm32).
pub(crate) fn threads() -> usize {
    #[cfg(not(target_arch = "wasm32"))]
    {
        rayon::current_num_threads()
    }
    #[cfg(target_arch = "wasm32")]
    {
        1
    }
}

/// Rows per task so that a task holds at least [`MIN_TASK_WORK`] (`work_per_row` is
/// in the same units, roughly elements touched). Never 0.
pub(crate) fn rows_per_task(work_per_row: usize) -> usize {
    MIN_TASK_WORK.div_ceil(work_per_row.max(1)).max(1)
}

/// Runs `f(index, task)` on every task, on rayon's pool when there is more than one
/// task and more than one thread, else in order on this thread.
pub(crate) fn run<W: Send>(tasks: Vec<W>, f: impl Fn(usize, W) + Sync + Send) {
    #[cfg(not(target_arch = "wasm32"))]
    if tasks.len() > 1 && threads() > 1 {
        tasks.into_par_iter().enumerate().for_each(|(i, w)| f(i, w));
        return;
    }
    for (i, w) in tasks.into_iter().enumerate() {
        f(i, w);
    }
}

/// Like [`run`], returning each task's result in task order.
pub(crate) fn map<W: Send, R: Send>(
    tasks: Vec<W>,
    f: impl Fn(usize, W) -> R + Sync + Send,
) -> Vec<R> {
    #[cfg(not(target_arch = "wasm32"))]
    if tasks.len() > 1 && threads() > 1 {
        return tasks
            .into_par_iter()
            .enumerate()
            .map(|(i, w)| f(i, w))
            .collect();
    }
    tasks
        .into_iter()
        .enumerate()
        .map(|(i, w)| f(i, w))
        .collect()
}

/// `data` cut into consecutive chunks of `chunk` elements (the last may be shorter).
pub(crate) fn chunks<T>(data: &mut [T], chunk: usize) -> Vec<&mut [T]> {
    data.chunks_mut(chunk.max(1)).collect()
}

/// Runs `f` compiled for the widest SIMD instruction set this CPU has (AVX-512, AVX2
/// with FMA, or baseline), detected once at run time.
///
/// `pulp` wraps `f` in functions carrying `#[target_feature]`; everything `f` calls
/// that is `#[inline(always)]` is compiled for those features too, so plain loops over
/// slices auto-vectorise at the full width. Without this, Rust compiles for the
/// x86-64 baseline (SSE2, 4 lanes) and never uses AVX-512's 16.
///
/// Pass `f` as `#[inline(always)] || { ... }`, and mark closures it hands to helpers
/// the same way: a closure that LLVM leaves out of line (it may, once it is big or
/// lives in another codegen unit) is compiled for the baseline, which measured 4–5×
/// slower for GELU and softmax.
#[inline(always)]
pub(crate) fn simd<R>(f: impl FnOnce() -> R) -> R {
    static ARCH: OnceLock<pulp::Arch> = OnceLock::new();
    ARCH.get_or_init(pulp::Arch::new).dispatch(f)
}
