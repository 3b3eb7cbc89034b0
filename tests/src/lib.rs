//! brrr-conformance
