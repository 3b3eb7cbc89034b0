//! A caching device allocator, so that a training step does not call `cudaMalloc`.
//!
//! `cuMemAlloc` and `cuMemFree` are slow (tens to hundreds of microseconds, and
//! `cuMemFree` synchronizes the device), while a training step allocates and frees
//! hundreds of activation and gradient buffers of the same sizes every step. Like
//! PyTorch's caching allocator, this one keeps freed blocks and hands them out again:
//!
//! - sizes are rounded up (to 512 B below 1 MiB, to 2 MiB above) so that blocks are
//!   reusable across slightly different requests;
//! - a request takes the smallest cached block that fits, within 2x (small) or +1/8
//!   (large) of the rounded size, so a small tensor does not pin a huge block;
//! - reuse needs no synchronization: every kernel runs on one compute stream, so work
//!   enqueued after the free runs after the work that used the block before it;
//! - uploads run on a separate copy stream, which does not follow the compute stream's
//!   order; each freed block therefore carries an event recorded on the compute stream at
//!   the free, and a copy into a reused block first waits for that event only;
//! - when the device is out of memory, the cache is emptied and the allocation retried;
//!   if it still fails the error reports the requested and the free bytes.

use crate::device::{AllocFail, DevPtr, Device, EventId};
use brrr_backend::{Error, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const SMALL: usize = 1 << 20;
const SMALL_ROUND: usize = 512;
const LARGE_ROUND: usize = 2 << 20;

/// The size actually allocated for a request of `bytes`.
pub fn rounded_size(bytes: usize) -> usize {
    if bytes <= SMALL {
        bytes.div_ceil(SMALL_ROUND) * SMALL_ROUND
    } else {
        bytes.div_ceil(LARGE_ROUND) * LARGE_ROUND
    }
}

/// The largest cached block a request of rounded size `size` may take.
fn max_fit(size: usize) -> usize {
    if size <= SMALL {
        size * 2
    } else {
        size + size / 8
    }
}

/// Counters of the allocator, for tests and for the memory report of a training run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// `cuMemAlloc` calls so far. Constant from one training step to the next once the
    /// cache is warm.
    pub device_mallocs: u64,
    /// `cuMemFree` calls so far (only when the cache is emptied).
    pub device_frees: u64,
    /// Buffer allocations served (from the cache or not).
    pub allocs: u64,
    /// Allocations served from the cache.
    pub cache_hits: u64,
    /// Bytes in live buffers (rounded sizes).
    pub in_use_bytes: u64,
    /// Bytes in cached free blocks.
    pub cached_bytes: u64,
    /// The maximum of `in_use_bytes` so far (or since [`CudaBackend::reset_peak_memory`]).
    ///
    /// [`CudaBackend::reset_peak_memory`]: brrr_backend::Backend::reset_peak_memory
    pub peak_in_use_bytes: u64,
    /// Live buffers holding a block (empty buffers hold none and are not counted).
    pub live_blocks: u64,
}

struct Cached {
    ptr: DevPtr,
    size: usize,
    /// Recorded on the compute stream when the block was freed.
    released: Option<EventId>,
}

struct State {
    free: BTreeMap<usize, Vec<Cached>>,
    event_pool: Vec<EventId>,
    stats: AllocatorStats,
}

/// A block handed out by the allocator: `size` is the rounded size.
#[derive(Debug)]
pub(crate) struct Block {
    pub ptr: DevPtr,
    pub size: usize,
}

pub(crate) struct Allocator {
    dev: Arc<dyn Device>,
    state: Mutex<State>,
}

impl Allocator {
    pub(crate) fn new(dev: Arc<dyn Device>) -> Self {
        Allocator {
            dev,
            state: Mutex::new(State {
                free: BTreeMap::new(),
                event_pool: Vec::new(),
                stats: AllocatorStats::default(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn stats(&self) -> AllocatorStats {
        self.state().stats
    }

    /// Starts a new peak at the bytes in use now.
    pub(crate) fn reset_peak(&self) {
        let mut st = self.state();
        st.stats.peak_in_use_bytes = st.stats.in_use_bytes;
    }

    /// A block of at least `bytes` for use on the compute stream.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<Block> {
        let (block, ev) = self.alloc_inner(bytes)?;
        if let Some(ev) = ev {
            self.state().event_pool.push(ev);
        }
        Ok(block)
    }

    /// A block of at least `bytes` that will first be written by the copy stream, and the
    /// event that copy must wait for (give it back with [`Allocator::recycle_event`]).
    pub(crate) fn alloc_for_copy(&self, bytes: usize) -> Result<(Block, Option<EventId>)> {
        self.alloc_inner(bytes)
    }

    pub(crate) fn recycle_event(&self, ev: EventId) {
        self.state().event_pool.push(ev);
    }

    fn alloc_inner(&self, bytes: usize) -> Result<(Block, Option<EventId>)> {
        if bytes == 0 {
            return Ok((Block { ptr: 0, size: 0 }, None));
        }
        let size = rounded_size(bytes);
        {
            let mut st = self.state();
            st.stats.allocs += 1;
            let hit = st.free.range(size..=max_fit(size)).next().map(|(&s, _)| s);
            if let Some(s) = hit {
                let list = st.free.get_mut(&s).expect("key just found");
                let c = list.pop().expect("lists in the map are non-empty");
                if list.is_empty() {
                    st.free.remove(&s);
                }
                st.stats.cache_hits += 1;
                st.stats.cached_bytes -= c.size as u64;
                st.stats.in_use_bytes += c.size as u64;
                st.stats.live_blocks += 1;
                st.stats.peak_in_use_bytes = st.stats.peak_in_use_bytes.max(st.stats.in_use_bytes);
                drop(st);
                self.dev.block_in_use(c.ptr, bytes, c.size);
                return Ok((
                    Block {
                        ptr: c.ptr,
                        size: c.size,
                    },
                    c.released,
                ));
            }
        }
        let ptr = match self.dev.malloc(size) {
            Ok(p) => p,
            Err(AllocFail::OutOfMemory) => {
                // Give the cache back to the driver and try once more.
                self.empty_cache()?;
                match self.dev.malloc(size) {
                    Ok(p) => p,
                    Err(AllocFail::OutOfMemory) => {
                        let free = self.dev.mem_info().map(|(f, _)| f).unwrap_or(0);
                        return Err(Error::OutOfMemory {
                            backend: self.dev.kind(),
                            requested: size as u64,
                            free,
                        });
                    }
                    Err(AllocFail::Other(e)) => return Err(e),
                }
            }
            Err(AllocFail::Other(e)) => return Err(e),
        };
        let mut st = self.state();
        st.stats.device_mallocs += 1;
        st.stats.in_use_bytes += size as u64;
        st.stats.live_blocks += 1;
        st.stats.peak_in_use_bytes = st.stats.peak_in_use_bytes.max(st.stats.in_use_bytes);
        drop(st);
        self.dev.block_in_use(ptr, bytes, size);
        Ok((Block { ptr, size }, None))
    }

    /// Returns a block to the cache. Called from buffer destructors: errors are not
    /// reportable there, so a failed event record only loses the copy-stream ordering
    /// information, and the block is then kept out of circulation.
    pub(crate) fn release(&self, block: Block) {
        if block.size == 0 {
            return;
        }
        self.dev.block_released(block.ptr);
        let ev = {
            let mut st = self.state();
            st.event_pool.pop()
        };
        let ev = match ev {
            Some(e) => Some(e),
            None => self.dev.event_create(false).ok(),
        };
        let released = match ev {
            Some(e) if self.dev.event_record(e).is_ok() => Some(e),
            Some(e) => {
                self.dev.event_destroy(e);
                None
            }
            None => None,
        };
        let mut st = self.state();
        st.stats.in_use_bytes -= block.size as u64;
        st.stats.live_blocks -= 1;
        if released.is_none() {
            // Without an event a copy into this block could race with compute work;
            // leak it into the "in use" count instead (never happens with a sane driver).
            st.stats.in_use_bytes += block.size as u64;
            return;
        }
        st.stats.cached_bytes += block.size as u64;
        st.free.entry(block.size).or_default().push(Cached {
            ptr: block.ptr,
            size: block.size,
            released,
        });
    }

    /// Frees every cached block (after waiting for the device, since a block's last
    /// kernels may still be running).
    pub(crate) fn empty_cache(&self) -> Result<()> {
        self.dev.synchronize()?;
        let blocks: Vec<Cached> = {
            let mut st = self.state();
            let blocks: Vec<Cached> = std::mem::take(&mut st.free)
                .into_values()
                .flatten()
                .collect();
            st.stats.cached_bytes = 0;
            st.stats.device_frees += blocks.len() as u64;
            for b in &blocks {
                if let Some(e) = b.released {
                    st.event_pool.push(e);
                }
            }
            blocks
        };
        for b in blocks {
            self.dev.free(b.ptr);
        }
        Ok(())
    }
}

impl Drop for Allocator {
    fn drop(&mut self) {
        let _ = self.empty_cache();
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for e in st.event_pool.drain(..) {
            self.dev.event_destroy(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(rounded_size(1), 512);
        assert_eq!(rounded_size(512), 512);
        assert_eq!(rounded_size(513), 1024);
        assert_eq!(rounded_size(1 << 20), 1 << 20);
        assert_eq!(rounded_size((1 << 20) + 1), 2 << 20);
        assert_eq!(rounded_size(5 << 20), 6 << 20);
        assert!(max_fit(512) >= 512);
        assert_eq!(max_fit(8 << 20), 9 << 20);
    }
}
