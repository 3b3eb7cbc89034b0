//! `prepare` streams: its peak memory does not grow with the input's size (it held the
//! whole input as text and again as u32 tokens: 11 GB for a 2 GB file).
//!
//! A test binary of its own, because it counts every allocation of the process through
//! its global allocator.

use brrr_data::prepare::{PrepareOptions, TokenizerKind, prepare};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes live now and at their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn peak_memory_does_not_grow_with_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("big.txt");
    // 48 MiB of text: held whole, as before, it alone would pass the bound below, and
    // its u32 tokens would be four times more.
    let line = "the quick brown fox jumps over the lazy dog, again and again\n";
    let text = line.repeat((48 << 20) / line.len());
    std::fs::write(&input, &text).unwrap();
    let len = text.len();
    drop(text);
    let opts = PrepareOptions {
        inputs: vec![input],
        out_dir: dir.path().join("out"),
        tokenizer: TokenizerKind::Bytes,
        shard_tokens: 1 << 20,
        text_field: "text".into(),
        name: "big".into(),
        replace: false,
    };
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let s = prepare(&opts, &mut |_, _| {}).unwrap();
    let peak = PEAK.load(Ordering::Relaxed) - before;
    assert_eq!(s.tokens, len as u64 + 1);
    let bound = 24 << 20;
    assert!(
        peak < bound,
        "prepare of {len} bytes peaked at {peak} bytes of heap, over {bound}"
    );
    eprintln!(
        "prepare of {len} bytes: peak heap {:.1} MiB",
        peak as f64 / (1 << 20) as f64
    );
}
