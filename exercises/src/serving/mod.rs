//! Chapter "Serving: KV cache, paging and continuous batching" (`book/src/serving.md`).

pub mod accept_draft;
pub mod batch_step;
pub mod kv_cache_size;
pub mod token_slots;
