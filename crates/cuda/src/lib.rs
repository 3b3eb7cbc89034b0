//! brrr-cuda
