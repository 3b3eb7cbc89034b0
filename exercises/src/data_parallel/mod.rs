//! Chapter "Data parallelism: DDP, buckets and ZeRO" (`book/src/data-parallel.md`).

pub mod bucket_assignment;
pub mod consolidate;
pub mod shard_range;
pub mod zero1_step;
pub mod zero_memory;
