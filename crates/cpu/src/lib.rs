//! brrr-cpu
