//! NCCL (feature `cuda`).
