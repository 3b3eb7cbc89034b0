//! Chapter "Collectives" (`book/src/collectives.md`).

pub mod bus_bandwidth;
pub mod chunk_bounds;
pub mod ring_step;
