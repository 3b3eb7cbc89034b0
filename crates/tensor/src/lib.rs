//! brrr-tensor
