//! Where a backend's buffers live, what they weigh, and the thread-safety bound that
//! holds natively but not in the browser.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// `Send + Sync` on native targets, nothing on `wasm32`.
///
/// Backends and their buffers are shared between threads natively (one backend per
/// device, each driven by its own thread), while in the browser WebGPU handles are
/// JavaScript objects bound to one thread and are neither. wgpu solves the same problem
/// with its own `WasmNotSendSync`; this is the same idea for brrr's [`Backend`] bounds.
///
/// [`Backend`]: crate::Backend
#[cfg(not(target_arch = "wasm32"))]
pub trait WasmNotSendSync: Send + Sync {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + Sync + ?Sized> WasmNotSendSync for T {}

/// `Send + Sync` on native targets, nothing on `wasm32`.
///
/// Backends and their buffers are shared between threads natively (one backend per
/// device, each driven by its own thread), while in the browser WebGPU handles are
/// JavaScript objects bound to one thread and are neither. wgpu solves the same problem
/// with its own `WasmNotSendSync`; this is the same idea for brrr's [`Backend`] bounds.
///
/// [`Backend`]: crate::Backend
#[cfg(target_arch = "wasm32")]
pub trait WasmNotSendSync {}
#[cfg(target_arch = "wasm32")]
impl<T: ?Sized> WasmNotSendSync for T {}

/// Which device of which backend a buffer lives on: `cpu:0`, `cuda:1`, `wgpu:0`.
///
/// Two backend handles with equal locations can use each other's buffers; copies
/// between different locations go through [`Backend::copy_to_device`].
///
/// [`Backend::copy_to_device`]: crate::Backend::copy_to_device
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceLocation {
    /// The backend's short name, as in [`BackendInfo::name`](crate::BackendInfo::name).
    pub backend: &'static str,
    /// Which device of that backend (a GPU ordinal, a simulated CPU device).
    pub ordinal: usize,
}

impl DeviceLocation {
    /// The location `backend:ordinal`.
    pub const fn new(backend: &'static str, ordinal: usize) -> Self {
        DeviceLocation { backend, ordinal }
    }
}

impl fmt::Display for DeviceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.backend, self.ordinal)
    }
}

/// Device memory held by live buffers, as [`Backend::memory_stats`] reports it
/// (PyTorch's `torch.cuda.memory_allocated` / `max_memory_allocated`).
///
/// Bytes are what the buffers hold (length × dtype size, or the allocator's rounded
/// block where the backend says so), not memory a cache keeps for later.
///
/// [`Backend::memory_stats`]: crate::Backend::memory_stats
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes held by live buffers now.
    pub bytes_in_use: u64,
    /// The maximum of `bytes_in_use` since the device was opened or since the last
    /// [`Backend::reset_peak_memory`](crate::Backend::reset_peak_memory).
    pub peak_bytes: u64,
    /// Buffers alive now.
    pub live_buffers: u64,
}

/// Lock-free counters behind [`MemoryStats`], for a backend to share (in an `Arc`)
/// between itself and its buffers: a buffer calls [`MemoryCounter::on_alloc`] when it
/// is created and [`MemoryCounter::on_free`] when it is dropped.
#[derive(Debug, Default)]
pub struct MemoryCounter {
    in_use: AtomicU64,
    peak: AtomicU64,
    live: AtomicU64,
}

impl MemoryCounter {
    /// Counters at zero.
    pub const fn new() -> Self {
        MemoryCounter {
            in_use: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            live: AtomicU64::new(0),
        }
    }

    /// A buffer of `bytes` was created.
    pub fn on_alloc(&self, bytes: u64) {
        // Relaxed is enough: the counters are statistics, read on their own, and each
        // update is a single atomic read-modify-write.
        let now = self.in_use.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.live.fetch_add(1, Ordering::Relaxed);
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// A buffer of `bytes` was dropped.
    pub fn on_free(&self, bytes: u64) {
        self.in_use.fetch_sub(bytes, Ordering::Relaxed);
        self.live.fetch_sub(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn stats(&self) -> MemoryStats {
        MemoryStats {
            bytes_in_use: self.in_use.load(Ordering::Relaxed),
            peak_bytes: self.peak.load(Ordering::Relaxed),
            live_buffers: self.live.load(Ordering::Relaxed),
        }
    }

    /// Sets the peak to the bytes in use now, to measure the peak of what follows.
    pub fn reset_peak(&self) {
        self.peak
            .store(self.in_use.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_displays_as_backend_colon_ordinal() {
        assert_eq!(DeviceLocation::new("cpu", 0).to_string(), "cpu:0");
        assert_eq!(DeviceLocation::new("cuda", 1).to_string(), "cuda:1");
    }

    #[test]
    fn counter_tracks_bytes_buffers_and_peak() {
        let c = MemoryCounter::new();
        c.on_alloc(100);
        c.on_alloc(50);
        c.on_free(100);
        let s = c.stats();
        assert_eq!((s.bytes_in_use, s.peak_bytes, s.live_buffers), (50, 150, 1));
        c.reset_peak();
        assert_eq!(c.stats().peak_bytes, 50);
        c.on_alloc(10);
        assert_eq!(c.stats().peak_bytes, 60);
    }

    #[test]
    fn send_sync_holds_natively() {
        fn needs<T: WasmNotSendSync>() {}
        needs::<MemoryCounter>();
        needs::<std::sync::Arc<MemoryCounter>>();
    }
}
