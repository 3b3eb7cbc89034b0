//! brrr-nn
