//! Chapter "Data loading: shards, prefetching, packing and balance"
//! (`book/src/data-loading.md`).

pub mod pack_positions;
pub mod rank_windows;
pub mod shard_header;
