//! [`BlockAllocator`]: the paged KV cache's memory as fixed-size blocks, and
//! [`BlockTable`], which of them hold one sequence's tokens.
//!
//! Written out rather than taken from a crate because it *is* the lesson of
//! PagedAttention (Kwon et al. 2023, §4.2): a sequence's keys and values live in blocks
//! of `block_size` tokens anywhere in one pool, found through a per-sequence table, so
//! memory is reserved a block at a time as a sequence grows (no reservation for the
//! longest possible output, at most `block_size - 1` slots wasted per sequence) and a
//! block can be shared by several sequences (a common prompt prefix) by counting its
//! references.
//!
//! Prefix caching (vLLM's automatic prefix caching): a full block whose keys and values
//! are computed can be registered under its contents — its tokens and the hash of
//! everything before it ([`block_hash`]). When its last reference goes it is kept,
//! content intact, as *evictable*; a later sequence whose prompt starts with the same
//! tokens takes it back instead of computing it again. Only when the free list is
//! empty is the least recently released evictable block handed out (and forgotten).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// The key of a full block: a 64-bit FNV-1a hash of the previous block's key (0 for a
/// sequence's first block) and the block's tokens, so equal keys mean equal prefixes
/// up to a hash collision of the earlier blocks (the block's own tokens are compared
/// exactly on lookup).
pub fn block_hash(parent: u64, tokens: &[u32]) -> u64 {
    const PRIME: u64 = 0x100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parent
        .to_le_bytes()
        .into_iter()
        .chain(tokens.iter().flat_map(|t| t.to_le_bytes()))
    {
        h ^= u64::from(byte);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// What a registered block holds: its parent's key and its own tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Content {
    key: u64,
    parent: u64,
    tokens: Vec<u32>,
}

/// Blocks `0..num_blocks` of `block_size` token slots each: a free list and a reference
/// count per block. Allocation is O(1); a block returns to the free list when its last
/// reference is released.
#[derive(Clone)]
pub struct BlockAllocator {
    block_size: usize,
    /// Free blocks; the last is handed out next (so a freed block is reused first,
    /// while it is warm in the caches).
    free: Vec<u32>,
    /// References to each block (0: free or evictable).
    refs: Vec<u32>,
    /// Prefix caching: what each registered block holds.
    content: Vec<Option<Content>>,
    /// Registered blocks by key.
    index: HashMap<u64, u32>,
    /// Registered blocks nobody references, by the tick of their release (oldest
    /// first): reusable as they are, evicted when the free list is empty.
    evictable: BTreeMap<u64, u32>,
    /// The tick each evictable block was released at.
    released_at: Vec<u64>,
    tick: u64,
}

/// Asked for more blocks than are free: the caller preempts a sequence or waits. Never
/// a panic: running out of KV memory is the normal state of a busy server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfBlocks {
    /// Blocks asked for.
    pub wanted: usize,
    /// Blocks free at the time.
    pub free: usize,
}

impl fmt::Display for OutOfBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of KV-cache blocks: {} wanted, {} free",
            self.wanted, self.free
        )
    }
}

impl std::error::Error for OutOfBlocks {}

impl BlockAllocator {
    /// `num_blocks` free blocks of `block_size` slots (both at least 1; a zero is
    /// raised to 1, since an empty pool can hold nothing).
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        let n = num_blocks.clamp(1, u32::MAX as usize) as u32;
        BlockAllocator {
            block_size: block_size.max(1),
            free: (0..n).rev().collect(),
            refs: vec![0; n as usize],
            content: vec![None; n as usize],
            index: HashMap::new(),
            evictable: BTreeMap::new(),
            released_at: vec![0; n as usize],
            tick: 0,
        }
    }

    /// Token slots per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.refs.len()
    }

    /// Blocks that can be handed out now: free, or cached and unreferenced.
    pub fn num_free(&self) -> usize {
        self.free.len() + self.evictable.len()
    }

    /// Blocks registered for prefix caching (referenced or evictable).
    pub fn num_cached(&self) -> usize {
        self.index.len()
    }

    /// Blocks referenced by at least one sequence.
    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free()
    }

    /// References to `block` (0 if free or out of range).
    pub fn refs(&self, block: u32) -> u32 {
        self.refs.get(block as usize).copied().unwrap_or(0)
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// One free block, with one reference: from the free list, or else the least
    /// recently released cached block, whose contents are forgotten.
    pub fn allocate(&mut self) -> Result<u32, OutOfBlocks> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self
                    .evictable
                    .pop_first()
                    .ok_or(OutOfBlocks { wanted: 1, free: 0 })?;
                if let Some(c) = self.content[b as usize].take() {
                    self.index.remove(&c.key);
                }
                b
            }
        };
        self.refs[b as usize] = 1;
        Ok(b)
    }

    /// Registers the full, computed `block` under its contents (`key` is
    /// `block_hash(parent, tokens)`), so that a later prompt with the same prefix can
    /// [`BlockAllocator::lookup`] it. A key already registered (the same prefix
    /// computed twice at once) keeps its first block; this one stays unregistered.
    pub fn register(&mut self, block: u32, parent: u64, tokens: &[u32]) -> u64 {
        let key = block_hash(parent, tokens);
        let fresh = self.refs(block) > 0
            && self.content[block as usize].is_none()
            && !self.index.contains_key(&key);
        if fresh {
            self.index.insert(key, block);
            self.content[block as usize] = Some(Content {
                key,
                parent,
                tokens: tokens.to_vec(),
            });
        }
        key
    }

    /// The registered block holding `tokens` after the prefix keyed `parent`, taken with
    /// one more reference (out of the evictable set if nobody held it); `None` on a
    /// miss.
    pub fn lookup(&mut self, parent: u64, tokens: &[u32]) -> Option<u32> {
        let key = block_hash(parent, tokens);
        let b = *self.index.get(&key)?;
        let c = self.content[b as usize].as_ref()?;
        if c.parent != parent || c.tokens != tokens {
            return None;
        }
        if self.refs[b as usize] == 0 {
            self.evictable.remove(&self.released_at[b as usize]);
        }
        self.refs[b as usize] += 1;
        Some(b)
    }

    /// One more reference to an allocated `block` (a second sequence reading the same
    /// prefix). A free or unknown block is refused: sharing it would hand out memory the
    /// free list still owns.
    pub fn share(&mut self, block: u32) -> Result<(), String> {
        match self.refs.get_mut(block as usize) {
            Some(r) if *r > 0 => {
                *r += 1;
                Ok(())
            }
            _ => Err(format!(
                "block {block} is not allocated: it cannot be shared"
            )),
        }
    }

    /// Drops one reference to `block`; the last one returns it to the free list. A
    /// free or unknown block is refused (a double free is a bookkeeping bug that would
    /// hand one block to two sequences).
    pub fn release(&mut self, block: u32) -> Result<(), String> {
        match self.refs.get_mut(block as usize) {
            Some(r) if *r > 0 => {
                *r -= 1;
                if *r == 0 {
                    match self.content[block as usize] {
                        Some(_) => {
                            self.tick += 1;
                            self.released_at[block as usize] = self.tick;
                            self.evictable.insert(self.tick, block);
                        }
                        None => self.free.push(block),
                    }
                }
                Ok(())
            }
            _ => Err(format!("block {block} is not allocated: double release")),
        }
    }

    /// Grows `table` so that it holds `tokens` tokens, allocating the blocks it lacks:
    /// all of them or none (on [`OutOfBlocks`] the table is unchanged).
    pub fn grow(&mut self, table: &mut BlockTable, tokens: usize) -> Result<(), OutOfBlocks> {
        let need = self.blocks_for(tokens).saturating_sub(table.blocks.len());
        if need > self.num_free() {
            return Err(OutOfBlocks {
                wanted: need,
                free: self.num_free(),
            });
        }
        for _ in 0..need {
            table.blocks.push(self.allocate()?);
        }
        Ok(())
    }

    /// Releases every block of `table` and empties it.
    pub fn free_table(&mut self, table: &mut BlockTable) -> Result<(), String> {
        for b in table.blocks.drain(..) {
            self.release(b)?;
        }
        Ok(())
    }
}

/// The blocks that hold one sequence's keys and values, in token order: token `i` is
/// in slot `i % block_size` of block `blocks[i / block_size]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockTable {
    /// Block ids, first token's block first.
    pub blocks: Vec<u32>,
}

impl BlockTable {
    /// The pool-wide slot of token `pos` (`block · block_size + offset`), or `None` if
    /// the table does not reach that far.
    pub fn slot(&self, pos: usize, block_size: usize) -> Option<u32> {
        let b = *self.blocks.get(pos / block_size)?;
        let slot = b as usize * block_size + pos % block_size;
        u32::try_from(slot).ok()
    }

    /// The slots of tokens `range`, in order.
    pub fn slots(&self, range: std::ops::Range<usize>, block_size: usize) -> Option<Vec<u32>> {
        range.map(|p| self.slot(p, block_size)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_come_back_when_their_last_reference_goes() {
        let mut a = BlockAllocator::new(3, 4);
        let x = a.allocate().unwrap();
        a.share(x).unwrap();
        assert_eq!((a.num_free(), a.refs(x)), (2, 2));
        a.release(x).unwrap();
        assert_eq!(a.num_free(), 2, "still referenced once");
        a.release(x).unwrap();
        assert_eq!(a.num_free(), 3);
        assert!(a.release(x).is_err(), "a double release is refused");
        assert!(a.share(x).is_err(), "a free block cannot be shared");
    }

    #[test]
    fn grow_is_all_or_nothing() {
        let mut a = BlockAllocator::new(3, 4);
        let mut t = BlockTable::default();
        a.grow(&mut t, 5).unwrap();
        assert_eq!(t.blocks.len(), 2);
        let err = a.grow(&mut t, 17).unwrap_err();
        assert_eq!(err, OutOfBlocks { wanted: 3, free: 1 });
        assert_eq!(t.blocks.len(), 2, "unchanged after a refusal");
        assert_eq!(t.slot(5, 4), Some(t.blocks[1] * 4 + 1));
        assert_eq!(t.slot(8, 4), None);
        a.free_table(&mut t).unwrap();
        assert_eq!((a.num_free(), t.blocks.len()), (3, 0));
    }

    #[test]
    fn a_registered_block_outlives_its_sequence_until_memory_is_needed() {
        let mut a = BlockAllocator::new(2, 2);
        let x = a.allocate().unwrap();
        let key = a.register(x, 0, &[5, 6]);
        assert_eq!(key, block_hash(0, &[5, 6]));
        a.release(x).unwrap();
        assert_eq!(
            (a.num_free(), a.num_cached()),
            (2, 1),
            "evictable counts as free"
        );
        // The same prefix comes back: the same block, referenced again.
        assert_eq!(a.lookup(0, &[5, 6]), Some(x));
        assert_eq!(a.refs(x), 1);
        assert_eq!(a.lookup(0, &[5, 7]), None, "other tokens");
        assert_eq!(a.lookup(key, &[5, 6]), None, "another parent");
        a.release(x).unwrap();
        // Memory is needed: the free block goes first, then the cached one is evicted.
        let y = a.allocate().unwrap();
        assert_ne!(y, x);
        assert_eq!(a.allocate().unwrap(), x);
        assert_eq!(a.num_cached(), 0);
        assert_eq!(a.lookup(0, &[5, 6]), None, "forgotten once evicted");
    }

    #[test]
    fn the_least_recently_released_block_is_evicted_first() {
        let mut a = BlockAllocator::new(2, 1);
        let (x, y) = (a.allocate().unwrap(), a.allocate().unwrap());
        a.register(x, 0, &[1]);
        a.register(y, 0, &[2]);
        a.release(y).unwrap();
        a.release(x).unwrap();
        assert_eq!(a.allocate().unwrap(), y, "released first, evicted first");
        assert_eq!(a.lookup(0, &[1]), Some(x));
        // A second registration of the same contents keeps the first block.
        let mut b = BlockAllocator::new(2, 1);
        let (p, q) = (b.allocate().unwrap(), b.allocate().unwrap());
        b.register(p, 0, &[9]);
        b.register(q, 0, &[9]);
        b.release(q).unwrap();
        assert_eq!(b.num_cached(), 1);
        assert_eq!(b.lookup(0, &[9]), Some(p));
    }
}
