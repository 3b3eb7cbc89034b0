//! brrr-wgpu
