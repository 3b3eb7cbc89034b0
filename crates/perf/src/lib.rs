//! brrr-perf
