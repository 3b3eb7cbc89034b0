//! What a forward keeps for its backward, one entry per micro-batch in flight.

use brrr_backend::{Error, Result};
use std::collections::BTreeMap;
use std::fmt;

/// Names one micro-batch in flight. A forward saves its activations under this id and
/// the backward of the same id consumes them, so several micro-batches can be between
/// their forward and their backward at once (every pipeline schedule does that: GPipe
/// runs all forwards first, 1F1B interleaves them).
///
/// The number means nothing to the layers beyond identity; a schedule usually uses the
/// micro-batch's index within the optimizer step. `MicroBatch::default()` is
/// micro-batch 0, the one `Gpt::forward_loss` and `Gpt::backward` use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MicroBatch(pub u32);

impl fmt::Display for MicroBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "micro-batch {}", self.0)
    }
}

/// A layer's saved activations, keyed by [`MicroBatch`].
///
/// `put` at the end of a forward, `take` at the start of the backward: taking removes
/// the entry, so the memory is released as soon as the backward has used it, and a
/// second backward of the same micro-batch is an error instead of a silent reuse. A
/// forward of a micro-batch that already has an entry replaces it (what evaluation does:
/// forward, forward, ..., then `clear`).
pub struct Stash<T> {
    entries: BTreeMap<MicroBatch, T>,
}

impl<T> Stash<T> {
    /// An empty stash.
    pub fn new() -> Self {
        Stash {
            entries: BTreeMap::new(),
        }
    }

    /// Saves `value` for micro-batch `mb`, replacing what an earlier forward of the same
    /// micro-batch saved.
    pub fn put(&mut self, mb: MicroBatch, value: T) {
        self.entries.insert(mb, value);
    }

    /// Removes and returns micro-batch `mb`'s entry. `layer` names the caller in the
    /// error when there is none (its backward ran without a forward of that micro-batch,
    /// or twice, or after [`Stash::clear`]).
    pub fn take(&mut self, mb: MicroBatch, layer: &'static str) -> Result<T> {
        self.entries.remove(&mb).ok_or_else(|| {
            Error::invalid(
                layer,
                format!("backward called before forward (nothing saved for {mb})"),
            )
        })
    }

    /// Drops micro-batch `mb`'s entry if there is one (activation recomputation drops a
    /// stash on purpose; unlike [`Stash::take`] a missing entry is no error).
    pub fn discard(&mut self, mb: MicroBatch) {
        self.entries.remove(&mb);
    }

    /// Micro-batch `mb`'s entry, if a forward saved one.
    pub fn get_mut(&mut self, mb: MicroBatch) -> Option<&mut T> {
        self.entries.get_mut(&mb)
    }

    /// Whether micro-batch `mb` has an entry.
    pub fn contains(&self, mb: MicroBatch) -> bool {
        self.entries.contains_key(&mb)
    }

    /// The micro-batches with an entry, in increasing order.
    pub fn micro_batches(&self) -> Vec<MicroBatch> {
        self.entries.keys().copied().collect()
    }

    /// Number of micro-batches with an entry.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is saved.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

impl<T> Default for Stash<T> {
    fn default() -> Self {
        Self::new()
    }
}
