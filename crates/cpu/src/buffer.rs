//! [`CpuBuffer`]: host memory that counts itself against its device's
//! [`MemoryStats`](brrr_backend::MemoryStats).

use crate::cache::BufferCache;
use brrr_backend::{HostData, MemoryCounter};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// The CPU backend's buffer: a [`HostData`] whose bytes are counted against the
/// [`CpuBackend`](crate::CpuBackend) instance that created it, from creation until drop.
///
/// It dereferences to [`HostData`], so kernels and callers read and write it as one.
/// Replacing the whole `HostData` through `DerefMut` with one of another size is not
/// counted; kernels only ever write elements.
pub struct CpuBuffer {
    data: HostData,
    bytes: u64,
    counter: Arc<MemoryCounter>,
    /// Where the memory goes when the buffer is dropped (see `cache.rs`).
    cache: Arc<BufferCache>,
}

impl CpuBuffer {
    pub(crate) fn new(
        data: HostData,
        counter: &Arc<MemoryCounter>,
        cache: &Arc<BufferCache>,
    ) -> Self {
        let bytes = (data.len() * data.dtype().size_in_bytes()) as u64;
        counter.on_alloc(bytes);
        CpuBuffer {
            data,
            bytes,
            counter: counter.clone(),
            cache: cache.clone(),
        }
    }

    /// The data, leaving the device's counters as if the buffer had been dropped.
    pub fn into_host(mut self) -> HostData {
        std::mem::replace(&mut self.data, HostData::U32(Vec::new()))
    }
}

impl Deref for CpuBuffer {
    type Target = HostData;
    fn deref(&self) -> &HostData {
        &self.data
    }
}

impl DerefMut for CpuBuffer {
    fn deref_mut(&mut self) -> &mut HostData {
        &mut self.data
    }
}

impl Drop for CpuBuffer {
    fn drop(&mut self) {
        self.counter.on_free(self.bytes);
        let data = std::mem::replace(&mut self.data, HostData::U32(Vec::new()));
        // A buffer whose data was swapped for one of another size (or taken by
        // `into_host`) is not the allocation it was counted as: let it go.
        if (data.len() * data.dtype().size_in_bytes()) as u64 == self.bytes {
            self.cache.give(data);
        }
    }
}

/// A copy counted against the same device.
impl Clone for CpuBuffer {
    fn clone(&self) -> Self {
        CpuBuffer::new(self.data.clone(), &self.counter, &self.cache)
    }
}

impl std::fmt::Debug for CpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.data.fmt(f)
    }
}

impl PartialEq<HostData> for CpuBuffer {
    fn eq(&self, other: &HostData) -> bool {
        self.data == *other
    }
}

impl PartialEq<CpuBuffer> for HostData {
    fn eq(&self, other: &CpuBuffer) -> bool {
        *self == other.data
    }
}

impl PartialEq for CpuBuffer {
    fn eq(&self, other: &CpuBuffer) -> bool {
        self.data == other.data
    }
}
