//! Chapter "Serving: KV cache, batching, quantization, speculation and a server" (`book/src/serving.md`).

pub mod accept_draft;
pub mod batch_step;
pub mod int4_groups;
pub mod kv_cache_size;
pub mod prefix_hits;
pub mod token_slots;
